"""UCB-E's estimator (Audibert et al. 2010): the mean of the observed cells."""
from __future__ import annotations

import functools

import jax.numpy as jnp

from pulse_jax.stats import confidence
from pulse_jax.estimators.base import Estimator, observed_mean, populations, raw_proxies


@functools.cache
def ucbe() -> Estimator:
    """UCB-E (Audibert et al. 2010): mean of the observed cells.

    Interval: empirical Bernstein-Serfling (sampling without replacement).
    """

    # No state of its own, no refresh, and the mean of the observed cells: the defaults.
    def radius(state, sums, n_examples, delta, params):
        del state, params
        mean = observed_mean(sums)
        variance = sums.obs_sq_sum / jnp.maximum(sums.n_obs, 1) - mean * mean
        return confidence.bernstein_serfling_radius(sums.n_obs, populations(sums, n_examples), variance, delta)

    def proxies(state, sums, pull, n_examples, params):
        del state, sums, n_examples, params
        return raw_proxies(pull)

    return Estimator(name="ucbe", radius=radius, proxies=proxies)
