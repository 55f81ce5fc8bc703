"""The kernel's pieces jitted for asking and telling one batch at a time (`pulse_jax.live.Selector`),
its first look's draws (`first_draws`) and the order a seed draws a model's examples in (`draw_order`)."""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from pulse_jax import engine
from pulse_jax.engine import BanditConfig
from pulse_jax.stats import confidence
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


@functools.lru_cache(maxsize=16)
def first_draws(config: BanditConfig):
    """Stage 1's examples, ``(m, T0 B)``, as one jitted function of the run's key: `pulse_jax.engine.draw_keys`
    then `pulse_jax.engine.initial_draws`, as the kernel's ``init`` draws them. Run op by op, the same
    draws would compile each of their few dozen operations for every configuration's shapes."""

    def draws(key):
        examples_key = engine.draw_keys(key, config.n_models)[1]
        return engine.initial_draws(examples_key, config)[0]

    return jax.jit(draws)


@functools.lru_cache(maxsize=8)
def batch_draw(n_examples: int, batch_size: int):
    from pulse_jax.stats import without_replacement as sampling

    def draw(examples_key, i, seen, row):
        picked = sampling.draw(sampling.draw_key(examples_key, i, seen), row, seen, n_examples, batch_size)
        valid = jnp.arange(batch_size) < jnp.minimum(batch_size, n_examples - seen)
        return picked, sampling.mark(row, picked, valid)

    return jax.jit(draw)


class Programs(NamedTuple):
    """The kernel of one configuration and estimator object, and its pieces jitted for a live selection
    (`compiled`): ``init``, ``status`` (the kernel's ``stop_status``, with ``logged`` for a replay),
    ``ask`` (`pulse_jax.engine.ask_now`: the status and the ask in one call), ``tell`` (the state after a batch) and
    ``summary`` (estimates, the per-model sums, bounds and the certificate, in one call)."""

    kernel: engine.Kernel
    init: object
    status: object
    ask: object
    tell: object
    summary: object


@functools.lru_cache(maxsize=16)
def compiled(config: BanditConfig, plugins) -> Programs:
    """`Programs` of one configuration and `pulse_jax.Plugins`, shared by every selector that uses them
    (parameters are traced: selectors that differ only in them share the programs). It is the same
    kernel a simulation steps: the ask is given the kernel's own ``stop_status``, which records the stop
    in the state (`pulse_jax.live.core.ask`)."""
    kernel = engine.build_kernel(config, plugins)

    def status(state, params, t, in_flight, logged):
        return kernel.stop_status(state, params, t, in_flight, logged)

    def ask(episode, state, params, t, waiting: engine.Waiting, *, logged, wait):
        state, _, out = engine.ask_now(kernel, episode, state, params, t, waiting, logged=logged, wait=wait)
        return state, out

    def tell(episode, state, params, t, batch: engine.Batch):
        return kernel.tell(episode, state, params, t, batch)[0]

    def summary(state, params):
        # the certificate compiled with the bounds: run eagerly it would compile each of its operations
        estimates, low, high = kernel.bounds(state, params)
        return estimates, state.sums, low, high, confidence.certify(low, high)

    return Programs(kernel, jax.jit(kernel.init), jax.jit(status), jax.jit(ask), jax.jit(tell), jax.jit(summary))
