"""The kernel's pieces jitted for asking and telling one batch at a time (`pulse_jax.live.Selector`),
and the order a seed draws a model's examples in (`draw_order`)."""
from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from pulse_jax import engine
from pulse_jax.engine import BanditConfig
from pulse_jax.stats.seeds import seed_key


def draw_order(seed: int, model_index: int, n_examples: int, batch_size: int) -> np.ndarray:
    """Every example column in the order a selector with this seed draws them for model ``model_index``
    (batches of ``batch_size``; the same for the first look and later pulls): the draw key of a batch
    depends only on the seed, the model's index and how many examples it has seen (`sampling.draw_key`),
    so a model's draws form one uniform permutation fixed by the seed. An Inspect task ordered by it
    (`pulse_jax.harnesses.inspect_select`) is asked exactly what ``select`` asks."""
    from pulse_jax.stats import without_replacement as sampling

    examples_key = engine.draw_keys(jax.random.fold_in(seed_key(seed), 0), 1)[1]
    draw = batch_draw(int(n_examples), int(batch_size))
    row, order = sampling.empty_mask(1, n_examples)[0], []
    while len(order) < n_examples:
        picked, row = draw(examples_key, jnp.int32(model_index), jnp.int32(len(order)), row)
        order += np.asarray(picked)[:min(batch_size, n_examples - len(order))].tolist()
    return np.asarray(order)


@functools.lru_cache(maxsize=8)
def batch_draw(n_examples: int, batch_size: int):
    from pulse_jax.stats import without_replacement as sampling

    def draw(examples_key, i, seen, row):
        picked = sampling.draw(sampling.draw_key(examples_key, i, seen), row, seen, n_examples, batch_size)
        valid = jnp.arange(batch_size) < jnp.minimum(batch_size, n_examples - seen)
        return picked, sampling.mark(row, picked, valid)

    return jax.jit(draw)


class Asked(NamedTuple):
    """What an ask needs besides the state: the batches in flight (``in_flight``, an
    `pulse_jax.engine.InFlight`), the models that may not be asked now (``blocked``: with a batch in
    flight, for an estimator that draws by weights), the cells in flight (``reserved``) and whether the
    step refits (``due``)."""

    in_flight: engine.InFlight
    blocked: jax.Array
    reserved: jax.Array
    due: jax.Array


@functools.lru_cache(maxsize=16)
def compiled(config: BanditConfig, estimator):
    """Jitted kernel pieces for one configuration and estimator object, shared by every selector that
    uses them (parameters are traced: selectors that differ only in them share the programs).

    The asking kernel never stops by itself (its stopping rule is the budget's): the selector checks
    its own rule with ``status`` before each ask, so a replayed log is followed to its end whatever the
    rule, and a resumed run may change the rule (e.g. spend the rest of the budget after a certificate).
    """
    # The asking kernel spends by the budget's rule, but sees where the real rule's claim waits (its focus).
    real_stop = engine.plugins_of(config, estimator).stop
    asking_stop = engine.plugins_of(dataclasses.replace(config, stop="budget"), estimator).stop._replace(
        focus=real_stop.focus)
    kernel = engine.build_kernel(dataclasses.replace(config, stop=asking_stop), estimator)
    stopping = engine.build_kernel(config, estimator)
    status = jax.jit(stopping.stop_status)

    def ask(episode, state, params, t, asked: Asked):
        hold = stopping.held(state, params, t, asked.in_flight)    # by the run's own stopping rule
        state, choice = kernel.select(episode, state, params, t, asked.blocked, asked.reserved, in_flight=asked.in_flight)
        state = kernel.refit(episode, state, params, t, choice, due=asked.due)
        examples, _ = kernel.draw(episode, state, params, choice, asked.in_flight)
        return state, choice.model, choice.size, examples, hold

    def tell(episode, state, params, t, batch: engine.Batch):
        return kernel.observe(episode, state, params, t, batch)[0]

    def summary(state, params):
        estimates, low, high = kernel.bounds(state, params)
        return estimates, state.ledger, low, high

    return kernel, jax.jit(kernel.init), jax.jit(ask), jax.jit(tell), jax.jit(summary), status


