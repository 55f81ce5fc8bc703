r"""Tie groups: the models that cannot yet be separated from the leader, and the order of the groups.

The leader's group is :math:`G = \{j : U_j \ge \max_i L_i\}`: every model whose upper bound
reaches the largest lower bound. The best model is in ``G`` at every look with probability at
least ``1 - delta``: if a best model ``b`` were not, :math:`U_b < L_\ell \le \mu_\ell \le \mu_b`
for the model ``\ell`` with the largest lower bound, so ``\ell``'s lower bound or ``b``'s upper
bound failed -- the event certification rests on (``upper_models = 1``). A group of one is
exact-best certification. `tie_group` stops once ``G`` has at most ``stop.size`` models
(traced: a sweep over it compiles once).

`groups` splits every model into tie groups, best first: the leader's group, then the
leader's group of the models left, and so on. Each group's first model (the largest lower bound
left) is above every model of the later groups, whenever every bound holds -- at
``cs_simultaneous = 1`` with probability at least ``1 - delta``; at certification levels only the
first group carries the guarantee (the best model is in it). Live reports and ``report.json``
show both.
"""
from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

from pulse_jax.stopping.base import TIE_TOLERANCE, StoppingRule
from pulse_jax.registry import TieGroupParams   # the rule's number, declared where a command is checked


def leader_group(inputs) -> jnp.ndarray:
    """``(m,)`` bool: the models whose upper bound reaches the largest lower bound (none while a bound is NaN)."""
    best_low = jnp.max(inputs.low)
    return (inputs.high >= best_low) & jnp.isfinite(best_low)


def _done(inputs, params):
    group = leader_group(inputs)
    return jnp.any(group) & (jnp.sum(group) <= params.size)


def _claim(inputs, params):
    return leader_group(inputs) & _done(inputs, params)


def _statement(names, delta, params):
    if not names:
        return f"the best model's group has not narrowed to {float(params.size):g} models yet (delta = {delta:g})"
    if len(names) == 1:
        return (f"{names[0]} is the best model, with probability at least {1 - delta:g} (delta = {delta:g}; "
                "anytime-valid confidence sequences)")
    return (f"the best model is one of {', '.join(names)}, with probability at least {1 - delta:g} "
            f"(delta = {delta:g}; anytime-valid confidence sequences)")


def _holds(claimed, true_means, params):
    del params
    return bool(claimed.any() and true_means[claimed].max() >= true_means.max() - TIE_TOLERANCE)


def groups(estimates, low, high) -> list[list[int]]:
    """Model indices in tie groups, best group first (host side).

    The first group is the leader's group (`leader_group`): the model with the largest lower
    bound, then every model whose upper bound reaches it, by estimate. The same rule, applied to the
    models left, gives the next group, and so on. Each group's first model is above every model of
    the later groups (its lower bound clears their upper bounds).
    """
    estimates, low, high = (np.asarray(a, np.float64) for a in (estimates, low, high))
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        return [[int(i) for i in np.argsort(-estimates, kind="stable")]]
    left, out = np.ones(len(low), bool), []
    while left.any():
        head = int(np.argmax(np.where(left, low, -np.inf)))
        group = left & (high >= low[head])
        group[head] = True
        members = [head] + sorted((int(i) for i in np.flatnonzero(group) if i != head), key=lambda i: -estimates[i])
        out.append(members)
        left &= ~group
    return out


@functools.cache
def tie_group() -> StoppingRule:
    """Stop once the leader's group has at most ``stop.size`` models (needs an interval)."""
    return StoppingRule("tie_group", _done, needs_interval=True, claim=_claim, statement=_statement,
                        params=TieGroupParams(), holds=_holds, upper_models=1)   # the best model's bound
