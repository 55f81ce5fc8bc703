"""The paper's sampling rule (UCB-E, Audibert et al. 2010): pull ``argmax_i mu_hat_i + sqrt(a / N_i)``.

``a`` is the rule's own number ``exploration`` (`IndexParams`; swept as
``rule.exploration``); ties are broken uniformly at random (stream ``PULL``).
It is the default rule of every method.
"""
from __future__ import annotations

import functools

from pulse_jax.rules.base import SamplingRule, ucb_index
from pulse_jax.stats.ties import PULL, random_argmax, tie_uniform
from pulse_jax.registry import IndexParams   # the rule's number, declared where a command is checked


def choose_by_index(state, inputs, params):
    """The index rule's choice (shared by the rules that fall back on it; ``params`` has ``exploration``)."""
    u = tie_uniform(inputs.tie_key, inputs.t, PULL)
    return random_argmax(u, ucb_index(inputs, params.exploration), inputs.model_order), state


@functools.cache
def ucb_index_rule() -> SamplingRule:
    """UCB-E's index rule (the paper's Algorithm 1, step 1)."""
    return SamplingRule("ucbe", choose_by_index, params=IndexParams())
