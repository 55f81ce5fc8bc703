"""What a run knows about its models at any time: estimates, simultaneous bounds, the first
certificate and the interval half-widths (which `pulse_jax.engine.run_trace` keeps as snapshots).

Pure functions of ``(config, estimator, state, params)`` (``params`` a `pulse_jax.RunParams`); the bandit step calls them after every
observation, and live selection reads the same numbers. ``state`` is a
`pulse_jax.engine.state.BanditState`.
"""
from __future__ import annotations

from typing import NamedTuple

import chex
import jax.numpy as jnp

from pulse_jax.stats import confidence
from pulse_jax.estimators.base import populations


class Certificate(NamedTuple):
    """The first certification of a run: cells spent then and the model certified (-1: not yet)."""

    spent: chex.Array
    model: chex.Array


class Snapshots(NamedTuple):
    """Interval half-widths at ``config.snapshot_budgets`` (``(K, m)`` each; NaN until reached)."""

    cs: chex.Array      # confidence sequence (exhausted models: 0)
    paper: chex.Array   # the paper's fixed-count radius at delta


def current_estimates(estimator, state, n_examples: int, params) -> chex.Array:
    """``mu_hat`` of every model; exhausted models (all ``N_i`` examples seen) are known exactly."""
    sums = state.sums
    size = populations(sums, n_examples)
    return jnp.where(sums.n_obs >= size, sums.obs_sum / size,
                     estimator.estimate(state.estimator, sums, params.estimator))


def interval_bounds(estimator, state, config, params, interval: str | None = None) -> tuple[chex.Array, chex.Array]:
    """Every model's ``(low, high)`` under ``interval`` (default ``config.interval``), simultaneous over
    the models and valid at every look; exhausted models are known exactly; NaN without an interval.

    ``"cs"``: the running intersection of the anytime-valid confidence sequences. ``"paper"``: the
    estimator's fixed-count radius at ``delta / (m k (k + 1))`` for a model's k-th pull (a union
    bound over models and pulls)."""
    sums, n, m = state.sums, config.n_examples, config.n_models
    if not estimator.has_interval:
        nan = jnp.full(m, jnp.nan, jnp.float32)
        return nan, nan
    if (interval or config.interval) == "cs":
        low, high = state.cs.low, state.cs.high
    else:
        mu = current_estimates(estimator, state, n, params)
        r = estimator.radius(state.estimator, sums, n, confidence.anytime_delta(params.delta, sums.n_pulls, m),
                             params.estimator)
        low, high = jnp.clip(mu - r, 0.0, 1.0), jnp.clip(mu + r, 0.0, 1.0)
    size = populations(sums, n)
    exact = sums.n_obs >= size
    mean = sums.obs_sum / size
    return jnp.where(exact, mean, low), jnp.where(exact, mean, high)


def record_certificate(config, estimator, state, params):
    """Note the first time the run certifies a model (the cells spent then and the model)."""
    if not estimator.has_interval:
        return state
    ok, h = confidence.certify(*interval_bounds(estimator, state, config, params))
    new = ok & (state.certified.spent < 0)
    return state._replace(certified=Certificate(jnp.where(new, state.spent, state.certified.spent),
                                                jnp.where(new, h, state.certified.model)))


def half_widths(config, estimator, state, params):
    """Every model's confidence-sequence half-width and the paper's fixed-count radius at delta."""
    low, high = interval_bounds(estimator, state, config, params, "cs")
    radius = estimator.radius(state.estimator, state.sums, config.n_examples, params.delta, params.estimator)
    exhausted = state.sums.n_obs >= populations(state.sums, config.n_examples)
    return (high - low) / 2, jnp.where(exhausted, 0.0, radius)


def bet_horizon(config, estimator, state, params, i, log_inv_alpha):
    """The draws model ``i``'s bets are tuned for at its next batch: ``params.cs_horizon``, or with
    ``config.gap_horizon > 0`` its horizon from its running gap (`confidence.gap_horizon`: the distance
    from its estimate to the best other estimate, all from the draws before the batch)."""
    if not config.gap_horizon:
        return params.cs_horizon
    mu = current_estimates(estimator, state, config.n_examples, params)
    gap = jnp.abs(mu[i] - jnp.max(jnp.where(jnp.arange(config.n_models) == i, -jnp.inf, mu)))
    sums = state.sums
    return confidence.gap_horizon(config.gap_horizon, gap, state.cs.dev_sum[i, 0], sums.n_obs[i].astype(jnp.float32),
                                  sums.population[i].astype(jnp.float32), confidence.cs_bet_level(log_inv_alpha),
                                  batch_size=config.batch_size)
