r"""Certificates about what models cost: the cheapest good-enough model, and the cost-accuracy front.

Both rank the models by ``inputs.cost`` (``c_i``, each model's mean cost per cell: a price per
call, or a simulation's ``cost``) and rest on every model's bounds, :math:`L_i \le \mu_i \le U_i`
for every ``i`` at every look (``cs_simultaneous = 1``, probability at least ``1 - delta``;
``upper_models = EVERY_MODEL``). ``epsilon`` is traced (`EpsilonParams`): a sweep over
``stop.epsilon`` compiles once.

**Cheapest within epsilon** (`cheapest_within`). Model ``i`` is *certified good* when
:math:`L_i \ge \max_{j \ne i} U_j - \epsilon` (then :math:`\mu_i \ge \mu^* - \epsilon`, as for
`pulse_jax.stopping.epsilon_good`), and *certified not good* when
:math:`U_i < \max_j L_j - \epsilon` (then :math:`\mu_i \le U_i < L_\ell - \epsilon \le \mu^* - \epsilon`).
The rule stops once some certified-good ``X`` has every strictly cheaper model certified not good,
and claims ``X``: "X is within epsilon of the best, and every cheaper model is not". Among models
that cost the same, no order is claimed. With every model observed in full the bounds are the
means, so the check then fires on the truth: the cheapest good model is always certified within
the whole matrix.

**Cost-accuracy front** (`cost_front`). Model ``i`` is *certified dominated* when some model at most
as expensive, ``c_j \le c_i`` (``j \ne i``), is better by more than epsilon, :math:`L_j > U_i +
\epsilon`, and *certified on the front* when no model at most as expensive can be,
:math:`U_j \le L_i + \epsilon` for every such ``j``. The rule stops once every model is one or the
other, and claims the front: each claimed model has no model at most as expensive that is better
by more than epsilon, and each other model has one. Every model of the exact Pareto front (no
model at most as expensive is better) is in the claimed front; models within epsilon of being on
it may be too (at ``epsilon = 0`` the claim is the exact front, ties in cost and accuracy kept).

Both say which models stand between the look and the claim (``focus``), so a sampling rule that
reads ``inputs.focus`` (`pulse_jax.rules.focus`) spends where the certificate waits.
"""
from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

from pulse_jax.stopping.base import EVERY_MODEL, TIE_TOLERANCE, StoppingRule, others_max
from pulse_jax.stopping.epsilon_good import EpsilonParams


def _cost(inputs):
    return jnp.ones(inputs.estimates.shape, jnp.float32) if inputs.cost is None else inputs.cost


def _good(inputs, params):
    """``(m,)``: certified within epsilon of the best."""
    return inputs.low >= others_max(inputs.high) - params.epsilon


def _not_good(inputs, params):
    """``(m,)``: certified more than epsilon below the best."""
    return inputs.high < jnp.max(inputs.low) - params.epsilon


def _cheapest_certified(inputs, params):
    """``(m,)``: certified good models every strictly cheaper model of which is certified not good."""
    cost = _cost(inputs)
    cheaper = cost[None, :] < cost[:, None]                       # [i, j]: j is cheaper than i
    blocked = jnp.any(cheaper & ~_not_good(inputs, params)[None, :], axis=1)
    return _good(inputs, params) & ~blocked & jnp.isfinite(inputs.low)


def _cheapest_done(inputs, params):
    return jnp.any(_cheapest_certified(inputs, params))


def _cheapest_claim(inputs, params):
    certified = _cheapest_certified(inputs, params)
    pick = jnp.argmax(jnp.where(certified, inputs.estimates, -jnp.inf))
    return (jnp.arange(certified.shape[0]) == pick) & jnp.any(certified)


def _cheapest_focus(inputs, params):
    """Two models, like Top-Two's leader and challenger: the candidate ``X`` (of the cheapest models not
    yet certified not good, the one with the largest upper bound: the likeliest to be good enough), and
    the model its question waits on -- if ``X`` looks good enough (its estimate within epsilon of the
    largest), the other model with the largest upper bound (``X``'s lower bound must clear it), else the
    best-estimated other model (its lower bound must rise above ``X``'s upper bound; the model with the
    largest lower bound so far is often a cheap, well-sampled one that cannot: choosing by estimate
    measured 3-21% less money in ``bench_cost.py``)."""
    cost, m = _cost(inputs), inputs.estimates.shape[0]
    index = jnp.arange(m)
    open_ = ~_not_good(inputs, params)
    cheapest = jnp.min(jnp.where(open_, cost, jnp.inf))
    x = jnp.argmax(jnp.where(open_ & (cost <= cheapest), inputs.high, -jnp.inf))
    looks_good = inputs.estimates[x] >= jnp.max(inputs.estimates) - params.epsilon
    over = jnp.argmax(jnp.where(index == x, -jnp.inf, inputs.high))
    bar = jnp.argmax(jnp.where(index == x, -jnp.inf, inputs.estimates))
    return (index == x) | (index == jnp.where(looks_good, over, bar))


def _cheapest_statement(names, delta, params):
    eps = float(params.epsilon)
    if not names:
        return f"no model is certified the cheapest within {eps:g} of the best yet (delta = {delta:g})"
    return (f"{names[0]} is the cheapest model within {eps:g} of the best: its mean is within {eps:g} of the best "
            f"model's and every cheaper model's is more than {eps:g} below it, with probability at least "
            f"{1 - delta:g} (delta = {delta:g}; anytime-valid confidence sequences; costs per cell as given)")


def _cheapest_holds(claimed, true_means, params, cost):
    eps, best = float(params.epsilon), float(np.max(true_means))
    if claimed.sum() != 1:
        return False
    x = int(np.flatnonzero(claimed)[0])
    cheaper_good = (cost < cost[x]) & (true_means >= best - eps + TIE_TOLERANCE)
    return bool(true_means[x] >= best - eps - TIE_TOLERANCE and not cheaper_good.any())


@functools.cache
def cheapest_within(epsilon: float = 0.01) -> StoppingRule:
    """Stop once the cheapest model within ``stop.epsilon`` of the best is certified (needs an interval
    and bounds on every model: ``cs_simultaneous = 1``)."""
    _check_epsilon(epsilon, "cheapest_within")
    return StoppingRule("cheapest_within", _cheapest_done, needs_interval=True, claim=_cheapest_claim,
                        statement=_cheapest_statement, params=EpsilonParams(float(epsilon)), holds=_cheapest_holds,
                        upper_models=EVERY_MODEL, uses_cost=True, focus=_cheapest_focus)


def _as_cheap(inputs):
    """``[i, j]``: model ``j`` (another) costs at most what ``i`` costs."""
    cost = _cost(inputs)
    m = cost.shape[0]
    return (cost[None, :] <= cost[:, None]) & ~jnp.eye(m, dtype=bool)


def _front_status(inputs, params):
    """``(dominated, on_front)``, each ``(m,)`` bool: certified either way."""
    as_cheap = _as_cheap(inputs)
    low, high = inputs.low, inputs.high
    dominated = jnp.any(as_cheap & (low[None, :] > high[:, None] + params.epsilon), axis=1)
    on_front = ~jnp.any(as_cheap & (high[None, :] > low[:, None] + params.epsilon), axis=1)
    finite = jnp.isfinite(low) & jnp.isfinite(high)
    return dominated & finite, on_front & finite


def _front_done(inputs, params):
    dominated, on_front = _front_status(inputs, params)
    return jnp.all(dominated | on_front)


def _front_claim(inputs, params):
    dominated, on_front = _front_status(inputs, params)
    return on_front & ~dominated & jnp.all(dominated | on_front)


def _front_focus(inputs, params):
    """Two models: the cheapest model not yet placed (among equal costs the best estimate, which the
    others at its price are likeliest to be measured against), and the model its placement waits on:
    if it looks dominated (a model at most as expensive has an estimate more than epsilon above it),
    the best-estimated such model, whose lower bound must clear it; else the model at most as
    expensive with the largest upper bound, which it must clear. Placing the models cheapest first
    measured 8-28% less money than spreading the pulls over every unplaced model and its threat, and
    the witness by estimate and the tie-break by estimate 0-31% less again (``bench_cost.py``)."""
    dominated, on_front = _front_status(inputs, params)
    open_ = ~(dominated | on_front)
    as_cheap, index = _as_cheap(inputs), jnp.arange(open_.shape[0])
    cost = _cost(inputs)
    cheapest = jnp.min(jnp.where(open_, cost, jnp.inf))
    i = jnp.argmax(jnp.where(open_ & (cost <= cheapest), inputs.estimates, -jnp.inf))
    looks_dominated = jnp.any(as_cheap[i] & (inputs.estimates > inputs.estimates[i] + params.epsilon))
    witness = jnp.argmax(jnp.where(as_cheap[i], inputs.estimates, -jnp.inf))
    threat = jnp.argmax(jnp.where(as_cheap[i], inputs.high, -jnp.inf))
    other = jnp.where(looks_dominated, witness, threat)
    return ((index == i) | ((index == other) & jnp.any(as_cheap[i]))) & jnp.any(open_)


def _front_statement(names, delta, params):
    eps = float(params.epsilon)
    if not names:
        return f"the cost-accuracy front (within {eps:g}) is not certified yet (delta = {delta:g})"
    return (f"the cost-accuracy front within {eps:g} is {', '.join(names)}: no model at most as expensive beats any "
            f"of them by more than {eps:g}, and every other model is beaten by more than {eps:g} by one at most "
            f"as expensive, with probability at least {1 - delta:g} (delta = {delta:g}; anytime-valid confidence "
            "sequences; costs per cell as given)")


def _front_holds(claimed, true_means, params, cost):
    eps = float(params.epsilon)
    mu = np.asarray(true_means, np.float64)
    cost = np.asarray(cost, np.float64)
    as_cheap = (cost[None, :] <= cost[:, None]) & ~np.eye(len(mu), dtype=bool)
    beaten = np.any(as_cheap & (mu[None, :] > mu[:, None] + eps - TIE_TOLERANCE), axis=1)
    clearly_beaten = np.any(as_cheap & (mu[None, :] > mu[:, None] + eps + TIE_TOLERANCE), axis=1)
    claimed = np.asarray(claimed, bool)
    return bool(claimed.any() and not clearly_beaten[claimed].any() and beaten[~claimed].all())


@functools.cache
def cost_front(epsilon: float = 0.01) -> StoppingRule:
    """Stop once every model is certified on the cost-accuracy front (within ``stop.epsilon``) or
    dominated by one at most as expensive (needs an interval and bounds on every model)."""
    _check_epsilon(epsilon, "cost_front")
    return StoppingRule("cost_front", _front_done, needs_interval=True, claim=_front_claim,
                        statement=_front_statement, params=EpsilonParams(float(epsilon)), holds=_front_holds,
                        upper_models=EVERY_MODEL, uses_cost=True, focus=_front_focus)


def _check_epsilon(epsilon, name: str) -> None:
    """``epsilon`` a number in [0, 1], refused in one line naming the rule when the rule is made."""
    from pulse_jax.errors import require

    ok = isinstance(epsilon, (int, float)) and not isinstance(epsilon, bool) and 0 <= epsilon <= 1
    require(ok, f"{name}(epsilon={epsilon!r}): epsilon must be a number in [0, 1] (a gap in mean score)")
