"""The information floor of best-model identification on a score matrix: how many cells any method
that certifies the best model with error at most ``delta`` needs, from the matrix's means alone.

Garivier & Kaufmann ("Optimal best arm identification with fixed confidence", COLT 2016, Theorem 1):
for Bernoulli arms with means ``mu`` (a unique best, arm 1), every ``delta``-correct strategy draws
in expectation at least

    T*(mu) kl(delta, 1 - delta),   1 / T*(mu) = sup_{w in simplex} min_{a != 1}
                                       [w_1 kl(mu_1, x_a) + w_a kl(mu_a, x_a)],
    x_a = (w_1 mu_1 + w_a mu_a) / (w_1 + w_a),

with ``kl`` the Bernoulli relative entropy, and the optimal weights ``w*`` say how the draws are
shared: arm ``a`` gets ``w*_a T*(mu) kl(delta, 1 - delta)`` of them. The weights are found as in
their Section 2.2: with ``g_a(x) = kl(mu_1, m) + x kl(mu_a, m)``, ``m = (mu_1 + x mu_a) / (1 + x)``,
increasing from 0 to ``kl(mu_1, mu_a)``, let ``x_a(y) = g_a^{-1}(y)``; the ``y*`` in
``(0, min_a kl(mu_1, mu_a))`` where ``sum_a kl(mu_1, m_a) / kl(mu_a, m_a) = 1`` (that sum increases
in ``y``) gives ``w*_a proportional to x_a(y*)`` (``x_1 = 1``) and ``T*(mu) = sum_a x_a(y*) / y*``.

A benchmark is a finite population: a model's ``N`` examples drawn without replacement. ``n`` such
draws estimate its mean with the variance of ``n_eff = n (N - 1) / (N - n)`` draws with replacement,
so a model that needs ``n_eff`` draws' worth of information needs ``n = n_eff N / (N - 1 + n_eff)``
of its examples (never more than ``N``: all of them give its mean exactly). The floor adds each
model's ``n``, at least its first look (every method evaluates every model on its first batches).
Exact ties for the best make the best unidentifiable from samples: the tied models then need every
example (``n = N``), as the finite-population formula gives in the limit.

Scores must be 0/1 (the Bernoulli ``kl`` is then the exact relative entropy of a draw).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from pulse_jax.errors import require

#: Bisection steps: 100 halvings of an interval within [0, 1e3] reach float64 resolution.
_STEPS = 100


class Floor(NamedTuple):
    """The information floor of one matrix (see the module docstring)."""

    cells: float            # the floor: the sum of ``per_model``
    per_model: np.ndarray   # (m,) cells each model needs, at least ``first_look``, at most its examples
    draws: np.ndarray       # (m,) the with-replacement draws ``w*_a T*(mu) kl(delta, 1 - delta)``
    weights: np.ndarray     # (m,) the optimal proportions ``w*`` (they sum to 1)
    characteristic_time: float   # ``T*(mu)``
    best: int               # the row of the best model


def bernoulli_kl(p, q):
    """``kl(p, q) = p log(p / q) + (1 - p) log((1 - p) / (1 - q))``, with ``0 log 0 = 0``."""
    p, q = np.asarray(p, np.float64), np.clip(np.asarray(q, np.float64), 1e-300, 1 - 1e-16)
    with np.errstate(divide="ignore", invalid="ignore"):
        first = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0) / q), 0.0)
        second = np.where(p < 1, (1 - p) * np.log(np.where(p < 1, 1 - p, 1.0) / (1 - q)), 0.0)
    return first + second


def _mix(best, other, x):
    return (best + x * other) / (1.0 + x)


def _g(best, other, x):
    m = _mix(best, other, x)
    return bernoulli_kl(best, m) + x * bernoulli_kl(other, m)


def _bisect(fn, low, high, increasing=True):
    """The root of a monotone ``fn`` in ``[low, high]`` (elementwise for array bounds)."""
    low, high = np.asarray(low, np.float64).copy(), np.asarray(high, np.float64).copy()
    for _ in range(_STEPS):
        mid = (low + high) / 2
        above = fn(mid) > 0
        if not increasing:
            above = ~above
        high, low = np.where(above, mid, high), np.where(above, low, mid)
    return (low + high) / 2


def _x_of(best, others, y):
    """``x_a(y) = g_a^{-1}(y)`` for every other model (``g_a`` increases from 0 to ``kl(best, other)``)."""
    high = np.ones_like(others)
    while np.any(_g(best, others, high) < y):     # g grows without reaching kl(best, other) > y
        high = np.where(_g(best, others, high) < y, high * 2, high)
    return _bisect(lambda x: _g(best, others, x) - y, np.zeros_like(others), high)


def characteristic_time(mu) -> tuple[float, np.ndarray]:
    """``(T*(mu), w*)`` for Bernoulli means ``mu`` with a unique best (module docstring)."""
    mu = np.asarray(mu, np.float64)
    require(mu.ndim == 1 and len(mu) >= 2, f"mu must hold at least 2 means, got shape {mu.shape}")
    order = np.argsort(-mu, kind="stable")
    best, others = mu[order[0]], mu[order[1:]]
    require(best > others.max(), "the best mean is tied: no finite number of draws with replacement identifies it")

    def excess(y):      # sum_a kl(best, m_a) / kl(other_a, m_a) - 1, increasing in y
        x = _x_of(best, others, y)
        m = _mix(best, others, x)
        return np.sum(bernoulli_kl(best, m) / np.maximum(bernoulli_kl(others, m), 1e-300)) - 1.0

    top = float(np.min(bernoulli_kl(best, others)))
    y = float(_bisect(np.vectorize(excess), 0.0, top * (1 - 1e-12)))
    x = np.concatenate([[1.0], _x_of(best, others, y)])
    weights = np.empty_like(mu)
    weights[order] = x / x.sum()
    return float(x.sum() / y), weights


def finite_population_cells(draws, population):
    """The examples of a population of ``N`` that carry the information of ``draws`` draws with
    replacement: ``n = n_eff N / (N - 1 + n_eff)`` (``N`` itself for infinite ``draws``)."""
    draws, population = np.asarray(draws, np.float64), np.asarray(population, np.float64)
    with np.errstate(invalid="ignore"):
        n = np.where(np.isinf(draws), population, draws * population / (population - 1 + draws))
    return np.minimum(n, population)


def information_floor(scores, delta: float, first_look: int = 0) -> Floor:
    """The finite-population information floor of a 0/1 score matrix ``scores`` (models x examples,
    NaN where a model has no score: its population is its scored examples), for a best-model claim
    with error at most ``delta``; every model is evaluated on at least ``first_look`` examples."""
    scores = np.asarray(scores, np.float64)
    require(scores.ndim == 2 and scores.shape[0] >= 2, f"scores must be a models x examples matrix of at least 2 "
                                                       f"models, got shape {scores.shape}")
    seen = ~np.isnan(scores)
    require(np.all(np.isin(scores[seen], (0.0, 1.0))), "the information floor needs 0/1 scores (the Bernoulli kl is "
                                                       "the exact information of a draw only then)")
    require(0 < delta < 0.5, f"delta must be in (0, 0.5), got {delta}")
    population = seen.sum(axis=1)
    require(population.min() >= 1, "every model needs at least one score")
    mu = np.where(seen, scores, 0.0).sum(axis=1) / population
    scale = float(bernoulli_kl(delta, 1 - delta))
    tied = np.flatnonzero(mu == mu.max())
    if len(tied) > 1:       # identified only by exhausting the tied models (finite population)
        rest = np.setdiff1d(np.arange(len(mu)), tied)
        draws = np.full(len(mu), np.inf)
        weights = np.zeros(len(mu))
        if len(rest):       # the others against the tie, as against a unique best of the same mean
            t, w = characteristic_time(np.concatenate([[mu.max()], mu[rest]]))
            draws[rest] = w[1:] * t * scale
        best, t_star = int(tied[0]), math.inf
    else:
        t_star, weights = characteristic_time(mu)
        draws, best = weights * t_star * scale, int(tied[0])
    per_model = np.minimum(np.maximum(finite_population_cells(draws, population), first_look), population)
    return Floor(float(per_model.sum()), per_model, draws, weights, t_star, best)
