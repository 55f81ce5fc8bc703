"""Top-Two sampling with the empirical-best leader and the transportation-cost challenger (EB-TC).

Jourdan, Degenne and Kaufmann (2022), "Top two algorithms revisited", and
Jourdan et al. (2023), "An epsilon-best-arm identification algorithm for
fixed-confidence and beyond" (EB-TC). At step ``t``:

* the **leader** ``L = argmax_i mu_hat_i`` (stream ``LEADER``);
* the **challenger** ``C = argmin_{j != L} W(L, j)`` (stream ``CHALLENGER``),
  with ``challenger="transportation"`` (default) the Gaussian transportation cost

      W(L, j) = (mu_hat_L - mu_hat_j)_+ / sqrt(1 / N_L + 1 / N_j),

  the evidence that ``L`` beats ``j`` (the common variance cancels in the argmin);
  with ``challenger="interval"`` the evidence measured in the run's own
  simultaneous bounds,

      W(L, j) = low_L - high_j,

  negative exactly while j is not yet excluded by the certification check, so
  the challenger is the model furthest from being excluded (this variant needs
  an interval; ``docs/confidence.md``, "Batch size and the challenger");
* the leader is pulled with probability ``leader_fraction`` (``beta``; a
  uniform of stream ``COIN``), the challenger otherwise; when the two cost
  different amounts per cell, ``beta`` is weighed by the leader's price against its challengers'
  (`leader_probability`), and it is ``beta`` itself when every model costs the same. ``leader_fraction`` is
  the rule's own traced number (`TopTwoParams`, swept as
  ``rule.leader_fraction``; default the factory's argument), so a sweep over it
  never recompiles. If the one drawn cannot be pulled, the other is; if
  neither can, the index rule's choice (with ``rule.exploration``).

The estimates are the method's own (PULSE's doubly robust ones with PULSE),
so the rule plugs into every estimator.
"""
from __future__ import annotations

import functools

import jax.numpy as jnp

from pulse_jax.rules.base import SamplingRule
from pulse_jax.rules.ucb_index import choose_by_index
from pulse_jax.stats.ties import CHALLENGER, COIN, LEADER, random_argmax, tie_uniform
from pulse_jax.registry import TopTwoParams   # the rule's numbers, declared where a command is checked


def transportation_cost(estimates, n_obs, leader):
    """Gaussian ``W(L, j)`` for every ``j`` (0 at ``j = L`` and wherever ``mu_hat_j >= mu_hat_L``)."""
    n = jnp.maximum(n_obs, 1).astype(jnp.float32)
    gap = jnp.maximum(estimates[leader] - estimates, 0.0)
    return gap / jnp.sqrt(1.0 / n[leader] + 1.0 / n)


def interval_cost(estimates, low, high, leader):
    """``W(L, j) = low_L - high_j``: how far model j's upper bound lies below the leader's lower bound.

    Negative while j is not yet excluded by the certification check, positive once it is, so the
    challenger (the argmin) is the model furthest from being excluded, in the run's own bounds. The
    bounds are not symmetric around the estimates (betting sequences, models near exhaustion), so
    a cost built from the estimates and the half-widths can rank an excluded model first and spend
    pulls on it; this one cannot while any model is still in the way. ``estimates`` is unused (kept
    for the signature of the challenger costs)."""
    del estimates
    return low[leader] - high


def symmetric_interval_cost(estimates, low, high, leader):
    """``W(L, j) = (mu_hat_L - mu_hat_j)_+ / (w_L + w_j)``, ``w = (high - low) / 2``: the gap in units
    of the half-widths, as if each interval were centred on its estimate. Kept to measure why
    `interval_cost` measures exclusion directly (``docs/confidence.md``, "Batch size and the
    challenger"): with asymmetric bounds it ranks excluded models first."""
    half = (high - low) / 2
    gap = jnp.maximum(estimates[leader] - estimates, 0.0)
    scale = half[leader] + half
    return jnp.where(scale > 0, gap / jnp.where(scale > 0, scale, 1.0), jnp.inf)


def leader_probability(inputs, leader, challenger, beta):
    """The chance the leader is pulled: ``beta`` weighed by price, ``beta a / (beta a + 1 - beta)`` with
    ``a = sqrt(c_bar / c_L)``; exactly ``beta`` when every model costs the same.

    The leader's pulls serve every exclusion at once. For Gaussian means, the cheapest allocation
    that separates the leader from each challenger ``j`` (``1 / n_L + 1 / n_j`` fixed by its gap)
    has, at its optimum, ``c_L n_L^2 = sum_j c_j n_j^2`` (the derivative of the total cost in
    ``n_L``); with equal costs this is Top-Two's balance ``n_L^2 = sum_j n_j^2``. So the leader's
    share scales by ``sqrt(c_bar / c_L)``, where ``c_bar = sum_j c_j n_j^2 / sum_j n_j^2`` is the
    challengers' cost weighted as the optimum weighs them (their counts so far stand in for the
    optimum's). ``challenger`` is unused: one challenger's price is not what the leader's pulls buy."""
    del challenger
    cost = jnp.ones(inputs.estimates.shape, jnp.float32) if inputs.cost is None else inputs.cost
    n2 = jnp.square(jnp.maximum(inputs.n_obs, 1).astype(jnp.float32))
    others = jnp.arange(cost.shape[0]) != leader
    c_bar = jnp.sum(jnp.where(others, cost * n2, 0.0)) / jnp.sum(jnp.where(others, n2, 0.0))
    a = jnp.sqrt(c_bar / cost[leader])
    return jnp.where(jnp.all(cost == cost[0]), beta, beta * a / (beta * a + 1.0 - beta))


CHALLENGERS = ("transportation", "interval", "interval_symmetric")
COSTS = {"interval": interval_cost, "interval_symmetric": symmetric_interval_cost}


@functools.cache
def top_two(leader_fraction: float = 0.5, challenger: str = "transportation") -> SamplingRule:
    """Top-Two with a fixed leader fraction ``beta`` in (0, 1) (0.5: the usual choice) and the
    ``"transportation"`` (EB-TC) or ``"interval"`` challenger."""
    from pulse_jax.errors import PulseInputError

    beta = float(leader_fraction)
    if not 0.0 < beta < 1.0:
        raise PulseInputError(f"top_two: leader_fraction must lie in (0, 1), got {leader_fraction!r}")
    if challenger not in CHALLENGERS:
        raise PulseInputError(f"top_two: challenger must be one of {', '.join(CHALLENGERS)}, got {challenger!r}")
    by_interval = challenger in COSTS
    interval_cost_of = COSTS.get(challenger)

    def choose(state, inputs, params):
        fallback, _ = choose_by_index(state, inputs, params)
        t, key, order = inputs.t, inputs.tie_key, inputs.model_order
        m = inputs.estimates.shape[0]
        leader = random_argmax(tie_uniform(key, t, LEADER), inputs.estimates, order)
        cost = interval_cost_of(inputs.estimates, inputs.low, inputs.high, leader) if by_interval \
            else transportation_cost(inputs.estimates, inputs.n_obs, leader)
        cost = jnp.where(jnp.arange(m) == leader, jnp.inf, cost)
        challenger = random_argmax(tie_uniform(key, t, CHALLENGER), -cost, order)
        coin = tie_uniform(key, t, COIN) < leader_probability(inputs, leader, challenger, params.leader_fraction)
        first, second = jnp.where(coin, leader, challenger), jnp.where(coin, challenger, leader)
        active = inputs.active
        pick = jnp.where(active[first], first, second)
        return jnp.where(active[pick], pick, fallback), state

    return SamplingRule("top_two", choose, needs_interval=by_interval, settings=(("challenger", challenger),),
                        params=TopTwoParams(leader_fraction=beta))
