"""Fixed confidence: stop once a model is certified best.

Certified means the leader's lower confidence bound exceeds every other
model's upper bound. The bounds are simultaneous over the models and valid
at every look (:mod:`pulse_jax.confidence`), so with probability at least
``1 - delta`` a certified model is the true best, whenever the check fires.
"""
from __future__ import annotations

import functools

from pulse_jax.stopping.base import StoppingRule


def _certified(inputs, params):
    del params
    return inputs.certified


@functools.cache
def when_certified() -> StoppingRule:
    """Stop at the first certification (needs a method with an interval)."""
    return StoppingRule("certified", _certified, needs_interval=True)
