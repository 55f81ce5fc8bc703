"""The drivers: a whole run for one PRNG key (`make_run`, a ``lax.scan`` of the kernel's step)
and a batch of runs that stops computing once every repetition has stopped (`make_batched_run`).
Both drive the kernel that `bind` builds; a run's params are resolved once, where it starts."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from pulse_jax.engine import run_trace as tracing
from pulse_jax.engine.bookkeeping import Snapshots, current_estimates, half_widths, interval_bounds
from pulse_jax.engine.config import BanditConfig, Plugins, check_compatible, refits_periodically, traced_params
from pulse_jax.engine.kernel import Kernel, Start, build_kernel, record_stop, sequence_bounds
from pulse_jax.engine.params import RunParams
from pulse_jax.engine.state import BanditState, Episode, RunResult, StepRecord, Told, cells_cost
from pulse_jax.engine.run_trace import Trace
from pulse_jax.errors import require
from pulse_jax.estimators.base import Estimator


#: Backends on which a run with periodic refits is a scan over refit phases (`_phases`: one
#: conditional per phase) rather than over steps (a conditional in every step). On an H100, 500
#: full-scale PULSE repetitions took 12.4 s with a conditional in every step and 11.6 s with the
#: phases (docs/performance.md). On a CPU the phases cost 12-16% more run time (20 full-scale
#: repetitions; padding to whole phases, nested loops), so a CPU scans steps.
#: Both compute the same numbers in the same order (tested for equality on a CPU).
PHASED_BACKENDS = ("gpu", "tpu")

#: Steps per block of a run that stops early (see `make_batched_run`): a stopped batch wastes at
#: most one block, and each block costs one check of whether the whole batch has stopped.
STOP_BLOCK_STEPS = 64

#: ``vmap`` axes of an `Episode` across repetitions: the score matrix, its mask, ``V`` and the row
#: prior stay shared (one copy, not one per repetition); each repetition has its own draws.
EPISODE_AXES = Episode(scores=None, missing=None, V=None, model_order=0, init_examples=0, examples_key=0, key=0,
                       row_prior=None, cost=None)


def bind(config: BanditConfig, plugins: Plugins | str | Estimator) -> Kernel:
    """The checked kernel of ``plugins`` on ``config``: the prologue every driver shares. ``plugins``: a
    `pulse_jax.Plugins`, or an estimator (or its name) with the default sampling and stopping rules."""
    return build_kernel(config, check_compatible(config, plugins))


def start_params(kernel: Kernel, params) -> RunParams:
    """``params`` (None, a RunParams or a possibly stacked BanditParams) as float32 arrays, once per run."""
    return traced_params(kernel.plugins, params).as_arrays()


def _sequential(kernel: Kernel) -> None:
    require(kernel.config.concurrency == 1, f"BanditConfig.concurrency={kernel.config.concurrency}: this driver runs "
                                            "one batch at a time; use pulse_jax.engine.make_concurrent_run")


def make_run(config: BanditConfig, plugins: Plugins | str | Estimator = "pulse", follow: bool = False):
    """Return ``run(key, scores, V, params=None, choices=None, start=Start()) -> RunResult`` for one
    repetition (pure, jittable).

    ``scores`` is the (m, n) float32 matrix of true scores in [0, 1]; ``V`` the
    (n, r) example embeddings from the train split (any (n, r) array for UCB-E,
    which ignores it); ``params`` the traced numbers, a `pulse_jax.RunParams`
    (the engine's and each plug-in's; `resolve_params` builds one; None: the
    defaults), so ``jax.vmap`` over them sweeps without recompiling. Rows are never
    reordered: results index the input rows.

    With ``follow=True``, ``choices`` holds step ``t``'s model at ``choices[t - 1]`` (-1: none),
    pulled instead of the rule's choice; everything else (draws, estimates, refits,
    intervals) is computed as usual. Given a run's own ``chosen`` it repeats that run; given
    another backend's, it computes the same sample path there, so the two backends'
    arithmetic can be compared step for step.

    ``start`` (a `pulse_jax.engine.Start`) says where the candidates' rows start before the
    first fit (``init_U``, zeros by default: rows known from earlier evaluations, or, with
    ``init_refit_epochs = refit_epochs = 0``, fixed predictions ``sigmoid(init_U V^T)`` that are
    never refit) and the Gaussian every refit pulls them towards (``row_prior``), with weight
    ``params.refit_prior``.
    """
    kernel = bind(config, plugins)
    _sequential(kernel)

    def run(key, scores, V, params=None, choices=None, start=Start()):
        params = start_params(kernel, params)
        episode, state = kernel.init(key, jnp.asarray(scores, jnp.float32), jnp.asarray(V, jnp.float32), params,
                                     start)
        trace = first_trace(kernel, episode, state, params)
        first = (state.best, trace.money)
        # choices[t] is step t's model (index 0: the padding step t = 0, never a pull).
        choices = jnp.concatenate([jnp.full(1, -1, jnp.int32), jnp.asarray(choices, jnp.int32)]) if follow else None
        follow_at = (lambda t: None) if choices is None else (lambda t: choices[t])   # noqa: E731
        if not (refits_periodically(config, kernel.plugins) and jax.default_backend() in PHASED_BACKENDS):
            # One scan over t = 0 .. n_steps (t = 0 is the no-op padding step); a refit is a
            # `lax.cond` in every step, taken every refit_every steps.
            def one(carry, t):
                s, record = traced_step(kernel, episode, carry, params, t, follow_at(t))
                return s, (record if config.record_steps else None)

            (state, trace), records = jax.lax.scan(one, (state, trace), jnp.arange(config.n_steps + 1))
        else:
            (state, trace), records = _phases(kernel, episode, (state, trace), params, follow_at)
        records = jax.tree_util.tree_map(lambda a: a[1:config.n_steps + 1], records)
        if not config.record_steps:   # the summary only: the final state's record as the one "step"
            records = jax.tree_util.tree_map(lambda a: a[None], idle_record(kernel, episode, state, trace, params))
        return run_result(kernel, state, trace, params, records, first)

    return run


def make_batched_run(config: BanditConfig, plugins: Plugins | str | Estimator = "pulse", follow: bool = False,
                     block: int | None = None):
    """``run(keys, scores, V, params, choices=None, start=Start()) -> RunResult`` for a batch of
    repetitions (leading axis of ``keys``, ``params`` and ``choices``).

    With a stopping rule that fixes no budget (``plugins.stop.stops_early``, e.g. ``"certified"``)
    the steps run in blocks of ``block`` inside a ``lax.while_loop`` that ends once every
    repetition of the batch has stopped (or spent its budget, or seen every cell): wall time
    follows the cells actually spent, not the budget. The steps are the same pure `step`
    as `make_run`'s scan, on the same ``t``, so every record equals the scan's; the steps
    that never ran are filled with the record of an idle step of the final state (what the scan
    computes for them: a stopped run changes nothing). Otherwise this is
    ``vmap(make_run(config, plugins, follow))``.
    """
    kernel = bind(config, plugins)
    _sequential(kernel)
    if not kernel.plugins.stop.stops_early:
        per_rep = jax.vmap(make_run(config, kernel.plugins, follow),
                           in_axes=(0, None, None, 0, 0 if follow else None, None))
        return lambda keys, scores, V, params, choices=None, start=Start(): per_rep(keys, scores, V, params, choices,
                                                                                    start)
    block = block or STOP_BLOCK_STEPS

    def run(keys, scores, V, params, choices=None, start=Start()):
        params = start_params(kernel, params)
        scores, V = jnp.asarray(scores, jnp.float32), jnp.asarray(V, jnp.float32)
        episodes, states = jax.vmap(kernel.init, in_axes=(0, None, None, 0, None), out_axes=(EPISODE_AXES, 0))(
            keys, scores, V, params, start)
        traces = jax.vmap(lambda *a: first_trace(kernel, *a), in_axes=(EPISODE_AXES, 0, 0))(episodes, states, params)
        padded = None if choices is None else jnp.pad(jnp.asarray(choices, jnp.int32), ((0, 0), (1, 0)),
                                                      constant_values=-1)
        (final, trace), records = _blocks(kernel, block, episodes, (states, traces), params, padded)
        return jax.vmap(lambda *a: run_result(kernel, *a))(final, trace, params, records, (states.best, traces.money))

    return run


def _blocks(kernel: Kernel, block: int, episodes: Episode, carry: tuple[BanditState, Trace], params: RunParams,
            padded):
    """Blocks of ``block`` steps of every repetition, until all have stopped: ``((states, traces), records)``."""
    config = kernel.config
    n_blocks = -(-(config.n_steps + 1) // block)
    step = jax.vmap(lambda *a: traced_step(kernel, *a), in_axes=(EPISODE_AXES, 0, 0, None, None if padded is None else 0))

    def steps_of_block(carry, b):
        def one(carry, t):
            t = jnp.where(t <= config.n_steps, t, 0)     # past the last step: the no-op step 0
            return step(episodes, carry, params, t, None if padded is None else padded[:, t])
        return jax.lax.scan(one, carry, b * block + jnp.arange(block))

    finished = jax.vmap(lambda state, params, t: kernel.stop_status(state, params, t).done, in_axes=(0, 0, None))
    b, carry, buffer = run_in_blocks(steps_of_block, lambda b, carry: ~jnp.all(
        finished(carry[0], params, jnp.maximum(b * block, 1))), carry, n_blocks, block, config.record_steps)
    states, traces = jax.vmap(_settle, in_axes=(None, 0, 0, None))(kernel, carry, params, jnp.maximum(b * block, 1))
    idle = jax.vmap(lambda *a: idle_record(kernel, *a), in_axes=(EPISODE_AXES, 0, 0, 0))(episodes, states, traces,
                                                                                          params)
    return (states, traces), idle_where_unrun(buffer, idle, b * block, slice(1, config.n_steps + 1))


def run_in_blocks(block_of, keep_going, carry, n_blocks: int, block: int, record_steps: bool):
    """``carry, records = block_of(carry, b)`` for ``b = 0, 1, ...`` in a ``lax.while_loop``, while
    ``b < n_blocks`` and ``keep_going(b, carry)``; returns ``(b, carry, buffer)``, with each block's
    records (step axis first, then repetitions) in ``buffer`` as (repetition, step) when
    ``record_steps`` (else an empty buffer: a summary keeps no per-step records)."""
    shapes = jax.eval_shape(block_of, carry, 0)[1]
    width = n_blocks * block if record_steps else 0
    buffer = jax.tree_util.tree_map(lambda a: jnp.zeros((a.shape[1], width) + a.shape[2:], a.dtype), shapes)

    def running(loop):
        b, inner, _ = loop
        return (b < n_blocks) & keep_going(b, inner)

    def body(loop):
        b, inner, buffer = loop
        inner, records = block_of(inner, b)
        if record_steps:
            records = jax.tree_util.tree_map(lambda a: jnp.swapaxes(a, 0, 1), records)
            buffer = jax.tree_util.tree_map(
                lambda buf, r: jax.lax.dynamic_update_slice_in_dim(buf, r, b * block, axis=1), buffer, records)
        return b + 1, inner, buffer

    return jax.lax.while_loop(running, body, (jnp.int32(0), carry, buffer))


def idle_where_unrun(buffer, idle, ran_steps, keep: slice):
    """The records of a run in blocks: the buffer's where its steps ran (the first ``ran_steps``), the
    final state's idle record where they did not (what a scan computes for them), cut to ``keep``; an
    empty buffer (a summary) gives the idle record alone, as one step."""
    if jax.tree_util.tree_leaves(buffer)[0].shape[1] == 0:
        return jax.tree_util.tree_map(lambda i: i[:, None], idle)
    return jax.tree_util.tree_map(
        lambda buf, i: jnp.where((jnp.arange(buf.shape[1]) < ran_steps).reshape((1, -1) + (1,) * (buf.ndim - 2)),
                                 buf, i[:, None])[:, keep], buffer, idle)


def _settle(kernel: Kernel, carry: tuple[BanditState, Trace], params: RunParams, t) -> tuple[BanditState, Trace]:
    """A blocked run that ended early, as the scan leaves it: a repetition whose rule fires at step ``t``
    (the loop found every repetition done there, so that step never ran) records the stop and the
    claim the scan's step ``t`` would have recorded. Past the last step nothing fires."""
    state, trace = carry
    status = kernel.stop_status(state, params, t)
    fires = status.done & ~state.stopped & (t <= kernel.config.n_steps)
    return record_stop(state, fires), trace._replace(
        claimed=jnp.where(fires, status.claim, trace.claimed))


def _phases(kernel: Kernel, episode: Episode, carry: tuple[BanditState, Trace], params: RunParams, follow_at):
    """Steps ``0 .. n_steps`` with a refit every ``tau`` steps, as a scan over refit phases.

    Phase ``p`` is steps ``p tau .. (p + 1) tau - 1`` (the last one padded with no-op steps ``t = 0``
    past ``n_steps``): its first step refits when ``p >= 1`` (the schedule's refit steps), one
    `lax.cond` per phase, and its other ``tau - 1`` steps, a scan, never refit, so no conditional is
    inside them. Every step is the kernel's ``step``, in the per-step scan's order, hence every
    number is the scan's; on an accelerator a conditional costs at least a host round trip to read
    its predicate, so one per step adds up.
    Returns ``((state, trace), records)``, records indexed by ``t`` (``0 .. n_phases tau - 1``).
    """
    config = kernel.config
    tau, n = config.refit_every, config.n_steps
    n_phases = n // tau + 1
    as_step = lambda u: jnp.where(u <= n, u, 0)   # noqa: E731   (past the last step: the no-op step 0)

    def one(s, u):
        s, record = traced_step(kernel, episode, s, params, as_step(u), follow_at(as_step(u)), due=False)
        return s, (record if config.record_steps else None)

    def phase(s, p):
        first = as_step(p * tau)
        s, record = traced_step(kernel, episode, s, params, first, follow_at(first), due=p >= 1)
        s, records = jax.lax.scan(one, s, p * tau + jnp.arange(1, tau))
        if not config.record_steps:
            return s, None
        return s, jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), record, records)

    carry, records = jax.lax.scan(phase, carry, jnp.arange(n_phases, dtype=jnp.int32))
    return carry, jax.tree_util.tree_map(lambda a: a.reshape((n_phases * tau,) + a.shape[2:]), records)


def first_trace(kernel: Kernel, episode: Episode, state: BanditState, params: RunParams) -> Trace:
    """The `Trace` after the initial batches (``state`` from ``kernel.init``): their cost, no claim, the
    snapshot rows their cells reach, every sequence's bounds on them."""
    cost = cells_cost(episode, episode.init_examples, jnp.ones(episode.init_examples.shape, bool))
    info = kernel.record(state, state, params, jnp.int32(-1), Told((), cost))
    empty = tracing.empty(kernel.config, kernel.plugins.estimator.n_sequences)
    trace = tracing.fold(kernel.config, empty, info._replace(spent_before=jnp.int32(-1)))[0]
    if not kernel.plugins.estimator.has_interval:   # the sequences never move: [0, 1], as `empty` has them
        return trace
    seq_low, seq_high = sequence_bounds(kernel, state, params)    # within [0, 1], so they replace it
    return trace._replace(seq_low=seq_low, seq_high=seq_high)


def traced_step(kernel: Kernel, episode: Episode, carry: tuple[BanditState, Trace], params: RunParams, t, follow=None,
                *, due=None):
    """``kernel.step`` with its `StepInfo` folded into the run's `Trace`: ``((state, trace), record)``."""
    state, trace = carry
    state, info = kernel.step(episode, state, params, t, follow, due=due)
    trace, record = tracing.fold(kernel.config, trace, info)
    return (state, trace), record


def idle_record(kernel: Kernel, episode: Episode, state: BanditState, trace: Trace, params: RunParams) -> StepRecord:
    """What a step that spends nothing records on ``state`` (the no-op step ``t = 0``): the records of
    steps a run never reached (it had stopped)."""
    return traced_step(kernel, episode, (state, trace), params, jnp.int32(0))[1]


def run_result(kernel: Kernel, state: BanditState, trace: Trace, params: RunParams, records, first) -> RunResult:
    """A repetition's `RunResult` from its final state and trace, its per-step ``records`` and ``first``,
    the best guess and the money after the initial batches."""
    config, estimator = kernel.config, kernel.plugins.estimator
    init_best, init_money = first
    n = config.n_examples
    radius = estimator.radius(state.estimator, state.sums, n, params.delta, params.estimator)
    radius = jnp.where(state.sums.n_obs >= state.sums.population, 0.0, radius)
    # The interval certification used: a model evaluated on every example is known exactly (its mean,
    # not the running interval of its sequence, which need not contain it once the population is spent).
    cs_low, cs_high = interval_bounds(estimator, state, config, params, "cs")     # NaN without an interval
    seq_low, seq_high = trace.seq_low, trace.seq_high
    if not estimator.has_interval:
        seq_low = seq_high = jnp.full(seq_low.shape, jnp.nan, jnp.float32)
    # Budgets never reached (an early stop, exhausted models) take the final widths.
    final = half_widths(config, estimator, state, params)
    snaps = Snapshots(*(jnp.where(jnp.isnan(a), f[None], a) for a, f in zip(trace.snapshots, final)))
    return RunResult(records, init_best, current_estimates(estimator, state, n, params), radius, state.sums.n_obs,
                     state.sums.n_pulls, cs_low, cs_high, state.certified, snaps, seq_low, seq_high, state.stopped,
                     trace.claimed, init_money)
