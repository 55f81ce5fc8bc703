"""Focus: pull where the stopping rule's claim waits, the widest interval per unit of cost.

A stopping rule may say which models stand between the current look and its claim
(`pulse_jax.stopping.StoppingRule.focus`; the kernel hands it to the rule as ``inputs.focus``):
the cheapest candidate of `pulse_jax.stopping.cheapest_within` and the model over it, the
unplaced models of `pulse_jax.stopping.cost_front` and their threats. This rule pulls, among
them, the model with the largest cost-weighted width (`pulse_jax.rules.base.cost_weighted_width`:
``width c^{-1/4}``, which splits a pair's cells as ``n ~ 1 / sqrt(c)``); a rule that names no focus
leaves every model in it. When none of them can be pulled, the index rule chooses. It is the
default rule of the certificates about costs, and it serves any certificate that names a focus.
"""
from __future__ import annotations

import functools

import jax.numpy as jnp

from pulse_jax.rules.base import BUILT_IN, SamplingRule, cost_weighted_width
from pulse_jax.rules.ucb_index import IndexParams, choose_by_index
from pulse_jax.stats.ties import LEADER, random_argmax, tie_uniform


def _choose(state, inputs, params):
    fallback, _ = choose_by_index(state, inputs, params)
    candidates = inputs.active if inputs.focus is None else inputs.active & inputs.focus
    width = jnp.where(candidates, cost_weighted_width(inputs), -jnp.inf)
    width = jnp.where(jnp.isnan(width), -jnp.inf, width)
    pick = random_argmax(tie_uniform(inputs.tie_key, inputs.t, LEADER), width, inputs.model_order)
    return jnp.where(jnp.any(candidates) & jnp.isfinite(width[pick]), pick, fallback), state


@functools.cache
def focus() -> SamplingRule:
    """Pull the widest interval per unit of cost among the models the stopping rule waits on."""
    return SamplingRule("focus", _choose, needs_interval=True, params=IndexParams())


BUILT_IN["focus"] = focus
