"""Simulated concurrency: runs with ``c`` batches in flight, asked and returned as a live selection does.

The live runner (`pulse_jax.live.run`) keeps up to ``c`` batches in flight and tells them in the
order they were asked: it asks until ``c`` are out or the selector must wait (a refit step waits
until nothing is in flight), then tells the oldest, and again. Which of *ask* and *tell* happens at
each event depends only on ``c``, the number of steps and the refit schedule, never on a score, so it
is a static `Schedule`: every repetition follows the same events, and under ``vmap`` a refit stays
one real conditional at the events that refit.

Each repetition carries, beside its `pulse_jax.engine.BanditState`, a `Queue` of its batches in
flight (a ring of ``c`` slots) with their cells per model and the packed mask of examples observed
or in flight (`pulse_jax.engine.kernel.InFlight`). An ask chooses with those cells counted as
allocated and draws from the examples neither observed nor in flight; a tell observes the oldest
batch with its true scores. An ask that holds (the stopping rule would fire once the batches in
flight return, `pulse_jax.engine.kernel.Status.hold`) spends nothing and its slot returns empty, as
the live selector's request with no examples does. A repetition whose stopping rule has fired asks
nothing more (its asks spend nothing), and the batches it had in flight still return and count, as
a live run logs and tells what returns after its stop. Fed the same seed and full matrix, `pulse_jax.live.Selector`
driven by `pulse_jax.live.run` at concurrency ``c`` asks exactly these batches (tested), up to the
budget's last batch: where the budget left is all held by batches in flight, the selector waits
and the simulation lets that step spend nothing.

Records are per event (``n_events``): the best guess and the cells spent after it, the model asked
(-1: none). With a stopping rule that stops early the events run in blocks until every repetition
has stopped and has nothing in flight.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from pulse_jax.engine.config import BanditConfig, Plugins, refit_due
from pulse_jax.engine import run_trace as tracing
from pulse_jax.engine.drivers import (EPISODE_AXES, STOP_BLOCK_STEPS, bind, first_trace, idle_record, idle_where_unrun,
                                      run_in_blocks, run_result, start_params)
from pulse_jax.engine.kernel import Batch, InFlight, Kernel, Start
from pulse_jax.engine.state import BanditState, Episode
from pulse_jax.errors import require
from pulse_jax.estimators.base import Estimator
from pulse_jax.stats import without_replacement as sampling


class Schedule(NamedTuple):
    """The events of a run with ``c`` batches in flight (arrays of length ``n_events``)."""

    ask_step: np.ndarray    # the bandit step asked at the event (0: none)
    ask_slot: np.ndarray    # the queue slot the asked batch takes
    refit: np.ndarray       # bool: the asked step refits first (nothing is in flight then)
    tell: np.ndarray        # bool: the oldest batch in flight returns at the event
    tell_slot: np.ndarray   # its slot


@functools.lru_cache(maxsize=32)
def event_schedule(config: BanditConfig, plugins: Plugins) -> Schedule:
    """The runner's events: ask while fewer than ``c`` are in flight and the step may be asked (a
    refit step only with nothing in flight); tell the oldest when ``c`` are out or nothing can be asked."""
    c, n = config.concurrency, config.n_steps
    rows, head, count, t = [], 0, 0, 1
    while t <= n or count:
        ask = t <= n and count < c and not (bool(refit_due(config, plugins, t)) and count > 0)
        slot = (head + count) % c
        row = [t if ask else 0, slot, ask and bool(refit_due(config, plugins, t))]
        if ask:
            count, t = count + 1, t + 1
        tell = count == c or (not ask and count > 0)
        row += [tell, head]
        if tell:
            head, count = (head + 1) % c, count - 1
        rows.append(row)
    cols = list(zip(*rows))
    return Schedule(np.asarray(cols[0], np.int32), np.asarray(cols[1], np.int32), np.asarray(cols[2], bool),
                    np.asarray(cols[3], bool), np.asarray(cols[4], np.int32))


def n_events(config: BanditConfig, plugins: Plugins | str | Estimator) -> int:
    """Events of a run of ``plugins`` on ``config`` (the length of its per-event records)."""
    kernel = bind(config, plugins)
    return len(event_schedule(config, kernel.plugins).ask_step)


class Queue(NamedTuple):
    """One repetition's batches in flight: a ring of ``c`` slots and their totals per model."""

    models: jax.Array     # (c,) model of the batch in each slot
    steps: jax.Array      # (c,) its bandit step
    sizes: jax.Array      # (c,) its cells (0: an empty slot, or an ask that spent nothing)
    examples: jax.Array   # (c, B) its examples
    cells: jax.Array      # (m,) cells in flight per model
    batches: jax.Array    # (m,) batches in flight per model
    rows: jax.Array       # (m, W) examples observed or in flight


def empty_queue(config: BanditConfig, state: BanditState) -> Queue:
    c, m, B = config.concurrency, config.n_models, config.batch_size
    zeros = jnp.zeros(c, jnp.int32)
    return Queue(zeros, zeros, zeros, jnp.zeros((c, B), jnp.int32), jnp.zeros(m, jnp.int32), jnp.zeros(m, jnp.int32),
                 state.observed)


def blocked_by_flight(estimator, batches):
    """The models that may not be asked now, from ``batches`` in flight per model: with a weighted draw
    (``estimator.draw_weights``) a model's design is recomputed at the tell, so a model with a batch in
    flight waits for it; None (nothing blocked) with a uniform draw. NumPy or JAX arrays alike: the
    simulated concurrent run and the live selector apply this one rule."""
    return batches > 0 if estimator.draw_weights is not None else None


class Waiting(NamedTuple):
    """What an ask is given besides the state: the batches in flight (an `InFlight`), the models that may
    not be asked now (``blocked``, `blocked_by_flight`) and whether the step refits (``due``)."""

    in_flight: InFlight
    blocked: jax.Array | None
    due: jax.Array | bool


class AskNow(NamedTuple):
    """An ask's outputs (`ask_now`): the stop's ``done`` and ``hold``, the chosen ``model``, its batch
    ``size``, ``examples`` and which are ``valid``, and the model's examples neither observed nor in
    flight before it (``unobserved``)."""

    done: jax.Array
    hold: jax.Array
    model: jax.Array
    size: jax.Array
    examples: jax.Array
    valid: jax.Array
    unobserved: jax.Array


def ask_now(kernel: Kernel, episode: Episode, state: BanditState, params, t, waiting: Waiting, *, logged=None,
            wait=False):
    """``(state, status, AskNow)``: the kernel's ``stop_status`` with the batches in flight, then its ``ask``
    given that status (the stop recorded in the state when it fires: the ask then chooses nothing).
    The simulated concurrent run and the live selector (`pulse_jax.live.core.ask`) ask through it.

    ``logged``: what a replayed log did at this step (`pulse_jax.engine.kernel.REPLAYED_ASK` ...);
    ``wait`` (a live selection: the step refits and batches are in flight): unless the run is done the
    state is left as it was and nothing is asked (Python False: never, and no conditional is built, as
    under ``vmap``)."""
    status = kernel.stop_status(state, params, t, waiting.in_flight, logged)

    def asked(state):
        due = waiting.due if wait is False else waiting.due & ~wait
        new, out = kernel.ask(episode, state, params, t, status, in_flight=waiting.in_flight,
                              blocked=waiting.blocked, due=due)
        return new, (out.model, out.size, out.examples, out.valid)

    def waits(state):
        B = kernel.config.batch_size
        return state, (jnp.int32(0), jnp.int32(0), jnp.zeros(B, jnp.int32), jnp.zeros(B, bool))

    new, (i, size, examples, valid) = asked(state) if wait is False else \
        jax.lax.cond(wait & ~status.done, waits, asked, state)
    unobserved = state.sums.population[i] - state.sums.n_obs[i] - waiting.in_flight.cells[i]
    return new, status, AskNow(status.done, status.hold, i, size, examples, valid, unobserved)


def _ask(kernel: Kernel, episode: Episode, state: BanditState, queue: Queue, params, event):
    """The event's step ``t``: its choice with the queue's cells allocated, its refit when due, its draw;
    the batch joins the event's ask slot. ``t = 0``: no ask (the slot is left as it is)."""
    t, slot, refit, _, _ = event
    in_flight = InFlight(queue.cells, queue.batches, queue.rows)
    waiting = Waiting(in_flight, blocked_by_flight(kernel.plugins.estimator, queue.batches), refit)
    state, status, ask = ask_now(kernel, episode, state, params, t, waiting)
    i, size, examples, valid, asked = ask.model, ask.size, ask.examples, ask.valid, t > 0
    put = lambda a, v: a.at[slot].set(jnp.where(asked, v, a[slot]))   # noqa: E731
    queue = queue._replace(models=put(queue.models, i), steps=put(queue.steps, t), sizes=put(queue.sizes, size),
                           examples=put(queue.examples, examples),
                           cells=queue.cells.at[i].add(size), batches=queue.batches.at[i].add((size > 0).astype(jnp.int32)),
                           rows=queue.rows.at[i].set(sampling.mark(queue.rows[i], examples, valid)))
    return state, queue, jnp.where(size > 0, i, -1), status


def _tell(kernel: Kernel, episode: Episode, state: BanditState, queue: Queue, params, event):
    """The batch in the event's tell slot returns (when the event tells) and is observed with its true
    scores."""
    _, _, _, tell, slot = event
    B = kernel.config.batch_size
    i, examples = queue.models[slot], queue.examples[slot]
    size = jnp.where(tell, queue.sizes[slot], 0)
    valid = jnp.arange(B) < size
    batch = Batch(i, size, examples, valid, episode.scores[i, examples])
    state, told = kernel.tell(episode, state, params, queue.steps[slot], batch)
    queue = queue._replace(sizes=queue.sizes.at[slot].set(jnp.where(tell, 0, queue.sizes[slot])),
                           cells=queue.cells.at[i].add(-size),
                           batches=queue.batches.at[i].add(-(size > 0).astype(jnp.int32)))
    return state, queue, told


def make_event(kernel: Kernel):
    """``event(episode, (state, queue, trace), params, x) -> ((state, queue, trace), record)`` for one
    repetition, ``x`` one event of the `Schedule` ``(ask_step, ask_slot, refit, tell, tell_slot)``; the
    event's `pulse_jax.engine.state.StepInfo` is folded into the run's trace."""

    def event(episode, carry, params, x):
        before, queue, trace = carry
        state, queue, chosen, status = _ask(kernel, episode, before, queue, params, x)
        state, queue, told = _tell(kernel, episode, state, queue, params, x)
        trace, record = tracing.fold(kernel.config, trace,
                                     kernel.record(before, state, params, chosen, told, status=status))
        return (state, queue, trace), record

    return event


def make_concurrent_run(config: BanditConfig, plugins: Plugins | str | Estimator = "pulse", block: int | None = None):
    """``run(keys, scores, V, params, choices=None, start=Start()) -> RunResult`` for a batch of
    repetitions (leading axis of ``keys`` and ``params``) with ``config.concurrency`` batches in flight
    (see the module docstring); the records are per event. ``choices`` (following another run's
    choices) is refused: a choice here is only defined with its queue."""
    kernel = bind(config, plugins)
    require(config.concurrency >= 2, "make_concurrent_run: config.concurrency must be >= 2 (1: make_batched_run)")
    schedule = event_schedule(config, kernel.plugins)
    events = len(schedule.ask_step)
    block = block or STOP_BLOCK_STEPS
    n_blocks = -(-events // block)
    padded = [np.pad(a, (0, n_blocks * block - events)) for a in schedule]   # past the end: no ask, no tell
    xs = tuple(jnp.asarray(a) for a in padded)
    one = jax.vmap(make_event(kernel), in_axes=(EPISODE_AXES, 0, 0, None))

    def run(keys, scores, V, params, choices=None, start=Start()):
        require(choices is None, "follow: a run with concurrency > 1 cannot follow given choices")
        params = start_params(kernel, params)
        scores, V = jnp.asarray(scores, jnp.float32), jnp.asarray(V, jnp.float32)
        episodes, states = jax.vmap(kernel.init, in_axes=(0, None, None, 0, None), out_axes=(EPISODE_AXES, 0))(
            keys, scores, V, params, start)
        queues = jax.vmap(lambda s: empty_queue(config, s))(states)
        traces = jax.vmap(lambda *a: first_trace(kernel, *a), in_axes=(EPISODE_AXES, 0, 0))(episodes, states, params)

        def block_of(carry, b):
            x = jax.tree_util.tree_map(lambda a: jax.lax.dynamic_slice_in_dim(a, b * block, block), xs)
            return jax.lax.scan(lambda c, e: one(episodes, c, params, e), carry, x)

        def keep_going(b, inner):
            if not kernel.plugins.stop.stops_early:
                return True
            states, queues, _ = inner
            asking = ~states.stopped & (states.spent + jnp.sum(queues.cells, axis=1) < config.budget)
            return jnp.any(asking | (jnp.sum(queues.sizes, axis=1) > 0))

        b, (final, _, trace), buffer = run_in_blocks(block_of, keep_going, (states, queues, traces), n_blocks, block,
                                                     config.record_steps)
        idle = jax.vmap(lambda *a: idle_record(kernel, *a), in_axes=(EPISODE_AXES, 0, 0, 0))(episodes, final, trace,
                                                                                              params)
        records = idle_where_unrun(buffer, idle, b * block, slice(0, events))
        return jax.vmap(lambda *a: run_result(kernel, *a))(final, trace, params, records, (states.best, traces.money))

    return run
