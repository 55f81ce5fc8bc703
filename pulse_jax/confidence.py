"""Finite-sample confidence radii for the per-model mean estimates.

Both radii are two-sided at level ``delta`` (coverage ``1 - delta``) for one
model at a fixed number of pulls / observations, as stated in the paper.
They work on scores in [0, 1].
"""
from __future__ import annotations

import math

import jax.numpy as jnp


def freedman_radius(n_pulls, n_examples, delta, variance_bound=None):
    """Radius of the PULSE interval from Theorem 1 (Freedman's inequality).

    With ``K`` pulls, ``n`` examples and ``v`` bounding the average conditional
    variance of the residual correction ``Z``,

        P(|mu_hat - mu| >= eps) <= 2 exp(-eps^2 / (2 (v/(K n^2) + 2 eps/(3K)))).

    Setting the right side to ``delta`` with ``L = log(2/delta)`` and solving the
    quadratic in ``eps`` gives

        eps = 2L/(3K) + sqrt((2L/(3K))^2 + 2 L v / (K n^2)).

    ``variance_bound=None`` uses ``v = n^2``, which holds for every predictable
    lambda in [0, 1] and scores in [0, 1] (|Z| <= |U_i| <= n), so the interval
    is always valid, if conservative.
    """
    n_pulls = jnp.maximum(jnp.asarray(n_pulls, jnp.float32), 1.0)
    n = jnp.float32(n_examples)
    v = n * n if variance_bound is None else jnp.float32(variance_bound)
    log_term = jnp.log(2.0 / jnp.asarray(delta, jnp.float32))
    linear = 2.0 * log_term / (3.0 * n_pulls)
    return linear + jnp.sqrt(linear * linear + 2.0 * log_term * v / (n_pulls * n * n))


def bernstein_serfling_radius(n_obs, n_examples, sample_variance, delta, score_range=1.0):
    """Radius of the UCB-E interval: empirical Bernstein-Serfling.

    Bardenet & Maillard (2015), empirical Bernstein-Serfling inequality for
    sampling ``k`` of ``N`` points without replacement, with range ``b - a``,
    biased sample variance ``sigma_hat^2`` and ``kappa = 7/3 + 3/sqrt(2)``:

        mu_hat - mu <= sigma_hat sqrt(2 rho_k log(5/d) / k) + kappa (b-a) log(5/d) / k

    with probability at least ``1 - d``, where ``rho_k = 1 - (k-1)/N`` for
    ``k <= N/2`` and ``(1 - k/N)(1 + 1/k)`` otherwise. Two-sided: ``d = delta/2``.
    A fully observed model (``k = N``) has radius 0.
    """
    k = jnp.maximum(jnp.asarray(n_obs, jnp.float32), 1.0)
    big_n = jnp.float32(n_examples)
    rho = jnp.where(k <= big_n / 2.0, 1.0 - (k - 1.0) / big_n, (1.0 - k / big_n) * (1.0 + 1.0 / k))
    log_term = jnp.log(5.0 / (jnp.asarray(delta, jnp.float32) / 2.0))
    kappa = 7.0 / 3.0 + 3.0 / math.sqrt(2.0)
    sigma = jnp.sqrt(jnp.maximum(sample_variance, 0.0))
    radius = sigma * jnp.sqrt(2.0 * rho * log_term / k) + kappa * score_range * log_term / k
    return jnp.where(k >= big_n, 0.0, radius)


def anytime_delta(delta, count, n_models):
    """Per-(model, count) level for bounds valid at every count and model at once.

    ``delta_k = delta / (n_models k (k + 1))`` sums to at most ``delta`` over
    ``k = 1, 2, ...`` and the models (a union bound), so intervals built at
    ``delta_k`` hold simultaneously for all models and all times with
    probability at least ``1 - delta``: they may be checked after every batch.
    """
    k = jnp.maximum(jnp.asarray(count, jnp.float32), 1.0)
    return delta / (n_models * k * (k + 1.0))
