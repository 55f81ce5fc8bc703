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
``RANGES = {field: (low, high, low_inclusive, high_inclusive, nan_allowed)}``;
values outside are refused in one line naming the path.
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from pulse_jax.errors import PulseInputError, require


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
      refit_prior: the weight, in cells, of a population prior in every refit of ``U``: each row is
        pulled towards the mean row of all candidates (``factorization.FitSettings.shrink``), so a
        model seen on one batch gets predictions near the candidates' average. 0 (default): the
        paper's refit. Predictions stay fitted on observed cells only, so validity never depends
        on it.
      exploration: deprecated: the index rule's own number now (``rule.exploration``); given here
        it is moved there with a ``DeprecationWarning``.
      fixed_lambda: deprecated: the estimator's own number now (``estimator.fixed_lambda``).
      plugin: deprecated: any plug-in's numbers, by name.
    """

    exploration: Any = None
    delta: Any = 0.05
    init_refit_lr: Any = 0.01
    init_refit_l2: Any = 0.01
    refit_lr: Any = 0.1
    refit_l2: Any = 0.01
    fixed_lambda: Any = None
    cs_horizon: Any = 0.0
    cs_simultaneous: Any = 1.0
    refit_prior: Any = 0.0
    plugin: Any = None

    def as_arrays(self) -> "BanditParams":
        """Every number as a float32 array (what the compiled program takes)."""
        return jax.tree_util.tree_map(lambda v: jnp.asarray(v, jnp.float32), self)

    def to_dict(self) -> dict:
        return {k: _plain(getattr(self, k)) for k in NUMBER_FIELDS}

    def value(self, name: str):
        """An engine field's value."""
        return getattr(self, name)


#: The engine's numbers (the fields of `BanditParams` that are not deprecated).
NUMBER_FIELDS = ("delta", "init_refit_lr", "init_refit_l2", "refit_lr", "refit_l2", "cs_horizon", "cs_simultaneous",
                 "refit_prior")
#: Deprecated fields of `BanditParams`, moved to the plug-ins' params.
LEGACY_FIELDS = ("exploration", "fixed_lambda")
PARTS = ("engine", "estimator", "rule", "stop")


def plugin_value(params, name: str, default: float):
    """Deprecated: a number of a plug-in that declares ``traced`` instead of a params class (its params
    are then a dict ``{name: value}``); a params class's field is read as ``params.name``."""
    if isinstance(params, Mapping):
        return params.get(name, default)
    table = getattr(params, "plugin", None)
    if isinstance(table, Mapping):
        return table.get(name, default)
    return getattr(params, name, default)


#: Allowed values per engine parameter: (low, high, low inclusive, high inclusive, NaN allowed).
RANGES = {
    "delta": (0.0, 1.0, False, False, False),
    "init_refit_lr": (0.0, math.inf, False, False, False),
    "init_refit_l2": (0.0, math.inf, True, False, False),
    "refit_lr": (0.0, math.inf, False, False, False),
    "refit_l2": (0.0, math.inf, True, False, False),
    "cs_horizon": (0.0, math.inf, True, False, False),
    "cs_simultaneous": (0.0, 1.0, True, True, False),
    "refit_prior": (0.0, math.inf, True, False, False),
}


def _plain(v):
    v = float(np.asarray(v))
    return None if math.isnan(v) else v


def _describe(bounds) -> str:
    lo, hi, lo_in, hi_in, nan_ok = bounds
    text = f"{'[' if lo_in else '('}{lo:g}, {hi:g}{']' if hi_in else ')'}"
    return text + (" or NaN" if nan_ok else "")


def check_value(name: str, value, where: str = "", ranges: Mapping | None = None) -> float:
    """``value`` as a float if it is allowed for parameter ``name`` (``ranges``: the engine's by
    default); else a one-line error naming it."""
    ranges = RANGES if ranges is None else ranges
    prefix = f"{where}: " if where else ""
    if name not in ranges:
        raise PulseInputError(f"{prefix}unknown parameter {name!r}; the engine's parameters are " + ", ".join(ranges))
    x = as_number(name, value, where)
    lo, hi, lo_in, hi_in, nan_ok = ranges[name]
    if math.isnan(x):
        if nan_ok:
            return x
    elif (x > lo or (lo_in and x == lo)) and (x < hi or (hi_in and x == hi)):
        return x
    raise PulseInputError(f"{prefix}{name}={value!r} is out of range; it must lie in {_describe(ranges[name])}")


def check_params(params: BanditParams, where: str = "params") -> BanditParams:
    """Validate every engine field (scalars) on the host; returns a BanditParams of floats (the deprecated
    fields are kept as given, for `run_params` to move)."""
    if not isinstance(params, BanditParams):
        raise PulseInputError(f"{where} must be a pulse_jax.BanditParams, got {type(params).__name__}")
    plugin = params.plugin
    if plugin is not None:
        require(isinstance(plugin, dict), f"{where}.plugin must be a dict {{name: number}}, got {type(plugin).__name__}")
        plugin = {str(k): as_number(k, v, where) for k, v in plugin.items()} or None
    legacy = {k: None if getattr(params, k) is None else as_number(k, getattr(params, k), where) for k in LEGACY_FIELDS}
    return params._replace(**{k: check_value(k, getattr(params, k), where) for k in NUMBER_FIELDS}, **legacy,
                           plugin=plugin)


def as_number(name, value, where) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise PulseInputError(f"{where}: {name}={value!r} is not a number") from None


# ----------------------------------------------------------------------------- a run's params


def _fields(part) -> tuple[str, ...]:
    """The number names of one part's params: a NamedTuple's fields, a dict's keys, none for ``()``."""
    if isinstance(part, Mapping):
        return tuple(part)
    return tuple(getattr(part, "_fields", ()))


def _get(part, name):
    return part[name] if isinstance(part, Mapping) else getattr(part, name)


def _set(part, name, value):
    return {**part, name: value} if isinstance(part, Mapping) else part._replace(**{name: value})


class RunParams(NamedTuple):
    """Every traced number of a run: the engine's and each plug-in's own (see the module docstring).

    The engine's fields read through (``params.delta`` is ``params.engine.delta``).
    """

    engine: BanditParams = BanditParams()
    estimator: Any = ()
    rule: Any = ()
    stop: Any = ()

    delta = property(lambda self: self.engine.delta)
    init_refit_lr = property(lambda self: self.engine.init_refit_lr)
    init_refit_l2 = property(lambda self: self.engine.init_refit_l2)
    refit_lr = property(lambda self: self.engine.refit_lr)
    refit_l2 = property(lambda self: self.engine.refit_l2)
    cs_horizon = property(lambda self: self.engine.cs_horizon)
    cs_simultaneous = property(lambda self: self.engine.cs_simultaneous)
    refit_prior = property(lambda self: self.engine.refit_prior)

    def as_arrays(self) -> "RunParams":
        """Every number as a float32 array (what the compiled program takes)."""
        return jax.tree_util.tree_map(lambda v: jnp.asarray(v, jnp.float32), self)

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

    def replace(self, values: Mapping) -> "RunParams":
        """A copy with ``values`` (``{name or path: value}``) set."""
        out = self
        for name, value in values.items():
            part, _, field = out.path_of(name).partition(".")
            out = out._replace(**{part: _set(getattr(out, part), field, value)})
        return out

    def to_dict(self) -> dict:
        """``{"engine": {...}, "estimator": {...}, "rule": {...}, "stop": {...}}`` of plain floats (NaN: None)."""
        return {"engine": self.engine.to_dict(),
                **{part: {f: _plain(_get(getattr(self, part), f)) for f in _fields(getattr(self, part))}
                   for part in PARTS[1:]}}


def declared_params(plugin):
    """A plug-in's default params: its ``params`` field, or (deprecated) a dict of its ``traced`` numbers."""
    own = getattr(plugin, "params", ())
    traced = getattr(plugin, "traced", ())
    if traced and not _fields(own):
        warnings.warn(f"plug-in {plugin.name!r}: traced=... is deprecated; declare params=YourParams(...) (a "
                      "NamedTuple of the plug-in's numbers with their defaults)", DeprecationWarning, stacklevel=3)
        return {name: float(default) for name, default, *_ in traced}
    return own


def declared_ranges(plugin) -> dict:
    """``{field: (low, high, low_inclusive, high_inclusive, nan_ok)}`` of a plug-in's numbers (open ranges
    for the deprecated ``traced`` declarations; unbounded where its params class declares none)."""
    own = getattr(plugin, "params", ())
    ranges = {f: (-math.inf, math.inf, False, False, False) for f in _fields(declared_params(plugin))}
    ranges.update(getattr(type(own), "RANGES", {}) or {})
    if not _fields(own):
        ranges.update({name: (float(low), float(high), False, False, False)
                       for name, _, low, high in getattr(plugin, "traced", ())})
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
    * a `BanditParams`: the engine's numbers, its deprecated ``exploration`` / ``fixed_lambda`` /
      ``plugin`` moved to the plug-ins that have a number of that name (with a ``DeprecationWarning``).

    Each number is checked against its declared range; a one-line error names the path.
    """
    defaults = default_params(plugins)
    if params is None:
        params = defaults
    elif isinstance(params, Mapping):
        params = defaults.replace({str(k): v for k, v in params.items()})
    elif isinstance(params, BanditParams):
        params = from_legacy(defaults, check_params(params, where), where)
    require(isinstance(params, RunParams), f"{where} must be a pulse_jax.RunParams, a BanditParams or a dict "
                                           f"{{name: value}}, got {type(params).__name__}")
    engine = check_params(params.engine, where)
    require(all(getattr(engine, k) is None for k in LEGACY_FIELDS) and engine.plugin is None,
            f"{where}.engine: exploration, fixed_lambda and plugin belong to the plug-ins' params "
            "(rule.exploration, estimator.fixed_lambda)")
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


def from_legacy(defaults: RunParams, params: BanditParams, where: str) -> RunParams:
    """A BanditParams' engine numbers, and its deprecated fields moved to the plug-ins that own them."""
    moved = {k: getattr(params, k) for k in LEGACY_FIELDS if getattr(params, k) is not None}
    moved.update(params.plugin or {})
    engine = params._replace(exploration=None, fixed_lambda=None, plugin=None)
    out = defaults._replace(engine=engine)
    if not moved:
        return out
    warnings.warn(f"{where}: BanditParams({', '.join(moved)}=...) is deprecated; these are plug-in numbers now: "
                  "pass params={'rule.exploration': ..., 'estimator.fixed_lambda': ...} or a pulse_jax.RunParams",
                  DeprecationWarning, stacklevel=4)
    for name, value in moved.items():
        owners = [f"{part}.{name}" for part in PARTS[1:] if name in _fields(getattr(out, part))]
        if not owners and name in LEGACY_FIELDS:
            continue   # a number this run's plug-ins do not read (e.g. exploration with successive halving)
        require(owners, f"{where}: {name!r} is not a number of this run's plug-ins; they have "
                        f"{', '.join(out.paths()[len(NUMBER_FIELDS):]) or 'none'}")
        out = out.replace({path: value for path in owners})
    return out


def parse_grid_option(text: str) -> tuple[str, list[float]]:
    """``"name=v1,v2,..."`` (the CLI's ``--grid``) as ``(name, values)``: numbers, each once. An engine
    number (``delta`` or ``engine.delta``) is range-checked here; a plug-in's (``rule.exploration``,
    or its field name alone) against its declaration when the run's plug-ins are known."""
    name, sep, values = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise PulseInputError(f"--grid {text!r}: expected NAME=V1,V2,... (e.g. exploration=0.5,1,2)")
    items = [v.strip() for v in values.split(",") if v.strip()]
    if not items:
        raise PulseInputError(f"--grid {name}: no values given")
    bare = name[len("engine."):] if name.startswith("engine.") else name
    values = [check_value(bare, v, f"--grid {name}") if bare in RANGES else as_number(name, v, f"--grid {name}")
              for v in items]
    repeated = sorted({v for v in values if values.count(v) > 1 or (math.isnan(v) and sum(map(math.isnan, values)) > 1)})
    if repeated:
        raise PulseInputError(f"--grid {name}: the value {repeated[0]:g} is given more than once (each point "
                              "would run twice); give each value once")
    return name, values


def seed_key(seed, where: str = "seed"):
    """The base PRNG key of a seed anywhere in ``[0, 2**64)``, refused clearly outside it.

    Seeds below ``2**32`` give ``PRNGKey(seed)``; larger ones fold their high 32
    bits into the key of the low 32 bits, so ``2**32`` does not repeat seed 0.
    """
    import jax

    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise PulseInputError(f"{where} must be an integer, got {seed!r}")
    seed = int(seed)
    if not 0 <= seed < 2**64:
        raise PulseInputError(f"{where} must lie in [0, 2**64), got {seed}")
    key = jax.random.PRNGKey(seed & 0xFFFFFFFF)
    return key if seed < 2**32 else jax.random.fold_in(key, seed >> 32)
