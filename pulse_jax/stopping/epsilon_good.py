r"""Epsilon-good: stop once one model is certified within ``epsilon`` of the best.

Model ``i`` is certified epsilon-good when its lower bound clears every other model's upper bound
less epsilon, :math:`L_i \ge \max_{j \ne i} U_j - \epsilon`. On the event the certification
guarantee rests on (every lower bound and a best model ``b``'s upper bound hold at every look,
probability at least ``1 - delta``; ``docs/confidence.md``),
:math:`\mu_i \ge L_i \ge U_b - \epsilon \ge \mu^* - \epsilon`. So with probability at least
``1 - delta`` the claimed model is within epsilon of the best, whenever the check fires; at
``epsilon = 0`` this is exact-best certification. Near-ties cost exact certification every
example of both models; epsilon-good stops once their difference no longer matters
(Even-Dar, Mannor & Mansour 2006 call the target an epsilon-optimal arm).

``epsilon`` is traced (`EpsilonParams`), so ``sweep`` over ``stop.epsilon`` compiles once.
"""
from __future__ import annotations

import functools

import jax.numpy as jnp

from pulse_jax.stopping.base import TIE_TOLERANCE, StoppingRule, others_max
from pulse_jax.registry import EpsilonParams   # the rule's number, declared where a command is checked


def _margins(inputs, params):
    """``L_i - max_{j != i} U_j + epsilon``: model i is certified epsilon-good where this is >= 0."""
    return inputs.low - others_max(inputs.high) + params.epsilon


def _done(inputs, params):
    return jnp.any(_margins(inputs, params) >= 0)


def _claim(inputs, params):
    margins = _margins(inputs, params)
    return (jnp.arange(margins.shape[0]) == jnp.argmax(jnp.where(jnp.isnan(margins), -jnp.inf, margins))) \
        & jnp.any(margins >= 0)


def _statement(names, delta, params):
    eps = float(params.epsilon)
    if not names:
        return f"no model is certified within {eps:g} of the best yet (delta = {delta:g})"
    within = "is the best model's (up to exact ties)" if eps == 0 else f"is within {eps:g} of the best model's"
    return (f"{names[0]}'s mean {within}, with probability at least {1 - delta:g} "
            f"(delta = {delta:g}; anytime-valid confidence sequences, so the data-dependent stop keeps the "
            "guarantee)")


def _holds(claimed, true_means, params):
    return bool(claimed.sum() == 1
                and true_means[claimed].max() >= true_means.max() - float(params.epsilon) - TIE_TOLERANCE)


@functools.cache
def epsilon_good() -> StoppingRule:
    """Stop once a model is certified within ``stop.epsilon`` of the best (needs an interval)."""
    return StoppingRule("epsilon_good", _done, needs_interval=True, claim=_claim, statement=_statement,
                        params=EpsilonParams(), holds=_holds, upper_models=1)   # a best model's bound
