"""Focus: pull where the stopping rule's claim waits, in proportions set by price.

A stopping rule may say which models stand between the current look and its claim
(`pulse_jax.stopping.StoppingRule.focus`; the kernel hands it to the rule as ``inputs.focus``):
the cheapest candidate of `pulse_jax.stopping.cheapest_within` and the model over it, the
unplaced models of `pulse_jax.stopping.cost_front` and their threats. This rule draws one of them
with probability proportional to its `pulse_jax.rules.base.cost_share`, ``sqrt(c_min / c)``: a
pair is pulled in the proportions that shrink its difference fastest per unit of cost, and equal
prices pull each alike (Top-Two's coin at ``beta = 1/2``). A rule that names no focus leaves
every model in it; when none of them can be pulled, the index rule chooses. It is the default rule
of the certificates about costs, and it serves any certificate that names a focus.
"""
from __future__ import annotations

import functools

import jax.numpy as jnp

from pulse_jax.rules.base import SamplingRule, cost_share
from pulse_jax.rules.ucb_index import IndexParams, choose_by_index
from pulse_jax.stats.ties import COIN, tie_uniform


def _choose(state, inputs, params):
    fallback, _ = choose_by_index(state, inputs, params)
    candidates = inputs.active & inputs.focus
    weight = jnp.where(candidates, cost_share(inputs), 0.0)
    total = jnp.cumsum(weight)
    u = tie_uniform(inputs.tie_key, inputs.t, COIN) * total[-1]
    pick = jnp.argmax(total > u)     # the first model whose cumulative weight passes u
    return jnp.where(jnp.any(candidates) & candidates[pick], pick, fallback), state


@functools.cache
def focus() -> SamplingRule:
    """Pull the models the stopping rule waits on, each with probability proportional to its cost share."""
    return SamplingRule("focus", _choose, needs_interval=True, params=IndexParams())
