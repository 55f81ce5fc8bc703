"""The pure core of a live selection: its state (`LiveState`) and the functions that ask and tell
one batch on it, over the compiled kernel pieces of `pulse_jax.live.compiled`.

The `pulse_jax.live.Selector` holds a `LiveState`, the log and the names; everything that decides
what is asked next is here, a function of the state and of the batches in flight, and the kernel's
``stop_status`` and ``ask`` are the one place a stop is decided and recorded
(``BanditState.stopped``), as in a simulation. The in-flight counts are those of
`pulse_jax.engine.concurrent_run` (`pulse_jax.engine.InFlight`), and a model with a batch in flight
waits under a weighted draw by the same `pulse_jax.engine.blocked_by_flight`.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import jax
import numpy as np

from pulse_jax import engine
from pulse_jax.live.compiled import Programs

#: ``logged`` of a live ask (`ask`): not replaying a log.
LIVE = -1


class LiveState(NamedTuple):
    """A live selection's dynamic half: the kernel's ``episode`` and ``bandit`` state (None until every
    first-look batch is told), the next bandit ``step``, and whether nothing more will be asked
    (``finished``: the stop fired, or no full batch fits, with nothing in flight). Whether the run has
    stopped is ``bandit.stopped``, set by the kernel."""

    episode: engine.Episode | None = None
    bandit: engine.BanditState | None = None
    step: int = 1
    finished: bool = False


class Asked(NamedTuple):
    """What `ask` decided: the new state, the model (-1: nothing is asked now), its examples (none for a
    hold, an ask that holds back while the batches in flight may settle the stop)."""

    state: LiveState
    model: int
    examples: np.ndarray
    hold: bool = False


def stopped(live: LiveState) -> bool:
    """Whether the stopping rule has ended the run (the kernel's ``BanditState.stopped``)."""
    return live.bandit is not None and bool(np.asarray(live.bandit.stopped))


def in_flight(live: LiveState, m: int, batches: Sequence[tuple[int, np.ndarray]], estimator):
    """The batches in flight, ``[(model, example columns), ...]``, as the kernel's `pulse_jax.engine.InFlight`
    (cells, batches and the mask of examples observed or in flight, per model), and the models that may
    not be asked now (`pulse_jax.engine.blocked_by_flight`). NumPy: a JAX array here is an eager device
    operation per ask."""
    cells, counts = np.zeros(m, np.int32), np.zeros(m, np.int32)
    rows = np.array(live.bandit.observed, dtype=np.uint32)
    for i, index in batches:
        if len(index):              # a hold: nothing in flight
            index = np.asarray(index, np.int64)
            cells[i] += len(index)
            counts[i] += 1
            np.bitwise_or.at(rows[i], index // 32, (np.uint32(1) << (index % 32).astype(np.uint32)))
    blocked = engine.blocked_by_flight(estimator, counts)
    return engine.InFlight(cells, counts, rows), np.zeros(m, bool) if blocked is None else blocked


def ask(programs: Programs, live: LiveState, params, flight, pending: bool, logged: int = LIVE) -> Asked:
    """The next ask at ``live.step`` with the batches ``flight`` (`in_flight`) in flight (``pending``: any
    request is, holds included), as the kernel decides it: the stop (recorded in the state; nothing is
    asked), a wait (the step refits and something is in flight), a hold, or a full batch of the chosen
    model (no full batch fits: nothing is asked, finished once nothing is in flight). ``logged``: what
    a replayed log did at this step (`pulse_jax.engine.REPLAYED_ASK` ...), `LIVE` otherwise."""
    config, plugins = programs.kernel.config, programs.kernel.plugins
    counts, blocked = flight
    due = bool(engine.refit_due(config, plugins, live.step))
    bandit, out = programs.ask(live.episode, live.bandit, params, np.int32(live.step),
                               engine.Waiting(counts, blocked, np.bool_(due)), logged=np.int32(logged),
                               wait=np.bool_(due and pending))
    out = jax.device_get(out)                                  # one transfer for everything the host reads
    none = np.zeros(0, np.int64)
    if out.done:     # the kernel's ask recorded the stop (it chose nothing and did not refit)
        return Asked(live._replace(bandit=bandit, finished=not pending), -1, none)
    if due and pending:
        return Asked(live, -1, none)
    i, size = int(out.model), int(out.size)
    if out.hold:
        return Asked(live._replace(bandit=bandit, step=live.step + 1), i, none, True)
    if size == 0 or size < min(config.batch_size, int(out.unobserved)):
        # No full batch fits: stop here rather than shorten it (the stopping bound needs full batches).
        return Asked(live._replace(finished=not pending), -1, none)
    return Asked(live._replace(bandit=bandit, step=live.step + 1), i, np.asarray(out.examples[:size]))


def tell(programs: Programs, live: LiveState, params, request, scores) -> LiveState:
    """``live`` after the ``scores`` of ``request`` (a `pulse_jax.live.Request` of a bandit step >= 1;
    the first look is told by `start`)."""
    B, index = programs.kernel.config.batch_size, request.example_index
    padded, values = np.zeros(B, np.int32), np.zeros(B, np.float32)
    padded[:len(index)], values[:len(index)] = index, scores
    batch = engine.Batch(np.int32(request.model_index), np.int32(len(index)), padded, np.arange(B) < len(index), values)
    return live._replace(bandit=programs.tell(live.episode, live.bandit, params, np.int32(request.step), batch))


class FirstLook(NamedTuple):
    """The first look of a live selection: the run's ``key``, each model's first ``examples`` (those of
    ``simulate(..., seed)``'s repetition 0), the ``scores`` told so far ((m, n), zero elsewhere) and which
    models' first batches are ``told``."""

    key: jax.Array
    examples: np.ndarray
    scores: np.ndarray
    told: np.ndarray


def first_look(config, seed: int) -> FirstLook:
    """A `FirstLook` with nothing told yet."""
    from pulse_jax.live.compiled import first_draws
    from pulse_jax.stats.seeds import seed_key

    key = jax.random.fold_in(seed_key(seed), 0)
    return FirstLook(key, np.asarray(first_draws(config)(key)), np.zeros((config.n_models, config.n_examples),
                                                                         np.float32), np.zeros(config.n_models, bool))


def first_look_model(first: FirstLook, asked) -> int | None:
    """The next model whose first batch is neither told nor ``asked`` (None: none is left)."""
    return next((i for i in range(len(first.told)) if not first.told[i] and i not in asked), None)


def told_first(first: FirstLook, model: int, index, scores) -> bool:
    """Keep model ``model``'s first-look scores (on example columns ``index``); whether every model's are told."""
    first.scores[model, index] = scores
    first.told[model] = True
    return bool(first.told.all())


def start(programs: Programs, live: LiveState, first: FirstLook, V, params, cost=None) -> LiveState:
    """``live`` once every first-look batch is told: the kernel's ``init`` on their scores, ``cost`` per model
    and cell (None: every cell costs the same)."""
    import jax.numpy as jnp

    begin = engine.Start() if cost is None else engine.Start(
        cost=jnp.broadcast_to(jnp.asarray(cost, jnp.float32)[:, None], first.scores.shape))
    episode, bandit = programs.init(first.key, jnp.asarray(first.scores), jnp.asarray(V), params, begin)
    return live._replace(episode=episode, bandit=bandit)


def claim_now(programs: Programs, live: LiveState, params, flight) -> np.ndarray:
    """The models the stopping rule's claim names now (before the next step), as a simulation checks it."""
    status = programs.status(live.bandit, params, np.int32(live.step), flight[0], np.int32(LIVE))
    return np.asarray(status.claim, bool)
