"""The bandit engine: one pure ``step`` over an explicit state, run as a ``lax.scan``.

Reading order: :class:`BanditConfig` (static: shapes, batch size, which
rule) and :class:`pulse_jax.BanditParams` (traced numbers: exploration,
delta, learning rates...) -> :func:`build_kernel`, whose ``init`` draws the
initial batches and whose ``step`` is one bandit pull composed of ``select``,
``refit``, ``draw`` and ``observe`` (the live selector calls these
separately, on the same kernel) -> :func:`make_run` (the whole run for one
PRNG key). ``make_run(config, method)`` returns a pure function of
``(key, scores, V, params)``, so
``jax.jit(jax.vmap(run, in_axes=(0, None, None, None)))(keys, scores, V, params)``
runs every repetition at once, and ``in_axes=(0, None, None, 0)`` runs a
sweep over parameter values as well (:func:`pulse_jax.sweep`).

Sampling without replacement (:mod:`pulse_jax.sampling`): each model's
observed examples are a packed bit mask carried in the state, and a pull of
``B'`` examples is an exact uniform ``B'``-subset of the unobserved ones,
drawn in ``O(B log B + n / 32)`` work with no per-repetition permutation.
Refits work on the observed cells only: the initial batches plus a log of
every pull and its scores, kept in the state as (model, batch) blocks, so the
state holds everything observed and the episode stays constant.

Common random numbers: a model's draws depend only on the repetition key,
the model's row and how many of its examples were seen, never on the method,
so UCB-E, PULSE and Naive-Pooling with the same key see the same initial
batches, and the same k-th batch of a model whenever both pull it k times.
"""
from __future__ import annotations

import dataclasses
import functools
import warnings
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax

from pulse_jax import confidence, conformance, factorization, protocols, registry, sampling
from pulse_jax.bookkeeping import (Certificate, Snapshots, current_estimates, half_widths,  # noqa: F401
                                   interval_bounds, record_certificate, take_snapshots)
from pulse_jax.confidence import ConfSeq
from pulse_jax.errors import require
from pulse_jax.estimators import DrawDesign, Estimator, Ledger, Pull, draw_design
from pulse_jax.rules import RuleInputs
from pulse_jax.stopping import StopInputs
from pulse_jax.factorization import FitSettings
from pulse_jax.params import BanditParams, RunParams, default_params, from_legacy, run_params
from pulse_jax.ties import BEST, random_argmax, tie_uniform


INTERVALS = ("cs", "paper")


@dataclasses.dataclass(frozen=True)
class BanditConfig:
    """Static parameters of one bandit run (hashable; changing them recompiles).

    The numbers a user sweeps (exploration, delta, learning rates, L2 weights,
    a fixed lambda) are *not* here: they are :class:`pulse_jax.BanditParams`,
    traced arrays, so new values reuse the compiled program.

    Attributes:
      n_models, n_examples: shape of the candidate score matrix (m, n).
      budget: total cells T, the initialization cells included.
      batch_size: B, examples per pull (paper: 64).
      init_batches: T0, batches per model at initialization (paper: 1).
      refit_every: tau, bandit steps between factorization refits (paper:
        1000); 0 disables refits after the initial one.
      init_refit_epochs, refit_epochs: Adam steps of the initial and of each
        periodic refit of U (paper: 50 and 10).
      record_steps: keep a record per step (best guess, cells spent, model
        pulled, the estimator's info). ``False`` keeps only the summary: the
        records hold the final state alone (one "step"), so a fixed-confidence
        study's memory does not grow with the budget; the per-budget curves
        (``SimulationResult.best_at_budget`` and what uses it) are then refused.
      record_estimates: also record every model's estimate and bounds after
        every step (for tests and diagnostics; ``n_steps x m`` memory per repetition).
      rule: the sampling rule, a :class:`pulse_jax.rules.SamplingRule` or its
        name (:mod:`pulse_jax.registry`): ``"ucbe"`` the paper's index
        ``mu_hat_i + sqrt(a / N_i)`` (default), ``"lucb"``, ``"top_two"``,
        ``"successive_halving"``, or ``"package.module:attribute"``.
      interval: the bounds behind certification and the LUCB rule. ``"cs"``
        (default): the anytime-valid confidence sequences of
        :class:`pulse_jax.confidence.ConfSeq`, simultaneous over the models.
        ``"paper"``: the paper's fixed-count radius (Freedman for PULSE,
        Bernstein-Serfling for UCB-E) at ``delta / (m k (k + 1))`` for a
        model's k-th pull (a union bound over models and pulls).
      stop: the stopping rule, a :class:`pulse_jax.stopping.StoppingRule` or
        its name: ``"budget"`` spends the whole budget (default),
        ``"certified"`` stops once the leader's lower bound exceeds every
        other model's upper bound (the fixed-confidence mode).
      snapshot_budgets: budgets (cells, initialization included) at which to
        record every model's interval half-widths (for benchmarks).
      populations: for a candidate matrix with missing cells, each model's
        number of scored examples ``N_i`` (set by :func:`pulse_jax.simulate`
        from the matrix; ``None``: every model has all ``n_examples``). Only the
        scan length depends on it; the run reads the populations from the
        scores (NaN = missing).
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
    rule: Any = "ucbe"
    interval: str = "cs"
    cs_grid: int = 0
    stop: Any = "budget"
    snapshot_budgets: tuple = ()
    populations: tuple | None = None

    def __post_init__(self):
        require(isinstance(self.record_steps, bool), f"BanditConfig.record_steps must be True or False, got "
                                                     f"{self.record_steps!r}")
        for name in ("n_models", "n_examples", "budget", "batch_size", "init_batches", "refit_every",
                     "init_refit_epochs", "refit_epochs", "cs_grid"):
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
        require(self.cs_grid == 0 or self.cs_grid >= 2,
                f"cs_grid must be 0 (empirical-Bernstein sequences) or >= 2 grid means (betting), got {self.cs_grid}")
        require(self.init_refit_epochs >= 0 and self.refit_epochs >= 0,
                f"refit epochs must be >= 0, got init_refit_epochs={self.init_refit_epochs}, "
                f"refit_epochs={self.refit_epochs}")
        require(self.budget < 2**31 and self.n_models * self.n_examples < 2**31,
                "problem too large for 32-bit cell counters")
        object.__setattr__(self, "rule", registry.sampling_rule(self.rule, "BanditConfig.rule"))
        object.__setattr__(self, "stop", registry.stopping_rule(self.stop, "BanditConfig.stop"))
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
        return steps


class Episode(NamedTuple):
    """Per-repetition constants drawn at reset (never written afterwards)."""

    scores: chex.Array         # (m, n) true scores S, 0 where missing; live selection: the initial batches only
    missing: chex.Array        # (m, n) bool: cells a model has no score for (not part of its benchmark)
    V: chex.Array              # (n, r) frozen example embeddings
    model_order: chex.Array    # (m,) int32: this repetition's shuffled order of the models
    init_examples: chex.Array  # (m, T0 B) int32: the initial batches
    examples_key: chex.PRNGKey  # stream of the example draws (see sampling.draw_key)
    key: chex.PRNGKey          # per-step tie-breaking stream
    row_prior: Any = None      # factorization.RowPrior every refit of U is pulled towards (None: the paper's)


class PullLog(NamedTuple):
    """Every bandit pull and its scores, by step (slot ``t - 1`` for step ``t``); kept by methods that refit."""

    models: chex.Array    # (S,) int32 model pulled
    examples: chex.Array  # (S, B) int32 its batch
    scores: chex.Array    # (S, B) float32 the scores observed (0 past the size)
    sizes: chex.Array     # (S,) int32 cells of the batch that count (0: no pull)


class BanditState(NamedTuple):
    """Everything that changes during a run, and everything observed so far."""

    ledger: Ledger        # per-model observed / predicted sums
    estimator: Any        # the estimator's own state
    U: chex.Array         # (m, r) current model factors
    observed: chex.Array  # (m, ceil(n / 32)) uint32: packed mask of the observed cells
    init_scores: chex.Array  # (m, T0 B) scores of the initial batches
    log: PullLog          # the bandit's observed cells as blocks, for refits
    spent: chex.Array     # cells spent, initialization included
    best: chex.Array      # current best guess (row index)
    cs: ConfSeq           # anytime-valid confidence sequences, one per model
    certified: "Certificate"
    snapshots: "Snapshots"
    rule: Any = ()        # the sampling rule's own state
    stopped: Any = False  # the stopping rule has fired (final: a stopped run pulls nothing more)


class StepRecord(NamedTuple):
    best: chex.Array        # argmax of mu_hat after the step (row index)
    spent: chex.Array       # cells spent after the step, initialization included
    chosen: chex.Array      # model pulled (-1 when the step spent nothing)
    info: Any               # the estimator's own per-step pytree (PULSE: PulseInfo, its lambda; () for none)
    estimates: chex.Array   # (m,) when config.record_estimates, else ()
    low: chex.Array         # (m,) confidence-sequence bounds when config.record_estimates, else ()
    high: chex.Array


class RunResult(NamedTuple):
    """Output of one repetition. Model indices are rows of the input matrix."""

    steps: StepRecord          # per step, leading axis n_steps
    init_best: chex.Array      # best guess after initialization
    estimates: chex.Array      # (m,) final mu_hat
    radius: chex.Array         # (m,) half-width of the paper's 1 - delta interval (NaN: none)
    n_obs: chex.Array          # (m,) observed cells per model
    n_pulls: chex.Array        # (m,) pulls per model, the initial batch included
    cs_low: chex.Array         # (m,) running intersection of the confidence sequence (NaN: none)
    cs_high: chex.Array
    certified: Certificate     # first certification (-1: never within the budget)
    snapshots: Snapshots       # half-widths at config.snapshot_budgets
    cs_seq_low: chex.Array = None   # (m, C) each confidence sequence's own running bounds (PULSE: raw, proxies)
    cs_seq_high: chex.Array = None


# ----------------------------------------------------------------------------- draws


def draw_keys(key: chex.PRNGKey, n_models: int):
    """A repetition's random streams: ``(model_order, examples_key, tie_key)``.

    Depend on the key and the number of models only (never on the method),
    which is what makes comparisons between methods paired. Exposed so that a
    reference implementation can replay the same draws.
    """
    k_models, k_examples, k_ties = (jax.random.fold_in(key, i) for i in range(3))
    return jax.random.permutation(k_models, n_models).astype(jnp.int32), k_examples, k_ties


def initial_draws(examples_key: chex.PRNGKey, config: "BanditConfig", missing: chex.Array | None = None,
                  population: chex.Array | None = None) -> tuple[chex.Array, chex.Array]:
    """Stage 1's examples, ``(m, T0 B)``, and the packed mask of them: T0 ordinary draws per model.

    ``missing`` (``(m, n)`` booleans) marks cells a model has no score for: they
    start marked, so they are never drawn; ``population`` is each model's count
    of scored examples. Without them every model has all ``n`` examples.
    """
    m, n, B = config.n_models, config.n_examples, config.batch_size
    mask = sampling.empty_mask(m, n)
    if missing is not None:
        mask = mask | sampling.pack(missing)
    population = jnp.full(m, n, jnp.int32) if population is None else population

    def one_model(i, row, size):
        picked = []
        for b in range(config.init_batches):
            ex = sampling.draw(sampling.draw_key(examples_key, i, b * B), row, b * B, size, B)
            row = sampling.mark(row, ex, jnp.ones(B, bool))
            picked.append(ex)
        return jnp.concatenate(picked), row

    return jax.vmap(one_model)(jnp.arange(m, dtype=jnp.int32), mask, population)


# ----------------------------------------------------------------------------- pieces


def _where_tree(pred, new, old):
    return jax.tree_util.tree_map(lambda a, b: jnp.where(pred, a, b), new, old)


def observed_blocks(episode: Episode, state: BanditState,
                    log_slots: int | None = None) -> tuple[factorization.CellBlocks, ...]:
    """Every observed cell as blocks: the initial batches (one block per model), then the pull log.

    ``log_slots`` (static) keeps only the first slots of the log, when the
    caller knows no later step has happened yet (0: the initial batches only).
    """
    m, n0 = episode.init_examples.shape
    rows = jnp.arange(m, dtype=jnp.int32)
    init = factorization.CellBlocks(rows, episode.init_examples, state.init_scores, jnp.ones((m, n0), bool))
    if log_slots == 0:
        return (init,)
    log = state.log if log_slots is None else jax.tree_util.tree_map(lambda a: a[:log_slots], state.log)
    pulls = factorization.CellBlocks(log.models, log.examples, log.scores,
                                     jnp.arange(log.examples.shape[1]) < log.sizes[:, None])
    return init, pulls


def adam_refit(epochs: int, learning_rate, l2, shrink=0.0, row_prior=None) -> FitSettings:
    """The bandit's refit schedule: ``epochs`` (static) Adam steps; rate, L2 weight and the prior's
    weight (``BanditParams.refit_prior``) may be traced; ``row_prior`` is the episode's
    :class:`pulse_jax.factorization.RowPrior` (None: the candidates' own mean row)."""
    return FitSettings(epochs, l2, optax.adam(learning_rate), shrink, row_prior)


def _refit(episode: Episode, state: BanditState, settings: FitSettings, log_slots: int | None = None,
           filled: factorization.FilledPrefix | None = None) -> BanditState:
    """Refit U on every observed cell (V frozen, warm start); recompute F and Phi.

    ``F_i``/``Phi_i`` (sums of predictions and their squares over model i's
    unobserved cells) are the dense row sums minus the observed cells' part.
    ``log_slots`` slices the log statically; ``filled`` visits only its used
    slots (see :class:`pulse_jax.factorization.FilledPrefix`).
    """
    blocks = observed_blocks(episode, state, log_slots)
    filled = filled if len(blocks) > 1 else None
    visits = factorization.plan_visits(episode.V, blocks, filled)
    n = episode.scores.shape[1]
    U = factorization.refit_rows_on_blocks(state.U, episode.V, blocks, n, settings, filled, visits)
    all_sum, all_sq_sum = factorization.prediction_row_sums(U, episode.V, episode.missing)   # a model's benchmark only
    seen_sum, seen_sq_sum = factorization.block_prediction_sums(U, episode.V, blocks, filled, visits)
    ledger = state.ledger._replace(pred_sum=all_sum - seen_sum, pred_sq_sum=all_sq_sum - seen_sq_sum)
    return state._replace(U=U, ledger=ledger)


def log_chunk_slots(config: BanditConfig) -> int:
    """Pull-log slots a refit visits at a time: the refit period (refits fall on its multiples, so
    the chunks a refit visits are exactly the filled ones), times enough to hold >= 256 cells."""
    tau = max(config.refit_every, 1)
    return tau * -(-256 // (tau * config.batch_size))


# ----------------------------------------------------------------------------- the kernel
#
# One bandit step is select -> refit (when due) -> draw -> observe. Every function below is pure and
# takes its arguments in one order: (config, plugins, episode, state, params, t, ...). ``config`` and
# ``plugins`` are static (hashable); everything else may be traced.


class Plugins(NamedTuple):
    """The run's plug-ins: estimator, sampling rule, stopping rule (static, hashable)."""

    estimator: Estimator
    rule: Any
    stop: Any


def plugins_of(config: BanditConfig, estimator: Estimator) -> Plugins:
    return Plugins(estimator, config.rule, config.stop)


def refit_period(config: BanditConfig, plugins: Plugins) -> int:
    """Bandit steps between refits: ``config.refit_every`` for estimators that use predictions, else 0."""
    return config.refit_every if plugins.estimator.uses_predictions else 0


def refit_due(config: BanditConfig, plugins: Plugins, t):
    """Every ``refit_every`` steps, at the start of the step (after the choice, before the draw), as in
    the paper's Algorithm 1; never for estimators without predictions. A Python bool for a Python
    ``t``, a traced bool for a traced one."""
    tau = refit_period(config, plugins)
    if not tau:
        return False
    return (t % tau == 0) & (t > 0)


def _log_inv_alpha(config: BanditConfig, plugins: Plugins, params):
    """The ``(lower, upper)`` levels of the confidence sequences (:func:`confidence.cs_levels`)."""
    return confidence.cs_levels(params.delta, config.n_models, plugins.estimator.n_sequences, params.cs_simultaneous)


def _first_state(config: BanditConfig, plugins: Plugins, first, observed, population, U, params) -> BanditState:
    """The state after the initial batches ``first`` (``(m, T0 B)`` scores), before any fit (``U`` the rows
    the first fit starts from)."""
    m, B, C = config.n_models, config.batch_size, plugins.estimator.n_sequences
    zeros = jnp.zeros(m, jnp.float32)
    ledger = Ledger(jnp.full(m, config.init_cells_per_model, jnp.int32), jnp.ones(m, jnp.int32), first.sum(1),
                    (first * first).sum(1), zeros, zeros, population)
    # One log slot per step, rounded up to whole refit chunks (one empty slot when there are no steps).
    chunk = log_chunk_slots(config)
    slots = -(-max(config.n_steps, 1) // chunk) * chunk if plugins.estimator.uses_predictions else 0
    log = PullLog(jnp.zeros(slots, jnp.int32), jnp.zeros((slots, B), jnp.int32), jnp.zeros((slots, B), jnp.float32),
                  jnp.zeros(slots, jnp.int32))
    # The initial batches enter the confidence sequences as raw scores: no prediction exists yet
    # (for PULSE this is lambda = 0), and each batch is in its sampler's uniform draw order.
    cs = confidence.cs_init(m, C, config.cs_grid)
    if plugins.estimator.has_interval:
        rows = jnp.broadcast_to(first[:, None], (m, C) + first.shape[1:])
        cs = confidence.cs_update_all(cs, jnp.zeros(m, jnp.int32), zeros, population.astype(jnp.float32), rows,
                                      jnp.zeros_like(rows), jnp.ones_like(rows), first, jnp.ones(first.shape, bool),
                                      _log_inv_alpha(config, plugins, params), params.cs_horizon)
    nan = jnp.full((len(config.snapshot_budgets), m), jnp.nan, jnp.float32)
    return BanditState(ledger, None, U, observed, first, log,
                       jnp.int32(config.init_cells), jnp.int32(0), cs, Certificate(jnp.int32(-1), jnp.int32(-1)),
                       Snapshots(nan, nan), plugins.rule.init(config), jnp.bool_(False))


def init(config: BanditConfig, plugins: Plugins, key, scores, V, params, init_U=None,
         row_prior=None) -> tuple[Episode, BanditState]:
    """Stage 1: the repetition's draws, the initial batches (``scores`` needs only their cells; NaN
    marks a cell a model has no score for) and the first fit of U, which starts from ``init_U``
    (``(m, r)``; zeros when None) and, like every refit, is pulled towards ``row_prior``
    (a :class:`pulse_jax.factorization.RowPrior`; None: the candidates' mean row) with weight
    ``params.refit_prior``."""
    params = _traced_params(plugins, params)
    estimator = plugins.estimator
    model_order, examples_key, tie_key = draw_keys(key, config.n_models)
    missing = jnp.isnan(scores)
    scores = jnp.where(missing, 0.0, scores)
    population = jnp.sum(~missing, axis=1).astype(jnp.int32)
    first_examples, observed = initial_draws(examples_key, config, missing, population)
    episode = Episode(scores, missing, V, model_order, first_examples, examples_key, tie_key, row_prior)
    first = jnp.take_along_axis(scores, first_examples, axis=1)
    U = jnp.zeros((config.n_models, V.shape[1]), jnp.float32) if init_U is None else jnp.asarray(init_U, jnp.float32)
    state = _first_state(config, plugins, first, observed, population, U, params)
    if estimator.uses_predictions:
        settings = adam_refit(config.init_refit_epochs, params.init_refit_lr, params.init_refit_l2,
                              params.refit_prior, episode.row_prior)
        state = _refit(episode, state, settings, log_slots=0)     # nothing is in the log yet
    state = state._replace(estimator=estimator.init(state.ledger, params.estimator))
    state = state._replace(best=recommend(config, plugins, episode, state, 0, params))
    state = record_certificate(config, estimator, state, params)
    return episode, take_snapshots(config, estimator, state, params, jnp.int32(-1))


def recommend(config: BanditConfig, plugins: Plugins, episode: Episode, state: BanditState, t, params):
    """The run's best guess: ``argmax mu_hat`` over the models the rule deems eligible (random ties)."""
    mu = current_estimates(plugins.estimator, state, config.n_examples, params)
    if plugins.rule.eligible is not None:
        mu = jnp.where(plugins.rule.eligible(state.rule), mu, -jnp.inf)
    return random_argmax(tie_uniform(episode.key, t, BEST), mu, episode.model_order)


def room(config: BanditConfig, state: BanditState, i, reserved=0):
    """``B' = min(B, |U_i|, budget left - reserved)`` for model ``i`` (never below 0)."""
    ledger = state.ledger
    size = jnp.minimum(jnp.minimum(config.batch_size, ledger.population[i] - ledger.n_obs[i]),
                       config.budget - state.spent - reserved)
    return jnp.maximum(size, 0)


def select(config: BanditConfig, plugins: Plugins, episode: Episode, state: BanditState, params, t,
           blocked=None, reserved=0):
    """Step 1: ``(state, i, size)``, the model the sampling rule chooses and the batch size ``B'``.

    The rule sees the models that are not exhausted (nor ``blocked``: a live
    selector blocks models with a batch in flight) and, if it asks, the
    simultaneous bounds. ``size = 0`` means nothing to do: always at ``t = 0``,
    when the rule chooses no model, and once the stopping rule says done. The
    rule's state is kept from step 1 on (at ``t = 0`` nothing happens).
    """
    params = _traced_params(plugins, params)
    estimator, rule, stop = plugins
    m, ledger = config.n_models, state.ledger
    exhausted = ledger.n_obs >= ledger.population
    active = ~exhausted if blocked is None else ~exhausted & ~blocked
    looks = _stop_inputs(config, plugins, state, params, t)
    inputs = RuleInputs(t, looks.estimates, looks.low, looks.high, ledger.n_obs, ledger.n_pulls, active, exhausted,
                        episode.model_order, episode.key)
    i, rule_state = rule.choose(state.rule, inputs, params.rule)
    valid = (i >= 0) & (i < m)
    i = jnp.clip(i, 0, m - 1).astype(jnp.int32)
    done = state.stopped | stop.done(looks, params.stop)
    go = valid & active[i] & (t >= 1) & ~done
    moves = (t >= 1) & ~done           # a stopped run changes nothing, its rule's state included
    if rule.eligible is not None:      # the recommendation follows the rule's eligible set when it changes
        changed = moves & jnp.any(rule.eligible(rule_state) != rule.eligible(state.rule))
        best = recommend(config, plugins, episode, state._replace(rule=rule_state), t, params)
        state = state._replace(best=jnp.where(changed, best, state.best))
    state = state._replace(rule=_where_tree(moves, rule_state, state.rule), stopped=state.stopped | (done & (t >= 1)))
    return state, i, jnp.where(go, room(config, state, i, reserved), 0)


def _stop_inputs(config: BanditConfig, plugins: Plugins, state: BanditState, params, t) -> StopInputs:
    """What the rules see at step ``t``: estimates, and the bounds when a rule needs them (else NaN)."""
    estimator, rule, stop = plugins
    mu = current_estimates(estimator, state, config.n_examples, params)
    low, high = interval_bounds(estimator, state, config, params) if rule.needs_interval or stop.needs_interval \
        else (jnp.full(config.n_models, jnp.nan, jnp.float32),) * 2
    return StopInputs(t, state.spent, config.budget, mu, low, high, state.certified.spent >= 0, state.certified.model)


def refit(config: BanditConfig, plugins: Plugins, episode: Episode, state: BanditState, params, t, size, due,
          log_slots=None):
    """Step 2: when ``due`` and the step spends (``size > 0``), refit U on all observed cells and refresh
    the prediction sums and the estimator.

    ``due`` is a Python bool or an *unbatched* traced bool (it depends on the
    step only), so under ``vmap`` it stays a real ``lax.cond`` and plain steps
    never pay for a refit. Given a traced step ``t`` (unbatched too) and no
    static ``log_slots``, the refit visits only the ``t - 1`` log slots steps
    ``1 .. t - 1`` may have filled.
    """
    params = _traced_params(plugins, params)
    if not plugins.estimator.uses_predictions or due is False:
        return state

    def refit_if_live(state):
        settings = adam_refit(config.refit_epochs, params.refit_lr, params.refit_l2, params.refit_prior,
                              episode.row_prior)
        dynamic = t is not None and log_slots is None
        filled = factorization.FilledPrefix(jnp.maximum(t - 1, 0), log_chunk_slots(config)) if dynamic else None
        new = _refit(episode, state, settings, log_slots, filled)
        new = new._replace(estimator=plugins.estimator.refresh(new.estimator, new.ledger, config.n_examples,
                                                               params.estimator))
        return _where_tree(size > 0, new, state)

    return refit_if_live(state) if due is True else jax.lax.cond(due, refit_if_live, lambda s: s, state)


def draw(config: BanditConfig, plugins: Plugins, episode: Episode, state: BanditState, i, size, params=None):
    """Step 3: the batch ``(examples, valid)`` of length B: a uniform ``size``-subset of model i's
    unobserved examples, or, for an estimator with ``draw_weights``, ``size`` of them drawn one
    after another with probabilities proportional to its weights (:func:`sampling.weighted_draw`;
    ``params`` the run's :class:`pulse_jax.RunParams`, the defaults when None)."""
    B, n_obs_i = config.batch_size, state.ledger.n_obs[i]
    key = sampling.draw_key(episode.examples_key, i, n_obs_i)
    if plugins.estimator.draw_weights is not None:
        params = _traced_params(plugins, params)
        _, _, weights = _draw_weights(plugins, episode, state, i, params)
        return sampling.weighted_draw(key, weights, B), jnp.arange(B) < size
    examples = sampling.draw(key, state.observed[i], n_obs_i, state.ledger.population[i], B)
    return examples, jnp.arange(B) < size


def _draw_weights(plugins: Plugins, episode: Episode, state: BanditState, i, params):
    """Model i's predictions on every example, which of them are unseen, and the estimator's draw
    weights (0 off the unseen ones): a function of the state alone, so fixed before the draw."""
    n = episode.V.shape[0]
    f = jax.nn.sigmoid(jnp.matmul(episode.V, state.U[i], precision=factorization.PRECISION))
    unseen = ~sampling.unpack(state.observed[i], n) & ~episode.missing[i]
    return f, unseen, jnp.where(unseen, plugins.estimator.draw_weights(f, unseen, params.estimator), 0.0)


def _design(plugins: Plugins, episode: Episode, state: BanditState, i, examples, valid, params) -> DrawDesign:
    """The :class:`DrawDesign` of a weighted pull of ``examples`` (recomputed from the same state)."""
    return draw_design(*_draw_weights(plugins, episode, state, i, params), examples, valid)


def _pull(plugins: Plugins, episode: Episode, state: BanditState, i, size, examples, valid, scores, params) -> Pull:
    """The batch as the estimator sees it: scores and the current predictions, zero past ``size``."""
    s = jnp.where(valid, scores, 0.0)
    if plugins.estimator.uses_predictions:
        f = jax.nn.sigmoid(jnp.matmul(episode.V[examples], state.U[i], precision=factorization.PRECISION))
        f = jnp.where(valid, f, 0.0)
    else:
        f = jnp.zeros_like(s)
    design = _design(plugins, episode, state, i, examples, valid, params) if plugins.estimator.draw_weights is not None \
        else None
    return Pull(i, size, jnp.sum(s), jnp.sum(f), s, f, valid, design)


def _add_to_ledger(ledger: Ledger, pull: Pull) -> Ledger:
    i, s, f = pull.model, pull.scores, pull.preds
    return Ledger(population=ledger.population, n_obs=ledger.n_obs.at[i].add(pull.size),
                  n_pulls=ledger.n_pulls.at[i].add((pull.size > 0).astype(jnp.int32)),
                  obs_sum=ledger.obs_sum.at[i].add(pull.score_sum), obs_sq_sum=ledger.obs_sq_sum.at[i].add(jnp.sum(s * s)),
                  pred_sum=ledger.pred_sum.at[i].add(-pull.pred_sum),
                  pred_sq_sum=ledger.pred_sq_sum.at[i].add(-jnp.sum(f * f)))


def _add_to_log(log: PullLog, t, pull: Pull, examples) -> PullLog:
    """Slot ``t - 1`` holds step ``t``'s pull (left as it was when the step spends nothing)."""
    slot, live = jnp.maximum(t - 1, 0), pull.size > 0
    keep = lambda new, old: jnp.where(live, new, old)   # noqa: E731
    return PullLog(log.models.at[slot].set(keep(pull.model, log.models[slot])),
                   log.examples.at[slot].set(keep(examples, log.examples[slot])),
                   log.scores.at[slot].set(keep(pull.scores, log.scores[slot])),
                   log.sizes.at[slot].set(keep(pull.size, log.sizes[slot])))


def observe(config: BanditConfig, plugins: Plugins, episode: Episode, state: BanditState, params, t, i, size,
            examples, valid, scores):
    """Steps 4-5: record the batch's ``scores`` (length B, ignored where not ``valid``); ``(state, info)``.

    The confidence sequences and the estimator take the batch in from the
    bookkeeping *before* it (everything they use is predictable), then the
    ledger, the pull log and the rule take it in, and the recommendation, the
    certificate and the snapshots are brought up to date.
    """
    params = _traced_params(plugins, params)
    estimator, n, ledger = plugins.estimator, config.n_examples, state.ledger
    pull = _pull(plugins, episode, state, i, size, examples, valid, scores, params)
    cs = state.cs
    if estimator.has_interval:
        y, lower, width = estimator.proxies(state.estimator, ledger, pull, n, params.estimator)
        cs = confidence.cs_update(cs, i, ledger.n_obs[i], ledger.obs_sum[i], ledger.population[i].astype(jnp.float32),
                                  y, lower, width, pull.scores, valid, _log_inv_alpha(config, plugins, params),
                                  params.cs_horizon)
    est, info = estimator.update(state.estimator, ledger, pull, n, params.estimator)   # a no-op when size == 0
    observed = state.observed.at[i].set(sampling.mark(state.observed[i], examples, valid))
    log = _add_to_log(state.log, t, pull, examples) if estimator.uses_predictions else state.log
    spent_before = state.spent
    state = state._replace(ledger=_add_to_ledger(ledger, pull), estimator=est, observed=observed, log=log,
                           spent=state.spent + size, cs=cs, rule=plugins.rule.update(state.rule, i, size))
    state = state._replace(best=jnp.where(size > 0, recommend(config, plugins, episode, state, t, params), state.best))
    state = record_certificate(config, estimator, state, params)
    return take_snapshots(config, estimator, state, params, spent_before), info


def step(config: BanditConfig, plugins: Plugins, episode: Episode, state: BanditState, params, t, log_slots=None,
         follow=None):
    """Bandit step ``t`` (1-based; ``t = 0`` is a no-op used for padding): :func:`select`, :func:`refit`
    when due, :func:`draw`, :func:`observe` the true scores; ``(state, record)``. ``follow`` (a model
    index, -1 for none) replaces the rule's choice; the batch size follows the usual rule."""
    params = _traced_params(plugins, params)
    if follow is None:
        state, i, size = select(config, plugins, episode, state, params, t)
    else:
        i = jnp.clip(follow, 0, config.n_models - 1)
        size = jnp.where((follow >= 0) & (t >= 1), room(config, state, i), 0)
    state = refit(config, plugins, episode, state, params, t, size, refit_due(config, plugins, t), log_slots)
    examples, valid = draw(config, plugins, episode, state, i, size, params)
    state, info = observe(config, plugins, episode, state, params, t, i, size, examples, valid,
                          episode.scores[i, examples])
    return state, _record(config, plugins, state, params, jnp.where(size > 0, i, -1), info)


def _record(config: BanditConfig, plugins: Plugins, state: BanditState, params, chosen, info) -> StepRecord:
    empty = jnp.zeros((0,), jnp.float32)
    if not config.record_estimates:
        return StepRecord(state.best, state.spent, chosen, info, empty, empty, empty)
    low, high = interval_bounds(plugins.estimator, state, config, params, "cs")
    estimates = current_estimates(plugins.estimator, state, config.n_examples, params)
    return StepRecord(state.best, state.spent, chosen, info, estimates, low, high)


def bounds(config: BanditConfig, plugins: Plugins, state: BanditState, params):
    """``(estimates, low, high)`` of every model now (the live report's numbers)."""
    params = _traced_params(plugins, params)
    low, high = interval_bounds(plugins.estimator, state, config, params)
    return current_estimates(plugins.estimator, state, config.n_examples, params), low, high


class Kernel(NamedTuple):
    """The kernel functions above with ``(config, plugins)`` bound: simulation and live selection share them.

    * ``init(key, scores, V, params) -> (episode, state)``;
    * ``select(episode, state, params, t, blocked=None, reserved=0) -> (state, i, size)``;
    * ``refit(episode, state, params, t, size, due, log_slots=None) -> state``;
    * ``draw(episode, state, i, size, params=None) -> (examples, valid)``;
    * ``observe(episode, state, params, t, i, size, examples, valid, scores) -> (state, info)``;
    * ``step(episode, state, params, t, log_slots=None, follow=None) -> (state, record)``;
    * ``bounds(state, params) -> (estimates, low, high)``;
    * ``refit_due(t)``;
    * ``stop_status(state, params, t) -> (done, claim)``.
    """

    init: Any
    select: Any
    refit: Any
    draw: Any
    observe: Any
    step: Any
    bounds: Any
    refit_due: Any
    stop_status: Any


def build_kernel(config: BanditConfig, estimator: Estimator) -> Kernel:
    """The kernel of ``estimator`` and ``config``'s rule and stopping rule (see :class:`Kernel`)."""
    plugins = plugins_of(config, estimator)
    bind = lambda f: functools.partial(f, config, plugins)   # noqa: E731
    return Kernel(bind(init), bind(select), bind(refit), bind(draw), bind(observe), bind(step),
                  bind(bounds), bind(refit_due), bind(stop_status))


# ----------------------------------------------------------------------------- run


def get_estimator(method: str | Estimator) -> Estimator:
    """The estimator named or given by ``method`` (see :mod:`pulse_jax.registry`); functions written
    for the earlier signatures are adapted (:func:`pulse_jax.protocols.adapt_estimator`)."""
    return protocols.adapt_estimator(registry.estimator(method, "method"))


def resolve_params(params, plugins: Plugins, where: str = "params") -> RunParams:
    """The run's :class:`pulse_jax.RunParams`, validated on the host, from ``None`` (the defaults), a
    ``RunParams``, a dict ``{name or path: value}`` or a :class:`pulse_jax.BanditParams`
    (:func:`pulse_jax.params.run_params`)."""
    return run_params(tuple(plugins), params, where)


def with_plugin_params(params, plugins: Plugins, where: str = "params") -> RunParams:
    """Deprecated: :func:`resolve_params`."""
    warnings.warn("bandit.with_plugin_params is deprecated; use bandit.resolve_params", DeprecationWarning,
                  stacklevel=2)
    return resolve_params(params, plugins, where)


def _traced_params(plugins: Plugins, params) -> RunParams:
    """``params`` as a :class:`RunParams` inside a traced run (no host checks: values may be traced).
    A :class:`BanditParams` (the engine's numbers, perhaps stacked) gets the plug-ins' defaults,
    broadcast to the shape of its numbers."""
    if isinstance(params, RunParams):
        return params
    if params is None:
        return default_params(plugins)
    if isinstance(params, BanditParams):
        out = from_legacy(default_params(plugins), params, "params")
        shape = jnp.shape(params.delta)
        return out._replace(**{part: jax.tree_util.tree_map(lambda v: jnp.broadcast_to(jnp.asarray(v, jnp.float32),
                                                                                      shape), getattr(out, part))
                               for part in ("estimator", "rule", "stop")})
    return params


def check_compatible(config: BanditConfig, estimator: Estimator) -> None:
    """Refuse, in one line, a plug-in that breaks its contract on this run's shapes
    (:func:`pulse_jax.conformance.check_plugins`), or a rule or stopping rule that needs an interval
    the method does not have."""
    conformance.check_plugins(config, estimator)
    if estimator.has_interval:
        return
    for kind, plugin in (("rule", config.rule), ("stop", config.stop)):
        require(not plugin.needs_interval,
                f"method {estimator.name!r} has no valid interval, so it cannot use {kind}={plugin.name!r} "
                "(it needs the confidence bounds)")


#: Up to this many refit phases, and with a pull log of at least this many cells, ``make_run``
#: unrolls the phases so that each refit works on a log slice of static, growing size (cheaper
#: refits, longer compilation); otherwise one scan, whose refits all see the whole log (cheap
#: when the log is small).
MAX_UNROLLED_PHASES = 8
UNROLL_MIN_LOG_CELLS = 20_000


def make_run(config: BanditConfig, method: str | Estimator = "pulse", follow: bool = False):
    """Return ``run(key, scores, V, params=None) -> RunResult`` for one repetition (pure, jittable).

    ``scores`` is the (m, n) float32 matrix of true scores in [0, 1]; ``V`` the
    (n, r) example embeddings from the train split (any (n, r) array for UCB-E,
    which ignores it); ``params`` the traced numbers, a :class:`pulse_jax.RunParams`
    (the engine's and each plug-in's; :func:`resolve_params` builds one; None: the
    defaults), so ``jax.vmap`` over them sweeps without recompiling. Rows are never
    reordered: results index the input rows.

    With ``follow=True`` the run is ``run(key, scores, V, params, choices)``: step
    ``t`` pulls model ``choices[t - 1]`` (-1: none) instead of the rule's choice,
    and everything else (draws, estimates, refits, intervals) is computed as
    usual. Given a run's own ``chosen`` it repeats that run; given another
    backend's, it computes the same sample path there, so the two backends'
    arithmetic can be compared step for step.

    ``init_U`` (``(m, r)``, optional) is where the candidates' rows start
    before the first fit (zeros by default): rows known from earlier
    evaluations, or, with ``init_refit_epochs = refit_epochs = 0``, fixed
    predictions ``sigmoid(init_U V^T)`` that are never refit (an oracle, when
    they are the true probabilities' logits). ``row_prior`` (a
    :class:`pulse_jax.factorization.RowPrior`, optional) is the Gaussian every
    refit pulls the rows towards, with weight ``params.refit_prior``.
    """
    estimator = get_estimator(method)
    check_compatible(config, estimator)
    plugins = plugins_of(config, estimator)

    def run(key, scores, V, params=None, choices=None, init_U=None, row_prior=None):
        params = _traced_params(plugins, params).as_arrays()
        episode, state = init(config, plugins, key, jnp.asarray(scores, jnp.float32), jnp.asarray(V, jnp.float32),
                              params, init_U, row_prior)
        init_best = state.best
        # choices[t] is step t's model (index 0: the padding step t = 0, never a pull).
        choices = jnp.concatenate([jnp.full(1, -1, jnp.int32), jnp.asarray(choices, jnp.int32)]) if follow else None

        def steps(state, ts, log_slots=None):
            def one(s, t):
                s, record = step(config, plugins, episode, s, params, t, log_slots,
                                 None if choices is None else choices[t])
                return s, (record if config.record_steps else None)
            return jax.lax.scan(one, state, ts)

        state, records = _all_steps(config, plugins, state, steps)
        if not config.record_steps:   # the summary only: the final state's record as the one "step"
            records = jax.tree_util.tree_map(lambda a: a[None], _idle_record(config, plugins, episode, state, params,
                                                                             jnp.int32(0)))
        return _run_result(config, plugins, state, params, records, init_best)

    return run


#: Steps per block of a run that stops early (see :func:`make_batched_run`): a stopped batch wastes at
#: most one block, and each block costs one check of whether the whole batch has stopped.
STOP_BLOCK_STEPS = 64


def make_batched_run(config: BanditConfig, method: str | Estimator = "pulse", follow: bool = False,
                     block: int | None = None):
    """``run(keys, scores, V, params[, choices]) -> RunResult`` for a batch of repetitions (leading axis).

    With a stopping rule that fixes no budget (``config.stop.stops_early``, e.g. ``"certified"``)
    the steps run in blocks of ``block`` inside a ``lax.while_loop`` that ends once every
    repetition of the batch has stopped (or spent its budget, or seen every cell): wall time
    follows the cells actually spent, not the budget. The steps are the same pure :func:`step`
    as :func:`make_run`'s scan, on the same ``t``, so every record equals the scan's; the steps
    that never ran are filled with the record of an idle step of the final state (what the scan
    computes for them: a stopped run changes nothing). Otherwise this is
    ``vmap(make_run(config, method, follow))``.
    """
    estimator = get_estimator(method)
    check_compatible(config, estimator)
    plugins = plugins_of(config, estimator)
    if not config.stop.stops_early:
        per_rep = jax.vmap(make_run(config, estimator, follow),
                           in_axes=(0, None, None, 0, 0 if follow else None, None, None))
        return lambda keys, scores, V, params, choices=None, init_U=None, row_prior=None: per_rep(
            keys, scores, V, params, choices, init_U, row_prior)
    block = block or STOP_BLOCK_STEPS
    n_blocks = -(-(config.n_steps + 1) // block)

    def run(keys, scores, V, params, choices=None, init_U=None, row_prior=None):
        params = _traced_params(plugins, params).as_arrays()
        scores, V = jnp.asarray(scores, jnp.float32), jnp.asarray(V, jnp.float32)
        # The score matrix, its mask and V stay shared (one copy, not one per repetition).
        shared = Episode(None, None, None, 0, 0, 0, 0, None)
        episodes, states = jax.vmap(init, in_axes=(None, None, 0, None, None, 0, None, None), out_axes=(shared, 0))(
            config, plugins, keys, scores, V, params, init_U, row_prior)
        init_best = states.best
        padded = None if choices is None else jnp.pad(jnp.asarray(choices, jnp.int32), ((0, 0), (1, 0)),
                                                      constant_values=-1)

        def steps_of_block(states, b):
            def one(states, t):
                t = jnp.where(t <= config.n_steps, t, 0)     # past the last step: the no-op step 0
                follow_t = None if padded is None else padded[:, t]
                return jax.vmap(step, in_axes=(None, None, shared, 0, 0, None, None, 0 if follow else None))(
                    config, plugins, episodes, states, params, t, None, follow_t)
            return jax.lax.scan(one, states, b * block + jnp.arange(block))

        shapes = jax.eval_shape(steps_of_block, states, 0)[1]
        width = n_blocks * block if config.record_steps else 0    # summary only: no per-step buffer
        buffer = jax.tree_util.tree_map(lambda a: jnp.zeros((a.shape[1], width) + a.shape[2:], a.dtype), shapes)

        def running(carry):
            b, states, _ = carry
            return (b < n_blocks) & ~jnp.all(jax.vmap(finished, in_axes=(None, None, 0, 0, None))(
                config, plugins, states, params, jnp.maximum(b * block, 1)))

        def body(carry):
            b, states, buffer = carry
            states, records = steps_of_block(states, b)
            if config.record_steps:
                records = jax.tree_util.tree_map(lambda a: jnp.swapaxes(a, 0, 1), records)
                buffer = jax.tree_util.tree_map(
                    lambda buf, r: jax.lax.dynamic_update_slice_in_dim(buf, r, b * block, axis=1), buffer, records)
            return b + 1, states, buffer

        b, states, buffer = jax.lax.while_loop(running, body, (jnp.int32(0), states, buffer))
        idle = jax.vmap(_idle_record, in_axes=(None, None, shared, 0, 0, None))(config, plugins, episodes, states,
                                                                                params, jnp.int32(0))
        ran = jnp.arange(width) < b * block
        records = jax.tree_util.tree_map(
            lambda buf, i: jnp.where(ran.reshape((1, -1) + (1,) * (buf.ndim - 2)), buf, i[:, None])[:, 1:config.n_steps + 1],
            buffer, idle) if config.record_steps else jax.tree_util.tree_map(lambda i: i[:, None], idle)
        return jax.vmap(_run_result, in_axes=(None, None, 0, 0, 0, 0))(config, plugins, states, params, records,
                                                                        init_best)

    return run


def finished(config: BanditConfig, plugins: Plugins, state: BanditState, params, t):
    """Whether every step from ``t`` on is idle: the run has stopped, or stops at step ``t`` (the
    same check as :func:`select`'s, on the same inputs)."""
    return stop_status(config, plugins, state, params, t)[0]


def stop_status(config: BanditConfig, plugins: Plugins, state: BanditState, params, t):
    """``(done, claim)``: whether the stopping rule stops the run at step ``t`` (or already has), and the
    ``(m,)`` models its certificate names now (:attr:`pulse_jax.stopping.StoppingRule.claim`). Simulation
    and live selection both stop through this one check."""
    params = _traced_params(plugins, params)
    looks = _stop_inputs(config, plugins, state, params, t)
    return state.stopped | plugins.stop.done(looks, params.stop), plugins.stop.claim(looks, params.stop)


def _idle_record(config: BanditConfig, plugins: Plugins, episode: Episode, state: BanditState, params, t):
    """The record of a step that spends nothing (what every step of a stopped run records)."""
    _, record = step(config, plugins, episode, state, params, t)
    return record


def _all_steps(config: BanditConfig, plugins: Plugins, state: BanditState, steps):
    """Run steps ``1 .. n_steps`` with ``steps(state, ts, log_slots) -> (state, records)``."""
    n_steps, tau = config.n_steps, refit_period(config, plugins)
    if not tau:
        return steps(state, 1 + jnp.arange(n_steps))
    # Phases of tau steps, t in [p tau, (p+1) tau): each opens with its refit
    # (phase 0 opens with the no-op t = 0 instead), then the shorter last phase.
    n_phases = (n_steps + 1) // tau
    if n_phases <= MAX_UNROLLED_PHASES and n_steps * config.batch_size >= UNROLL_MIN_LOG_CELLS:
        # Unrolled: phase p's refit sees only the p tau log slots filled so far (static
        # shapes), so the refits cost in proportion to the cells observed, not the budget.
        parts = []
        for p in range(n_phases):
            state, part = steps(state, p * tau + jnp.arange(tau), max(p * tau, 1))
            parts.append(part)
        state, tail = steps(state, n_phases * tau + jnp.arange(n_steps + 1 - n_phases * tau), max(n_phases * tau, 1))
        return state, jax.tree_util.tree_map(lambda *a: jnp.concatenate(a)[1:], *parts, tail)
    # One scan over t = 0 .. n_steps (t = 0 is the no-op padding step): the step body is
    # compiled once, and each refit is a real `lax.cond` on the unbatched t.
    state, records = steps(state, jnp.arange(n_steps + 1))
    return state, jax.tree_util.tree_map(lambda a: a[1:], records)


def _run_result(config: BanditConfig, plugins: Plugins, state: BanditState, params, records, init_best) -> RunResult:
    estimator, n = plugins.estimator, config.n_examples
    radius = estimator.radius(state.estimator, state.ledger, n, params.delta, params.estimator)
    radius = jnp.where(state.ledger.n_obs >= state.ledger.population, 0.0, radius)
    cs_low, cs_high, seq_low, seq_high = state.cs.low, state.cs.high, state.cs.seq_low, state.cs.seq_high
    if not estimator.has_interval:
        cs_low = cs_high = jnp.full(config.n_models, jnp.nan, jnp.float32)
        seq_low = seq_high = jnp.full(seq_low.shape, jnp.nan, jnp.float32)
    # Budgets never reached (an early stop, exhausted models) take the final widths.
    final = half_widths(config, estimator, state, params)
    snaps = Snapshots(*(jnp.where(jnp.isnan(a), f[None], a) for a, f in zip(state.snapshots, final)))
    return RunResult(records, init_best, current_estimates(estimator, state, n, params), radius, state.ledger.n_obs,
                     state.ledger.n_pulls, cs_low, cs_high, state.certified, snaps, seq_low, seq_high)
