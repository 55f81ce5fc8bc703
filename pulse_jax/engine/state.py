"""What a run carries: the per-repetition constants (`Episode`), the state every step rewrites
(`BanditState`), what a step and a run return, and the repetition's random draws."""
from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from pulse_jax.stats import factorization, without_replacement as sampling
from pulse_jax.stats.confidence import ConfSeq
from pulse_jax.engine.bookkeeping import Certificate, Snapshots
from pulse_jax.engine.config import BanditConfig
from pulse_jax.estimators.base import ModelSums
from pulse_jax.stats.factorization import RowPrior


class Episode(NamedTuple):
    """Per-repetition constants drawn at reset (never written afterwards)."""

    scores: chex.Array         # (m, n) true scores S, 0 where missing; live selection: the initial batches only
    missing: chex.Array        # (m, n) bool: cells a model has no score for (not part of its benchmark)
    V: chex.Array              # (n, r) frozen example embeddings
    model_order: chex.Array    # (m,) int32: this repetition's shuffled order of the models
    init_examples: chex.Array  # (m, T0 B) int32: the initial batches
    examples_key: chex.PRNGKey  # stream of the example draws (see sampling.draw_key)
    key: chex.PRNGKey          # per-step tie-breaking stream
    row_prior: RowPrior | None = None   # factorization.RowPrior every refit of U is pulled towards (None: the paper's)
    cost: chex.Array | None = None      # (m, n) what each cell costs (None: every cell costs 1)


class PullLog(NamedTuple):
    """Every bandit pull and its scores, by step (slot ``t - 1`` for step ``t``); kept by methods that refit."""

    models: chex.Array    # (S,) int32 model pulled
    examples: chex.Array  # (S, B) int32 its batch
    scores: chex.Array    # (S, B) float32 the scores observed (0 past the size)
    sizes: chex.Array     # (S,) int32 cells of the batch that count (0: no pull)


class BanditState(NamedTuple):
    """What the next step reads: everything observed so far and the rules' own state. What only a
    report reads (the money spent, the stop's claim, the interval snapshots) is not here: each step
    returns it in its `StepInfo`, and the drivers fold that into a `pulse_jax.engine.run_trace.Trace`."""

    sums: ModelSums        # per-model observed / predicted sums
    estimator: chex.ArrayTree   # the estimator's own state
    U: chex.Array         # (m, r) current model factors
    observed: chex.Array  # (m, ceil(n / 32)) uint32: packed mask of the observed cells
    init_scores: chex.Array  # (m, T0 B) scores of the initial batches
    log: PullLog          # the bandit's observed cells as blocks, for refits
    spent: chex.Array     # cells spent, initialization included
    best: chex.Array      # current best guess (row index)
    cs: ConfSeq           # anytime-valid confidence sequences, one per model
    certified: "Certificate"    # the first certification: the stopping rules read it (StopInputs.certified)
    rule: chex.ArrayTree = ()   # the sampling rule's own state
    stopped: chex.Array | bool = False   # the stopping rule has fired (final: a stopped run pulls nothing more)
    cost: chex.Array | None = None       # (m,) each model's mean cost per cell, which the rules see (ones without costs)
    refit_state: chex.ArrayTree = ()     # the periodic refits' Adam state (BanditConfig.carry_refit_state; else ())


class StepRecord(NamedTuple):
    best: chex.Array        # argmax of mu_hat after the step (row index)
    spent: chex.Array       # cells spent after the step, initialization included
    chosen: chex.Array      # model pulled (-1 when the step spent nothing)
    info: chex.ArrayTree    # the estimator's own per-step pytree (PULSE: PulseInfo, its lambda; () for none)
    estimates: chex.Array   # (m,) when config.record_estimates, else ()
    low: chex.Array         # (m,) confidence-sequence bounds when config.record_estimates, else ()
    high: chex.Array
    money: chex.Array = 0.0  # what the cells spent cost after the step, initialization included


class Told(NamedTuple):
    """What `Kernel.tell` reports of a batch: the estimator's per-step pytree, what its cells cost, and
    its model's confidence sequences each on its own afterwards (``(C,)`` each; () without an interval)."""

    info: chex.ArrayTree
    cost: chex.Array
    model: chex.Array = -1
    seq_low: chex.ArrayTree = ()
    seq_high: chex.ArrayTree = ()


class StepInfo(NamedTuple):
    """What a step reports beside its new state (`Kernel.step`, `Kernel.record`): the step's
    `StepRecord` fields without the running money, and what only the analysis reads, which a driver
    folds into its `pulse_jax.engine.run_trace.Trace` (`pulse_jax.engine.run_trace.fold`)."""

    best: chex.Array
    spent: chex.Array
    chosen: chex.Array
    told: Told                # the estimator's info, the cost of the cells observed, their sequences' bounds
    estimates: chex.Array
    low: chex.Array
    high: chex.Array
    spent_before: chex.Array  # cells spent before the step
    fired: chex.Array         # the stopping rule fired in this step
    claim: chex.Array         # (m,) bool: the models its claim named (read where it fired)
    widths: chex.ArrayTree    # `Snapshots` of (m,) half-widths after the step (() without snapshot budgets)


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
    stopped: chex.Array = None      # the stopping rule fired (bool)
    claimed: chex.Array = None      # (m,) bool: what its claim named then (all False: it never fired)
    init_money: chex.Array = None   # what the initial batches cost


# ----------------------------------------------------------------------------- draws


def draw_keys(key: chex.PRNGKey, n_models: int):
    """A repetition's random streams: ``(model_order, examples_key, tie_key)``.

    Depend on the key and the number of models only (never on the method),
    which is what makes comparisons between methods paired. Exposed so that a
    reference implementation can replay the same draws.
    """
    k_models, k_examples, k_ties = (jax.random.fold_in(key, i) for i in range(3))
    return jax.random.permutation(k_models, n_models).astype(jnp.int32), k_examples, k_ties


def cells_cost(episode: Episode, examples, valid, model=None):
    """What the ``valid`` cells ``examples`` cost (``model``'s batch, or every model's rows of ``examples``:
    ``cells_cost(episode, episode.init_examples, ones)`` is what the initial batches cost)."""
    if episode.cost is None:
        return jnp.sum(valid).astype(jnp.float32)
    rows = episode.cost if model is None else episode.cost[model][None]
    return jnp.sum(jnp.where(valid, jnp.take_along_axis(rows, examples.reshape(rows.shape[0], -1), axis=1)
                             .reshape(valid.shape), 0.0))


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
            ex = sampling.draw(sampling.draw_key(examples_key, i, b * B), row, b * B, size, B,
                               resolve=sampling.fisher_yates_prefix_in_order)   # no m x B x B intermediates
            row = sampling.mark(row, ex, jnp.ones(B, bool))
            picked.append(ex)
        return jnp.concatenate(picked), row

    return jax.vmap(one_model)(jnp.arange(m, dtype=jnp.int32), mask, population)


def observed_blocks(episode: Episode, state: BanditState,
                    with_log: bool = True) -> tuple[factorization.CellBlocks, ...]:
    """Every observed cell as blocks: the initial batches (one block per model), then the pull log
    (left out with ``with_log=False``: before the first step nothing is in it)."""
    m, n0 = episode.init_examples.shape
    rows = jnp.arange(m, dtype=jnp.int32)
    init = factorization.CellBlocks(rows, episode.init_examples, state.init_scores, jnp.ones((m, n0), bool))
    if not with_log:
        return (init,)
    log = state.log
    pulls = factorization.CellBlocks(log.models, log.examples, log.scores,
                                     jnp.arange(log.examples.shape[1]) < log.sizes[:, None])
    return init, pulls


def add_to_log(log: PullLog, t, pull, examples) -> PullLog:
    """Slot ``t - 1`` holds step ``t``'s pull (a `pulse_jax.estimators.base.Pull`); a step that spends
    nothing writes no slot: its slot index is past the end, and the writes drop it."""
    slot = jnp.where(pull.size > 0, jnp.maximum(t - 1, 0), log.sizes.shape[0])
    put = lambda a, new: a.at[slot].set(new, mode="drop")   # noqa: E731
    return PullLog(put(log.models, pull.model), put(log.examples, examples), put(log.scores, pull.scores),
                   put(log.sizes, pull.size))
