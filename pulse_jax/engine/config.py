"""Static settings of a run and the run's plug-ins: `BanditConfig` (numbers and shapes), `Plugins`
(estimator, sampling rule, stopping rule), and the checks and conversions every kernel entry shares
(names resolve through `pulse_jax.registry`, which imports the plug-in interfaces only)."""
from __future__ import annotations

import dataclasses
import inspect
import math
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from pulse_jax import registry
from pulse_jax.engine import conformance
from pulse_jax.errors import require
from pulse_jax.estimators.base import Estimator
from pulse_jax.rules.base import SamplingRule
from pulse_jax.stopping.base import EVERY_MODEL, StoppingRule
from pulse_jax.engine.params import BanditParams, RunParams, default_params, run_params


INTERVALS = ("cs", "paper")


@dataclasses.dataclass(frozen=True)
class BanditConfig:
    """Static parameters of one bandit run (hashable; changing them recompiles): numbers and shapes.
    The algorithm (estimator, sampling rule, stopping rule) is the run's `Plugins`, passed beside it.

    The numbers a user sweeps (exploration, delta, learning rates, L2 weights,
    a fixed lambda) are *not* here: they are `pulse_jax.BanditParams`,
    traced arrays, so new values reuse the compiled program.

    Attributes:
      n_models: m, rows of the candidate score matrix.
      n_examples: n, its columns.
      budget: total cells T, the initialization cells included.
      batch_size: B, examples per pull (paper: 64).
      init_batches: T0, batches per model at initialization (paper: 1).
      refit_every: tau, bandit steps between factorization refits (paper:
        1000); 0 disables refits after the initial one.
      init_refit_epochs: Adam steps of the initial refit of U (paper: 50).
      refit_epochs: Adam steps of each periodic refit of U (paper: 10).
      carry_refit_state: ``False`` (the paper's): each periodic refit starts Adam afresh (zero
        moments). ``True``: the periodic refits continue one Adam run, its moments carried in the
        state from refit to refit (`pulse_jax.stats.factorization.continue_refit_on_blocks`).
        Measured as accurate as the restart at the same ``refit_epochs`` and no more
        (docs/performance.md, "How many epochs a refit needs"). Predictions stay fitted on observed
        cells only: every estimate stays unbiased either way.
      gap_horizon: 0 (default): the confidence sequences' bets follow ``BanditParams.cs_horizon``.
        ``c > 0``: each model's bets, at each batch, are tuned to ``c`` times the draws at which its
        sequence would be as wide as its running gap to the model it must be told apart from (the
        leader; for the leader, the runner-up), all from the draws before the batch
        (`pulse_jax.stats.confidence.gap_horizon`): a clearly worse model bets hard and is excluded
        sooner, a near-tie bets for the long run. Valid for any value: the bets stay predictable
        (docs/confidence.md, "Horizons from the data").
      record_steps: keep a record per step (best guess, cells spent, model
        pulled, the estimator's info). ``False`` keeps only the summary: the
        records hold the final state alone (one "step"), so a fixed-confidence
        study's memory does not grow with the budget; the per-budget curves
        (``SimulationResult.best_at_budget`` and what uses it) are then refused.
      record_estimates: also record every model's estimate and bounds after
        every step (for tests and diagnostics; ``n_steps x m`` memory per repetition).
      interval: the bounds behind certification and the LUCB rule. ``"cs"``
        (default): the anytime-valid confidence sequences of
        `pulse_jax.stats.confidence.ConfSeq`, simultaneous over the models.
        ``"paper"``: the paper's fixed-count radius (Freedman for PULSE,
        Bernstein-Serfling for UCB-E) at ``delta / (m k (k + 1))`` for a
        model's k-th pull (a union bound over models and pulls).
      snapshot_budgets: budgets (cells, initialization included) at which to
        record every model's interval half-widths (for benchmarks).
      populations: for a candidate matrix with missing cells, each model's
        number of scored examples ``N_i`` (set by `pulse_jax.simulate`
        from the matrix; ``None``: every model has all ``n_examples``). Only the
        scan length depends on it; the run reads the populations from the
        scores (NaN = missing).
      concurrency: batches in flight at once (default 1). With ``c > 1`` each choice is made before
        the results of the ``c - 1`` batches asked before it are observed, as a live selection asks
        with ``c`` calls in flight (`pulse_jax.engine.concurrent_run`): the batches return in the order
        they were asked, a refit waits until none is in flight, and the choice counts the cells in
        flight as allocated (`pulse_jax.engine.kernel.InFlight`). The per-step records are then
        per *event* (an ask, the oldest batch's return, or both).
    """

    n_models: int
    n_examples: int
    budget: int
    batch_size: int = 64
    init_batches: int = 1
    refit_every: int = 1000
    init_refit_epochs: int = 50
    refit_epochs: int = 10
    record_estimates: bool = False
    record_steps: bool = True
    interval: str = "cs"
    cs_grid: int = 0
    snapshot_budgets: tuple = ()
    populations: tuple | None = None
    concurrency: int = 1
    carry_refit_state: bool = False
    gap_horizon: float = 0.0

    def __post_init__(self):
        for name in ("record_steps", "carry_refit_state"):
            require(isinstance(getattr(self, name), bool),
                    f"BanditConfig.{name} must be True or False, got {getattr(self, name)!r}")
        for name in ("n_models", "n_examples", "budget", "batch_size", "init_batches", "refit_every",
                     "init_refit_epochs", "refit_epochs", "cs_grid", "concurrency"):
            value = getattr(self, name)
            require(isinstance(value, (int, np.integer)) and not isinstance(value, bool),
                    f"BanditConfig.{name} must be an integer, got {value!r}")
            object.__setattr__(self, name, int(value))
        require(self.n_models >= 2, f"need at least 2 candidate models, got n_models={self.n_models}")
        require(self.n_examples >= 1, f"need at least 1 example, got n_examples={self.n_examples}")
        cells = self.n_models * self.n_examples
        if self.budget > cells:   # more than every cell: the rest could only be empty steps
            warnings.warn(f"budget={self.budget} is more than the matrix's {cells} cells; clipped to {cells}",
                          stacklevel=3)
            object.__setattr__(self, "budget", cells)
        require(self.n_examples >= 1, f"need at least 1 example, got n_examples={self.n_examples}")
        require(self.batch_size >= 1, f"batch_size must be >= 1, got {self.batch_size}")
        require(self.init_batches >= 1, f"init_batches must be >= 1, got {self.init_batches}")
        require(self.init_cells_per_model <= self.n_examples,
                f"batch_size x init_batches = {self.init_cells_per_model} is larger than the number "
                f"of examples ({self.n_examples}); lower batch_size or init_batches")
        require(self.budget >= self.init_cells,
                f"budget={self.budget} is smaller than the initialization, which needs n_models x "
                f"batch_size x init_batches = {self.init_cells} cells")
        require(self.refit_every >= 0, f"refit_every must be >= 0, got {self.refit_every}")
        require(self.concurrency >= 1, f"concurrency must be >= 1 (batches in flight at once), got {self.concurrency}")
        gap = self.gap_horizon
        require(isinstance(gap, (int, float, np.integer, np.floating)) and not isinstance(gap, bool)
                and np.isfinite(gap) and gap >= 0,
                f"BanditConfig.gap_horizon must be a finite number >= 0 (0: off), got {gap!r}")
        object.__setattr__(self, "gap_horizon", float(gap))
        require(self.cs_grid == 0 or self.cs_grid >= 2,
                f"cs_grid must be 0 (empirical-Bernstein sequences) or >= 2 grid means (betting), got {self.cs_grid}")
        require(self.init_refit_epochs >= 0 and self.refit_epochs >= 0,
                f"refit epochs must be >= 0, got init_refit_epochs={self.init_refit_epochs}, "
                f"refit_epochs={self.refit_epochs}")
        require(self.budget < 2**31 and self.n_models * self.n_examples < 2**31,
                "problem too large for 32-bit cell counters")
        require(self.interval in INTERVALS, f"interval must be one of {', '.join(INTERVALS)}, got {self.interval!r}")
        object.__setattr__(self, "snapshot_budgets", tuple(int(b) for b in self.snapshot_budgets))
        if self.populations is not None:
            sizes = tuple(int(p) for p in self.populations)
            require(len(sizes) == self.n_models, f"populations: {len(sizes)} entries for {self.n_models} models")
            short = [i for i, p in enumerate(sizes) if not self.init_cells_per_model <= p <= self.n_examples]
            require(not short, f"model row {short[0] if short else 0} has "
                               f"{sizes[short[0]] if short else 0} scored examples; the initialization needs "
                               f"batch_size x init_batches = {self.init_cells_per_model} (and at most n_examples)")
            object.__setattr__(self, "populations", None if all(p == self.n_examples for p in sizes) else sizes)

    @property
    def init_cells_per_model(self) -> int:
        return self.batch_size * self.init_batches

    @property
    def init_cells(self) -> int:
        return self.n_models * self.init_cells_per_model

    @property
    def bandit_budget(self) -> int:
        return self.budget - self.init_cells

    @property
    def n_steps(self) -> int:
        """Scan length: enough steps to spend the whole bandit budget.

        Full batches need ceil(bandit_budget / B) steps. A pull is smaller
        than B only when it exhausts a model (or the budget); that can add one
        step per model the budget can exhaust.
        """
        b, n, n0 = self.bandit_budget, self.n_examples, self.init_cells_per_model
        steps = -(-b // self.batch_size)
        if self.populations is not None:   # every model whose last batch is partial can add a step
            steps += sum(1 for p in self.populations if p > n0 and (p - n0) % self.batch_size)
        elif n > n0 and (n - n0) % self.batch_size:
            steps += min(self.n_models, b // (n - n0) + 1)
        # With batches in flight, an ask near the budget's end can find it all reserved by them and
        # spend nothing (up to ``concurrency - 1`` more steps), and an ask may hold back while the
        # batches in flight may settle the stop (`kernel._held`): 7 (c - 1) more steps for holds, about
        # seven waits for the batches in flight to return (on 8 x 400, c = 16: 1.05x the cells of c = 1
        # with them, 1.14x with one).
        return steps + 8 * (self.concurrency - 1)


def _refuse_plugins(init):
    """``BanditConfig``'s generated ``__init__``, which refuses a plug-in given as a field in one line
    naming where it goes (not Python's "unexpected keyword argument")."""
    def checked(self, *args, **kwargs):
        for name in ("rule", "stop", "method", "estimator"):
            require(name not in kwargs,
                    f"BanditConfig({name}=...): BanditConfig holds the run's numbers and shapes; the estimator, "
                    f"sampling rule and stopping rule go in pulse_jax.Plugins(estimator, rule=..., stop=...), "
                    f"passed beside it (simulate(scores, config, plugins))")
        init(self, *args, **kwargs)
    checked.__doc__, checked.__signature__ = init.__doc__, inspect.signature(init)
    return checked


BanditConfig.__init__ = _refuse_plugins(BanditConfig.__init__)


def log_chunk_slots(config: BanditConfig) -> int:
    """Pull-log slots a refit visits at a time: the refit period (refits fall on its multiples, so
    the chunks a refit visits are exactly the filled ones), times enough to hold >= 256 cells. A
    period longer than the run (no periodic refit) counts as the run's length, not as slots to allocate."""
    tau = max(min(config.refit_every, config.n_steps), 1)
    return tau * -(-256 // (tau * config.batch_size))


class _PluginFields(NamedTuple):
    estimator: Estimator
    rule: SamplingRule
    stop: StoppingRule


class Plugins(_PluginFields):
    """The run's algorithm: estimator, sampling rule, stopping rule (static, hashable; a new one compiles anew).

    Each is a plug-in or its name (`pulse_jax.registry`: ``"package.module:attribute"`` for one of
    your own), resolved here, so a bad name is refused where it is given::

        Plugins("pulse", rule="top_two", stop="certified")

    Attributes:
      estimator: the per-model estimate, a `pulse_jax.Estimator`: ``"pulse"`` (default), ``"ucbe"``,
        ``"naive"``, ``"pulse_hedged"``, ...
      rule: the sampling rule, a `pulse_jax.rules.SamplingRule`: ``"ucbe"`` the paper's index
        ``mu_hat_i + sqrt(a / N_i)`` (default), ``"lucb"``, ``"top_two"``, ``"successive_halving"``, ...
      stop: the stopping rule, a `pulse_jax.stopping.StoppingRule`: ``"budget"`` spends the whole
        budget (default), ``"certified"`` stops once the leader's lower bound exceeds every other
        model's upper bound (the fixed-confidence mode), ...
    """

    def __new__(cls, estimator="pulse", rule="ucbe", stop="budget"):
        return super().__new__(cls, registry.estimator(estimator, "Plugins.estimator"),
                               registry.sampling_rule(rule, "Plugins.rule"),
                               registry.stopping_rule(stop, "Plugins.stop"))

    def __repr__(self) -> str:
        return f"Plugins(estimator={self.estimator.name!r}, rule={self.rule.name!r}, stop={self.stop.name!r})"


def as_plugins(plugins) -> Plugins:
    """``plugins`` as a `Plugins`: itself, or an estimator (or its name) with the default sampling
    rule (``"ucbe"``) and stopping rule (``"budget"``)."""
    return plugins if isinstance(plugins, Plugins) else Plugins(plugins)


def refit_period(config: BanditConfig, plugins: Plugins) -> int:
    """Bandit steps between refits: ``config.refit_every`` for estimators that use predictions, else 0."""
    return config.refit_every if plugins.estimator.uses_predictions else 0


def refits_periodically(config: BanditConfig, plugins: Plugins) -> bool:
    """Whether some step of the run refits: the estimator uses predictions and the period fits in the run."""
    tau = refit_period(config, plugins)
    return bool(tau) and tau <= config.n_steps


def refit_due(config: BanditConfig, plugins: Plugins, t):
    """Every ``refit_every`` steps, at the start of the step (after the choice, before the draw), as in
    the paper's Algorithm 1; never for estimators without predictions, nor when the period is
    longer than the run (then no step carries a refit, not even a conditional one). A Python bool
    for a Python ``t``, a traced bool for a traced one."""
    if not refits_periodically(config, plugins):
        return False
    tau = refit_period(config, plugins)
    return (t % tau == 0) & (t > 0)


def get_estimator(method: str | Estimator) -> Estimator:
    """The estimator named or given by ``method`` (see `pulse_jax.registry`)."""
    return registry.estimator(method, "method")


def resolve_params(params, plugins: Plugins, where: str = "params") -> RunParams:
    """The run's `pulse_jax.RunParams`, validated on the host, from ``None`` (the defaults), a
    ``RunParams``, a dict ``{name or path: value}`` or a `pulse_jax.BanditParams`
    (`pulse_jax.engine.params.run_params`)."""
    return run_params(tuple(plugins), params, where)


def traced_params(plugins: Plugins, params) -> RunParams:
    """``params`` as a `RunParams` inside a traced run (no host checks: values may be traced).
    A `BanditParams` (the engine's numbers, perhaps stacked) gets the plug-ins' defaults,
    broadcast to the shape of its numbers."""
    if isinstance(params, RunParams):
        return params
    if params is None:
        return default_params(plugins)
    if isinstance(params, BanditParams):
        out = default_params(plugins)._replace(engine=params)
        shape = jnp.shape(params.delta)
        return out._replace(**{part: jax.tree_util.tree_map(lambda v: jnp.broadcast_to(jnp.asarray(v, jnp.float32),
                                                                                      shape), getattr(out, part))
                               for part in ("estimator", "rule", "stop")})
    return params


def check_compatible(config: BanditConfig, plugins) -> Plugins:
    """``plugins`` (`as_plugins`) checked: refused, in one line, where a plug-in breaks its contract on
    this run's shapes (`pulse_jax.engine.conformance.check_plugins`), or a rule or stopping rule needs
    an interval the estimator does not have."""
    plugins = as_plugins(plugins)
    conformance.check_plugins(config, plugins)
    registry.check_interval_needs(*plugins)
    return plugins


def check_levels(config: BanditConfig, plugins: Plugins, params: RunParams, where: str = "params") -> None:
    """Refuse, in one line, a stopping rule whose claim rests on more upper bounds than the run's
    levels pay for: ``k = stop.upper_models`` upper bounds need ``cs_simultaneous >= log k / log m``
    (`pulse_jax.stats.confidence.cs_levels`), and the claim needs ``k < n_models``. Host side, on
    concrete numbers (every point of a sweep)."""
    k, m = plugins.stop.upper_models, config.n_models
    if k <= 1:
        return
    every = k >= EVERY_MODEL
    k = min(k, m)
    require(every or k < m, f"stopping rule {plugins.stop.name!r} certifies {k} models as a set, so it needs more "
                            f"than {k} candidates; got {m}")
    need = math.log(k) / math.log(m) if m > 1 else 0.0
    s = np.asarray(params.cs_simultaneous, np.float64)
    require(bool(np.all(s >= need - 1e-6)),
            f"{where}: stopping rule {plugins.stop.name!r} rests on {k} models' upper bounds, so "
            f"cs_simultaneous must be >= log {k} / log {m} = {need:.3f} (got {float(np.min(s)):g}); "
            f"raise it (1 bounds every model at once)")
