"""Fixed confidence: stop once a model is certified best.

Certified means the leader's lower confidence bound exceeds every other
model's upper bound. The bounds are simultaneous over the models and valid
at every look (`pulse_jax.stats.confidence`), so with probability at least
``1 - delta`` a certified model is the true best, whenever the check fires.
"""
from __future__ import annotations

import functools

import jax.numpy as jnp

from pulse_jax.stopping.base import StoppingRule, best_claim_holds


def _certified(inputs, params):
    del params
    return inputs.certified


def _certified_model(inputs, params):
    del params
    return inputs.certified & (jnp.arange(inputs.estimates.shape[0]) == inputs.certified_model)


def _statement(names, delta, params):
    del params
    if not names:
        return f"no model is certified best yet (anytime-valid confidence sequences at delta = {delta:g})"
    return (f"{names[0]} is the best model, with probability at least {1 - delta:g} (delta = {delta:g}; "
            "anytime-valid confidence sequences, so the data-dependent stop keeps the guarantee)")


@functools.cache
def when_certified() -> StoppingRule:
    """Stop at the first certification (needs a method with an interval)."""
    return StoppingRule("certified", _certified, needs_interval=True, claim=_certified_model, statement=_statement,
                        holds=best_claim_holds, upper_models=1)   # the best model's upper bound only
