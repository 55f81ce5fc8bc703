"""The traced numbers of a run: the engine's (`BanditParams`) and each plug-in's own.

`pulse_jax.BanditConfig` fixes what changes the compiled program
(shapes, batch size, epoch counts, which plug-ins); the numbers a user sweeps
are traced. A run's numbers are a `RunParams`: ``engine`` (a
`BanditParams`: delta, learning rates, ...) and the ``estimator``'s, the
sampling ``rule``'s and the ``stop``'s own params pytrees, each a small
``NamedTuple`` with its defaults that the plug-in declares in its ``params``
field and receives in each of its functions (gymnax's per-environment
``EnvParams``). They enter the program as arrays, so new values never
recompile, and a stack of them ``vmap``-s (`pulse_jax.sweep`).

A number is named by its path, ``part.field`` (``engine.delta``,
``rule.exploration``, ``estimator.fixed_lambda``, ``stop.epsilon``), or by its
field name alone where that is unambiguous (every engine field, and a plug-in
field no other part of the run has). A plug-in's params class may declare
``RANGES = {field: Range(low, high, ...)}``; values outside are refused in one line
naming the path.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, NamedTuple, Union

from pulse_jax.fileio.jsonable import plain_number
from pulse_jax.errors import PulseInputError, require
from pulse_jax.protocols import Range


#: A number of a run: a float on the host, a (possibly stacked) array inside the compiled program.
Number = Union[float, Any]   # a float, or a JAX array once traced


class BanditParams(NamedTuple):
    """The engine's numbers of one run, which may change without recompiling (a pytree of scalars).

    Attributes:
      delta: every interval holds with probability at least ``1 - delta``.
      init_refit_lr: Adam learning rate of the initial refit of U after the first batches
        (paper: 0.01).
      init_refit_l2: L2 weight of that refit (paper: 0.01).
      refit_lr: Adam learning rate of the periodic refits (paper: 0.1).
      refit_l2: L2 weight of the periodic refits (paper: 0.01).
      cs_horizon: the draws per model the confidence sequences' bets are tuned
        for. 0 (default) is the anytime schedule (bets shrink like
        ``1 / sqrt(s log(1 + s))`` at draw ``s``); ``t0 > 0`` keeps them near
        ``1 / sqrt(t0)``, which narrows the intervals around ``t0`` draws and
        widens them far from it. Valid for any value: the bets stay predictable
        (``docs/confidence.md``).
      cs_simultaneous: 1 (default): every bound of every model holds at every look at once,
        with probability at least ``1 - delta``. 0: only what certification needs -- the lower
        bounds together, and each model's upper bound on its own, each with ``delta / 2``; the
        upper bounds' ``log(1/alpha)`` drops by ``log m``, a certified model is still the best with
        probability at least ``1 - delta``, and each model's interval alone still holds with
        ``1 - delta``, but not all of them at once. Values between interpolate
        (``confidence.cs_levels``).
      cs_upper_share: the share of ``delta`` given to the upper bounds (the rest to the lower ones;
        ``confidence.cs_levels``). 1/2 (default): half each. A best-model claim rests on every lower
        bound and one model's upper bound, and the upper bounds decide the exclusions, where most
        cells go; any share in (0, 1) keeps ``P(a wrong claim) <= delta`` (the union bound holds for
        every split).
      refit_prior: the weight, in cells, of a population prior in every refit of ``U``: each row is
        pulled towards the mean row of all candidates (``factorization.FitSettings.shrink``), so a
        model seen on one batch gets predictions near the candidates' average. 0 (default): the
        paper's refit. Predictions stay fitted on observed cells only, so validity never depends
        on it.
    """

    delta: Number = 0.05
    init_refit_lr: Number = 0.01
    init_refit_l2: Number = 0.01
    refit_lr: Number = 0.1
    refit_l2: Number = 0.01
    cs_horizon: Number = 0.0
    cs_simultaneous: Number = 1.0
    refit_prior: Number = 0.0
    cs_upper_share: Number = 0.5

    def as_arrays(self) -> "BanditParams":
        """Every number as a float32 array (what the compiled program takes)."""
        return _as_float32_arrays(self)

    def to_dict(self) -> dict:
        return {k: plain_number(getattr(self, k)) for k in NUMBER_FIELDS}


def _as_float32_arrays(tree):
    # JAX is imported here, not with the module: a command's numbers are checked before it loads.
    import jax
    import jax.numpy as jnp

    return jax.tree_util.tree_map(lambda v: jnp.asarray(v, jnp.float32), tree)


#: The engine's numbers, in `BanditParams`' order.
NUMBER_FIELDS = BanditParams._fields
PARTS = ("engine", "estimator", "rule", "stop")


#: Allowed values per engine parameter.
RANGES = {
    "delta": Range(0.0, 1.0),
    "init_refit_lr": Range(0.0, math.inf),
    "init_refit_l2": Range(0.0, math.inf, low_closed=True),
    "refit_lr": Range(0.0, math.inf),
    "refit_l2": Range(0.0, math.inf, low_closed=True),
    "cs_horizon": Range(0.0, math.inf, low_closed=True),
    "cs_simultaneous": Range(0.0, 1.0, low_closed=True, high_closed=True),
    "refit_prior": Range(0.0, math.inf, low_closed=True),
    "cs_upper_share": Range(0.0, 1.0),
}


def check_value(name: str, value, where: str = "", ranges: Mapping | None = None) -> float:
    """``value`` as a float if it is allowed for parameter ``name`` (``ranges``: the engine's by
    default); else a one-line error naming it."""
    ranges = RANGES if ranges is None else ranges
    prefix = f"{where}: " if where else ""
    if name not in ranges:
        raise PulseInputError(f"{prefix}unknown parameter {name!r}; the engine's parameters are " + ", ".join(ranges))
    x = as_number(name, value, where)
    allowed = Range(*ranges[name])
    if allowed.holds(x):
        return x
    raise PulseInputError(f"{prefix}{name}={value!r} is out of range; it must lie in {allowed}")


def check_params(params: BanditParams, where: str = "params") -> BanditParams:
    """Validate every engine field (scalars) on the host; returns a BanditParams of floats."""
    if not isinstance(params, BanditParams):
        raise PulseInputError(f"{where} must be a pulse_jax.BanditParams, got {type(params).__name__}")
    return BanditParams(**{k: check_value(k, getattr(params, k), where) for k in NUMBER_FIELDS})


def as_number(name, value, where) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise PulseInputError(f"{where}: {name}={value!r} is not a number") from None


# ----------------------------------------------------------------------------- a run's params


def _fields(part) -> tuple[str, ...]:
    """The number names of one part's params: a NamedTuple's fields, none for ``()`` (a plug-in's params
    are one or the other: `pulse_jax.engine.conformance` refuses anything else)."""
    return tuple(getattr(part, "_fields", ()))


def _get(part, name):
    return getattr(part, name)


def _set(part, name, value):
    return part._replace(**{name: value})


class RunParams(NamedTuple):
    """Every traced number of a run: the engine's and each plug-in's own (see the module docstring).

    The engine's fields read through (``params.delta`` is ``params.engine.delta``).
    """

    engine: BanditParams = BanditParams()
    estimator: tuple = ()   # a NamedTuple of the estimator's numbers (``()``: none)
    rule: tuple = ()
    stop: tuple = ()

    delta = property(lambda self: self.engine.delta)
    init_refit_lr = property(lambda self: self.engine.init_refit_lr)
    init_refit_l2 = property(lambda self: self.engine.init_refit_l2)
    refit_lr = property(lambda self: self.engine.refit_lr)
    refit_l2 = property(lambda self: self.engine.refit_l2)
    cs_horizon = property(lambda self: self.engine.cs_horizon)
    cs_simultaneous = property(lambda self: self.engine.cs_simultaneous)
    refit_prior = property(lambda self: self.engine.refit_prior)
    cs_upper_share = property(lambda self: self.engine.cs_upper_share)

    def as_arrays(self) -> "RunParams":
        """Every number as a float32 array (what the compiled program takes)."""
        return _as_float32_arrays(self)

    def paths(self) -> tuple[str, ...]:
        """Every number's path, ``part.field``."""
        return tuple(f"engine.{f}" for f in NUMBER_FIELDS) + tuple(
            f"{part}.{f}" for part in PARTS[1:] for f in _fields(getattr(self, part)))

    def path_of(self, name: str, where: str = "params") -> str:
        """The path a name or path refers to (one-line errors for unknown or ambiguous names)."""
        if "." in name:
            part, _, field = name.partition(".")
            ok = part in PARTS and field in (NUMBER_FIELDS if part == "engine" else _fields(getattr(self, part)))
            require(ok, f"{where}: unknown parameter {name!r}; this run's are {', '.join(self.paths())}")
            return name
        if name in NUMBER_FIELDS:
            return f"engine.{name}"
        owners = [f"{part}.{name}" for part in PARTS[1:] if name in _fields(getattr(self, part))]
        require(len(owners) < 2, f"{where}: {name!r} is a number of several plug-ins ({', '.join(owners)}); "
                                 "name it by its path")
        require(owners, f"{where}: unknown parameter {name!r}; this run's are {', '.join(self.paths())}")
        return owners[0]

    def value(self, name: str):
        """The value of a number, by name or path."""
        part, _, field = self.path_of(name).partition(".")
        return _get(getattr(self, part), field)

    def replace(self, values: Mapping, where: str = "params") -> "RunParams":
        """A copy with ``values`` (``{name or path: value}``) set; ``where`` names them in an error."""
        out = self
        for name, value in values.items():
            part, _, field = out.path_of(name, where).partition(".")
            out = out._replace(**{part: _set(getattr(out, part), field, value)})
        return out

    def to_dict(self) -> dict:
        """``{"engine": {...}, "estimator": {...}, "rule": {...}, "stop": {...}}`` of plain floats (NaN: None)."""
        return {"engine": self.engine.to_dict(),
                **{part: {f: plain_number(_get(getattr(self, part), f)) for f in _fields(getattr(self, part))}
                   for part in PARTS[1:]}}


def declared_params(plugin):
    """A plug-in's default params: its ``params`` field (``()`` for a plug-in without numbers)."""
    return plugin.params


def declared_ranges(plugin) -> dict:
    """``{field: Range}`` of a plug-in's numbers: its params class's ``RANGES``, unbounded elsewhere."""
    own = plugin.params
    ranges = {f: Range(-math.inf, math.inf) for f in _fields(own)}
    ranges.update({f: Range(*r) for f, r in (getattr(type(own), "RANGES", {}) or {}).items()})
    return ranges


def default_params(plugins) -> RunParams:
    """The run's defaults: the engine's and each plug-in's declared params, ``plugins`` being
    ``(estimator, rule, stop)``."""
    estimator, rule, stop = plugins
    return RunParams(BanditParams(), declared_params(estimator), declared_params(rule), declared_params(stop))


def run_params(plugins, params=None, where: str = "params") -> RunParams:
    """The run's `RunParams`, validated on the host (plain floats), from ``params``:

    * ``None``: every default;
    * a `RunParams` whose plug-in parts have the plug-ins' structure;
    * a mapping ``{name or path: value}`` (e.g. ``{"delta": 0.1, "rule.exploration": 0.5}``) over the defaults;
    * a `BanditParams`: the engine's numbers, every plug-in at its defaults.

    Each number is checked against its declared range; a one-line error names the path.
    """
    defaults = default_params(plugins)
    if params is None:
        params = defaults
    elif isinstance(params, Mapping):
        params = defaults.replace({str(k): v for k, v in params.items()}, where)
    elif isinstance(params, BanditParams):
        params = defaults._replace(engine=params)
    require(isinstance(params, RunParams), f"{where} must be a pulse_jax.RunParams, a BanditParams or a dict "
                                           f"{{name: value}}, got {type(params).__name__}")
    engine = check_params(params.engine, where)
    parts = {}
    for part, plugin in zip(PARTS[1:], plugins):
        given, default = getattr(params, part), getattr(defaults, part)
        require(type(given) is type(default) and _fields(given) == _fields(default),
                f"{where}.{part} must be the {plugin.name!r} plug-in's params, like {default!r}; got {given!r}")
        ranges = declared_ranges(plugin)
        value = default
        for field in _fields(default):
            value = _set(value, field, check_value(field, _get(given, field), f"{where}: {part}.{field}", ranges))
        parts[part] = value
    return RunParams(engine, **parts)


def parse_grid_option(text: str, option: str = "--grid") -> tuple[str, list[float]]:
    """``"name=v1,v2,..."`` (the CLI's ``--grid``; ``--param`` with one value) as ``(name, values)``:
    numbers, each once. An engine number (``delta`` or ``engine.delta``) is range-checked here; a plug-in's (``rule.exploration``,
    or its field name alone) against its declaration when the run's plug-ins are known."""
    name, sep, values = text.partition("=")
    name = name.strip()
    if not sep or not name:
        one = option.lstrip("-") == "param"     # --param / param=: one number, not a grid
        raise PulseInputError(f"{option} {text!r}: expected " + ("PATH=VALUE (e.g. rule.exploration=0.5)" if one else
                                                                 "NAME=V1,V2,... (e.g. exploration=0.5,1,2)"))
    items = [v.strip() for v in values.split(",") if v.strip()]
    if not items:
        raise PulseInputError(f"{option} {name}: no values given")
    bare = name[len("engine."):] if name.startswith("engine.") else name
    values = [check_value(bare, v, f"{option} {name}") if bare in RANGES else as_number(name, v, f"{option} {name}")
              for v in items]
    repeated = sorted({v for v in values if values.count(v) > 1 or (math.isnan(v) and sum(map(math.isnan, values)) > 1)})
    if repeated:
        raise PulseInputError(f"{option} {name}: the value {repeated[0]:g} is given more than once (each point "
                              "would run twice); give each value once")
    return name, values
