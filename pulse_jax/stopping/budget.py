"""Fixed budget: spend the whole budget (the paper's setting; the default)."""
from __future__ import annotations

import functools

import jax.numpy as jnp

from pulse_jax.stopping.base import StoppingRule


def _never(inputs, params):
    del inputs, params
    return jnp.bool_(False)


def _statement(names, delta, params):
    del names, delta, params
    return "a fixed budget certifies nothing (the leader is the best estimate, not a certified best)"


@functools.cache
def spend_budget() -> StoppingRule:
    """Never stop before the budget is spent."""
    return StoppingRule("budget", _never, stops_early=False, statement=_statement, upper_models=1)   # claims nothing
