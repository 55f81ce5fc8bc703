"""LUCB (Kalyanakrishnan et al. 2012), built for certification.

The leader is ``argmax mu_hat`` (stream ``LEADER``), the challenger the
other model with the highest upper bound (stream ``CHALLENGER``); of the two,
the one with the wider interval that can still be pulled is pulled. If
neither can be, the index rule's choice is. The bounds are the run's
simultaneous ones (``BanditConfig.interval``).

`lucb_top_k` is the same rule for a set (LUCB1 for the top m in the paper): the
k models with the largest estimates are the claimed set; its member with the
lowest lower bound and the outsider with the highest upper bound are the pair
whose intervals the top-k certificate (`pulse_jax.stopping.top_k`) waits on,
and the one of the two with the wider interval is pulled. ``k = 1`` is `lucb` but for ties among
the estimates, which go to the lower index (as the certificate names its set).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from pulse_jax.rules.base import SamplingRule, cost_weighted_width
from pulse_jax.rules.ucb_index import IndexParams, choose_by_index
from pulse_jax.stats.ties import CHALLENGER, LEADER, random_argmax, tie_uniform


def _wider(inputs, a, b, fallback):
    """Of ``a`` and ``b``, the one with the wider interval that can be pulled (``a`` on a tie); else
    ``fallback``. Widths are weighed by cost (`cost_weighted_width`: the widths themselves when every
    model costs the same)."""
    width = cost_weighted_width(inputs)
    active = inputs.active
    pick = jnp.where(active[a] & (~active[b] | (width[a] >= width[b])), a, b)
    return jnp.where(active[pick], pick, fallback)


def _choose(state, inputs, params):
    fallback, _ = choose_by_index(state, inputs, params)
    m = inputs.estimates.shape[0]
    leader = random_argmax(tie_uniform(inputs.tie_key, inputs.t, LEADER), inputs.estimates, inputs.model_order)
    others = jnp.where(jnp.arange(m) == leader, -jnp.inf, inputs.high)
    challenger = random_argmax(tie_uniform(inputs.tie_key, inputs.t, CHALLENGER), others, inputs.model_order)
    return _wider(inputs, leader, challenger, fallback), state


@functools.cache
def lucb() -> SamplingRule:
    """LUCB's leader-or-challenger rule (needs a method with an interval)."""
    # Its fallback is the index rule's choice, so it has the index rule's number.
    return SamplingRule("lucb", _choose, needs_interval=True, params=IndexParams())




def _choose_top_k(k, state, inputs, params):
    fallback, _ = choose_by_index(state, inputs, params)
    m = inputs.estimates.shape[0]
    _, top = jax.lax.top_k(inputs.estimates, k)          # the claimed set, as top_k's stop names it
    member = jnp.zeros(m, bool).at[top].set(True)
    weakest = random_argmax(tie_uniform(inputs.tie_key, inputs.t, LEADER), jnp.where(member, -inputs.low, -jnp.inf),
                            inputs.model_order)
    strongest = random_argmax(tie_uniform(inputs.tie_key, inputs.t, CHALLENGER),
                              jnp.where(member, -jnp.inf, inputs.high), inputs.model_order)
    return _wider(inputs, weakest, strongest, fallback), state


@functools.cache
def lucb_top_k(k: int) -> SamplingRule:
    """LUCB for the k best as a set: pull the weaker of the set's lowest lower bound and the best
    outsider's upper bound (the pair a `pulse_jax.stopping.top_k` certificate waits on)."""
    k = int(k)
    if k < 1:
        raise ValueError(f"lucb_top_k: k must be >= 1, got {k}")
    return SamplingRule(f"lucb_top_{k}", functools.partial(_choose_top_k, k), needs_interval=True,
                        params=IndexParams(), settings=(("k", k),))
