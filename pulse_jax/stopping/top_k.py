r"""Top-k: stop once the set of the k best models is certified (as a set; its order is not).

Let ``S`` be the k models with the largest estimates. The set is certified when its smallest lower
bound clears every other model's upper bound, :math:`\min_{i \in S} L_i \ge \max_{j \notin S} U_j`
(if any k-set satisfies this, the top k by estimate does: estimates lie inside their intervals).
It is wrong only if some ``i`` in ``S`` is below some ``j`` outside that belongs to the true top
k; then :math:`L_i \le \mu_i < \mu_j \le U_j` fails unless ``i``'s lower bound or ``j``'s upper
bound failed. The event needs every lower bound and the upper bounds of the k best models:
``upper_models = k``. At certification levels (``cs_simultaneous = s < 1``) each upper bound is
set at ``delta / (2 C m^s)``, so the k of them together take at most ``delta / 2`` only when
``m^s >= k``; `pulse_jax.engine.check_levels` refuses a run with less, and the CLI raises
``s`` to ``log k / log m`` itself. Then ``P(a wrong set) <= delta``.

``k`` is static (it fixes the claim's size); the rule has no traced numbers.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from pulse_jax.errors import require
from pulse_jax.stopping.base import TIE_TOLERANCE, StoppingRule


def _top_set(inputs, k):
    # lax.top_k: O(m k) instead of a full sort; equal estimates go to the lower index, as a stable sort.
    _, index = jax.lax.top_k(inputs.estimates, k)
    return jnp.zeros(inputs.estimates.shape, bool).at[index].set(True)


def _separated(inputs, k):
    top = _top_set(inputs, k)
    return jnp.min(jnp.where(top, inputs.low, jnp.inf)) >= jnp.max(jnp.where(top, -jnp.inf, inputs.high)), top


def _holds(k):
    def holds(claimed, true_means, params):
        del params
        if claimed.sum() != k:
            return False
        return bool(true_means[claimed].min() >= true_means[~claimed].max() - TIE_TOLERANCE)
    return holds


def _statement(k):
    def statement(names, delta, params):
        del params
        if not names:
            return f"the {k} best models are not certified as a set yet (delta = {delta:g})"
        return (f"{', '.join(names)} are the {k} best models (as a set; their order is not certified), with "
                f"probability at least {1 - delta:g} (delta = {delta:g}; anytime-valid confidence sequences)")
    return statement


@functools.cache
def top_k(k: int = 3) -> StoppingRule:
    """Stop once the k best models are certified as a set (needs an interval and ``n_models > k``)."""
    require(isinstance(k, int) and not isinstance(k, bool) and k >= 1, f"top_k: k must be an integer >= 1, got {k!r}")

    def done(inputs, params):
        del params
        return _separated(inputs, k)[0]

    def claim(inputs, params):
        del params
        separated, top = _separated(inputs, k)
        return top & separated

    return StoppingRule("top_k", done, needs_interval=True, settings=(("k", k),), claim=claim,
                        statement=_statement(k), holds=_holds(k), upper_models=k)
