"""Naive-Pooling: predictions treated as truth (no valid interval)."""
from __future__ import annotations

import functools

import jax.numpy as jnp

from pulse_jax.estimators.base import Estimator, observed_mean, populations


@functools.cache
def naive_pooling() -> Estimator:
    """Naive-Pooling: predictions treated as truth,

        mu_hat_i = (sum_{O_i} S + sum_{U_i} f) / n,

    with the current predictions (every model refreshed after a refit). It is
    biased whenever the predictions are, so it has no valid interval (NaN).
    """

    def init(sums, params):
        del params
        return observed_mean(sums)

    def update(mu, sums, pull, n_examples, params):
        del params
        i = pull.model
        value = (sums.obs_sum[i] + pull.score_sum + sums.pred_sum[i] - pull.pred_sum) / populations(
            sums, n_examples)[i]
        return mu.at[i].set(jnp.where(pull.size > 0, value, mu[i])), ()

    def refresh(mu, sums, n_examples, params):
        del mu, params
        return (sums.obs_sum + sums.pred_sum) / populations(sums, n_examples)

    def estimate(mu, sums, params):
        del sums, params
        return mu

    # No interval: the default radius (NaN) and no proxies.
    return Estimator(name="naive", uses_predictions=True, init=init, update=update, refresh=refresh,
                     estimate=estimate)
