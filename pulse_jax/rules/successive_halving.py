"""Successive halving (Karnin, Koren and Somekh 2013), a fixed-budget rule.

With ``P = floor(bandit budget / B)`` batches to give and ``R = ceil(log2 m)``
phases, phase ``r`` gives each of its ``|S_r|`` surviving models

    t_r = floor(P / (|S_r| R))   batches   (the last phase, r = R - 1: floor(P_left / |S_r|),
                                            so the rounding left over by earlier phases is spent),

round robin (the survivor with the fewest batches this phase, random ties:
stream ``PULL``). When every survivor has its ``t_r`` batches (or is
exhausted), the ``ceil(|S_r| / 2)`` survivors with the highest estimates
(ties in the repetition's model order) go on and the others are eliminated.
The run's recommendation is the best survivor (``eligible``). After the
last halving the survivor takes the batches that rounding left, so the rule
gives exactly ``P`` batches when no model runs out of examples.
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from pulse_jax.rules.base import SamplingRule
from pulse_jax.stats.ties import PULL, random_argmax, tie_uniform


class HalvingState(NamedTuple):
    survivors: chex.Array     # (m,) bool
    phase: chex.Array         # int32, 0-based
    phase_pulls: chex.Array   # (m,) int32 batches in the current phase
    used: chex.Array          # int32 batches given in the phases before this one
    total: chex.Array         # int32 P, from the configuration (constant)
    n_phases: chex.Array      # int32 R (constant)


def schedule(n_models: int, bandit_budget: int, batch_size: int) -> tuple[int, int]:
    """``(P, R)``: batches to give and number of phases."""
    return bandit_budget // batch_size, max(1, math.ceil(math.log2(n_models)))


def _target(state: HalvingState) -> chex.Array:
    """``t_r``: the batches each survivor gets in the current phase."""
    k = jnp.maximum(jnp.sum(state.survivors), 1)
    regular = state.total // (k * state.n_phases)
    return jnp.where(state.phase >= state.n_phases - 1, (state.total - state.used) // k, regular)


def _halve(state: HalvingState, estimates, model_order) -> HalvingState:
    """Keep the ``ceil(k / 2)`` best survivors by estimate (ties: earlier in ``model_order``)."""
    k = jnp.sum(state.survivors)
    values = jnp.where(state.survivors, estimates, -jnp.inf)[model_order]
    ranks = jnp.zeros_like(model_order).at[jnp.argsort(-values, stable=True)].set(
        jnp.arange(values.shape[0], dtype=model_order.dtype))
    keep = jnp.zeros_like(state.survivors).at[model_order].set(ranks < (k + 1) // 2)
    return state._replace(survivors=keep, phase=state.phase + 1, phase_pulls=jnp.zeros_like(state.phase_pulls),
                          used=state.used + jnp.sum(state.phase_pulls))


def _init(config) -> HalvingState:
    m = config.n_models
    total, n_phases = schedule(m, config.bandit_budget, config.batch_size)
    return HalvingState(jnp.ones(m, bool), jnp.int32(0), jnp.zeros(m, jnp.int32), jnp.int32(0),
                        jnp.int32(total), jnp.int32(n_phases))


def _choose(state: HalvingState, inputs, params):
    del params
    done = ~state.survivors | inputs.exhausted | (state.phase_pulls >= _target(state))
    over = jnp.all(done) & (jnp.sum(state.survivors) > 1)
    halved = _halve(state, inputs.estimates, inputs.model_order)
    state = jax.tree_util.tree_map(lambda a, b: jnp.where(over, a, b), halved, state)
    want = state.survivors & inputs.active & (state.phase_pulls < _target(state))
    u = tie_uniform(inputs.tie_key, inputs.t, PULL)
    fewest = jnp.where(want, -state.phase_pulls, jnp.iinfo(jnp.int32).min)
    return jnp.where(jnp.any(want), random_argmax(u, fewest, inputs.model_order), -1), state


def _update(state: HalvingState, model, size) -> HalvingState:
    return state._replace(phase_pulls=state.phase_pulls.at[model].add((size > 0).astype(jnp.int32)))


def _survivors(state: HalvingState):
    return state.survivors


@functools.cache
def successive_halving() -> SamplingRule:
    """Successive halving over the run's bandit budget (see the module docstring)."""
    return SamplingRule("successive_halving", _choose, _init, _update, _survivors, plans_on_budget=True)
