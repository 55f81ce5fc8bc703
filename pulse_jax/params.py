"""The traced numbers of a bandit run, apart from its static shape (:class:`BanditParams`).

:class:`pulse_jax.BanditConfig` fixes what changes the compiled program
(shapes, batch size, epoch counts, which rule); :class:`BanditParams` holds
the numbers a user sweeps. They enter the program as arrays, so new values
never recompile, and a stack of them ``vmap``-s (:func:`pulse_jax.sweep`).
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from pulse_jax.errors import PulseInputError, require


class BanditParams(NamedTuple):
    """Numbers of one run that may change without recompiling (a pytree of scalars).

    Attributes:
      exploration: a in the UCB-E index ``mu_hat_i + sqrt(a / N_i)`` (paper: 1).
      delta: every interval holds with probability at least ``1 - delta``.
      init_refit_lr, init_refit_l2: Adam learning rate and L2 weight of the
        initial refit of U after the first batches (paper: 0.01, 0.01).
      refit_lr, refit_l2: the same for the periodic refits (paper: 0.1, 0.01).
      fixed_lambda: PULSE's lambda held at this value in [0, 1] (an ablation);
        NaN (default) uses the estimator's own rule (the paper's plug-in).
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
      plugin: ``{name: value}``, the traced numbers the run's plug-ins declare
        (their ``traced`` field, e.g. Top-Two's ``leader_fraction``); names
        left out take the declared defaults (``None``: all of them).
    """

    exploration: Any = 1.0
    delta: Any = 0.05
    init_refit_lr: Any = 0.01
    init_refit_l2: Any = 0.01
    refit_lr: Any = 0.1
    refit_l2: Any = 0.01
    fixed_lambda: Any = math.nan
    cs_horizon: Any = 0.0
    cs_simultaneous: Any = 1.0
    refit_prior: Any = 0.0
    plugin: Any = None

    def as_arrays(self) -> "BanditParams":
        """Every number as a float32 array (what the compiled program takes)."""
        return jax.tree_util.tree_map(lambda v: jnp.asarray(v, jnp.float32), self)

    def to_dict(self) -> dict:
        out = {k: _plain(getattr(self, k)) for k in NUMBER_FIELDS}
        if self.plugin:
            out["plugin"] = {k: _plain(v) for k, v in sorted(self.plugin.items())}
        return out

    def value(self, name: str):
        """A field's value, or a plug-in parameter's (``plugin[name]``)."""
        return getattr(self, name) if name in NUMBER_FIELDS else (self.plugin or {})[name]


#: The numeric fields of :class:`BanditParams` (all but ``plugin``).
NUMBER_FIELDS = BanditParams._fields[:-1]


def plugin_value(params, name: str, default: float):
    """A plug-in's traced number from ``params.plugin`` (its declared default where the run has none)."""
    table = getattr(params, "plugin", None)
    return table[name] if isinstance(table, dict) and name in table else default


#: Allowed values per parameter: (low, high, low inclusive, high inclusive, NaN allowed).
RANGES = {
    "exploration": (0.0, math.inf, True, False, False),
    "delta": (0.0, 1.0, False, False, False),
    "init_refit_lr": (0.0, math.inf, False, False, False),
    "init_refit_l2": (0.0, math.inf, True, False, False),
    "refit_lr": (0.0, math.inf, False, False, False),
    "refit_l2": (0.0, math.inf, True, False, False),
    "fixed_lambda": (0.0, 1.0, True, True, True),
    "cs_horizon": (0.0, math.inf, True, False, False),
    "cs_simultaneous": (0.0, 1.0, True, True, False),
    "refit_prior": (0.0, math.inf, True, False, False),
}


def _plain(v):
    v = float(np.asarray(v))
    return None if math.isnan(v) else v


def _describe(name) -> str:
    lo, hi, lo_in, hi_in, nan_ok = RANGES[name]
    text = f"{'[' if lo_in else '('}{lo:g}, {hi:g}{']' if hi_in else ')'}"
    return text + (" or NaN (the estimator's own rule)" if nan_ok else "")


def check_value(name: str, value, where: str = "") -> float:
    """``value`` as a float if it is allowed for parameter ``name``; else a one-line error naming it."""
    prefix = f"{where}: " if where else ""
    if name not in RANGES:
        raise PulseInputError(f"{prefix}unknown parameter {name!r}; sweepable parameters are "
                              + ", ".join(RANGES))
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise PulseInputError(f"{prefix}{name}={value!r} is not a number") from None
    lo, hi, lo_in, hi_in, nan_ok = RANGES[name]
    if math.isnan(x):
        if nan_ok:
            return x
    elif (x > lo or (lo_in and x == lo)) and (x < hi or (hi_in and x == hi)):
        return x
    raise PulseInputError(f"{prefix}{name}={value!r} is out of range; it must lie in {_describe(name)}")


def check_params(params: BanditParams, where: str = "params") -> BanditParams:
    """Validate every field (scalars) on the host; returns a BanditParams of floats."""
    if not isinstance(params, BanditParams):
        raise PulseInputError(f"{where} must be a pulse_jax.BanditParams, got {type(params).__name__}")
    plugin = params.plugin
    if plugin is not None:
        require(isinstance(plugin, dict), f"{where}.plugin must be a dict {{name: number}}, got {type(plugin).__name__}")
        plugin = {str(k): as_number(k, v, where) for k, v in plugin.items()} or None
    return BanditParams(*(check_value(k, getattr(params, k), where) for k in NUMBER_FIELDS), plugin)


def as_number(name, value, where) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise PulseInputError(f"{where}: {name}={value!r} is not a number") from None


def parse_grid_option(text: str, plugin_names=()) -> tuple[str, list[float]]:
    """``"name=v1,v2,..."`` (the CLI's ``--grid``) as ``(name, values)``, validated (a name in
    ``plugin_names``, a plug-in's traced number, is range-checked against its declaration later)."""
    name, sep, values = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise PulseInputError(f"--grid {text!r}: expected NAME=V1,V2,... (e.g. exploration=0.5,1,2)")
    items = [v.strip() for v in values.split(",") if v.strip()]
    if not items:
        raise PulseInputError(f"--grid {name}: no values given")
    values = [as_number(name, v, f"--grid {name}") if name in plugin_names and name not in RANGES
              else check_value(name, v, f"--grid {name}") for v in items]
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
