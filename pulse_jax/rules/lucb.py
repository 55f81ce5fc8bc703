"""LUCB (Kalyanakrishnan et al. 2012), built for certification.

The leader is ``argmax mu_hat`` (stream ``LEADER``), the challenger the
other model with the highest upper bound (stream ``CHALLENGER``); of the two,
the one with the wider interval that can still be pulled is pulled. If
neither can be, the index rule's choice is. The bounds are the run's
simultaneous ones (``BanditConfig.interval``).
"""
from __future__ import annotations

import functools

import jax.numpy as jnp

from pulse_jax.rules.base import BUILT_IN, SamplingRule
from pulse_jax.rules.ucb_index import IndexParams, choose_by_index
from pulse_jax.ties import CHALLENGER, LEADER, random_argmax, tie_uniform


def _choose(state, inputs, params):
    fallback, _ = choose_by_index(state, inputs, params)
    m = inputs.estimates.shape[0]
    leader = random_argmax(tie_uniform(inputs.tie_key, inputs.t, LEADER), inputs.estimates, inputs.model_order)
    others = jnp.where(jnp.arange(m) == leader, -jnp.inf, inputs.high)
    challenger = random_argmax(tie_uniform(inputs.tie_key, inputs.t, CHALLENGER), others, inputs.model_order)
    width = inputs.high - inputs.low
    active = inputs.active
    pick = jnp.where(active[leader] & (~active[challenger] | (width[leader] >= width[challenger])),
                     leader, challenger)
    return jnp.where(active[pick], pick, fallback), state


@functools.cache
def lucb() -> SamplingRule:
    """LUCB's leader-or-challenger rule (needs a method with an interval)."""
    # Its fallback is the index rule's choice, so it has the index rule's number.
    return SamplingRule("lucb", _choose, needs_interval=True, params=IndexParams())


BUILT_IN["lucb"] = lucb
