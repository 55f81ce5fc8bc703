"""PULSE with adaptive example sampling: a model's examples drawn where its predictions are unsure.

Within a pull, draw ``s`` takes example ``J_s`` from the model's still-unseen examples ``R_s``
with probability ``q_s(j) = w_j / sum_{R_s} w``, the weights fixed from the model's current
predictions before the pull (`residual_sd_weights`):

    w_j = eps * mean_{R_0}(sd) + (1 - eps) * sd_j,   sd_j = sqrt(f_j (1 - f_j)),

so ``q_s(j) >= eps / |R_s|`` (``eps``, the uniform share, keeps every probability bounded away
from 0). The proxy of draw ``s`` is Des Raj's (1956) ordered estimator of the unseen mean,

    Y_s = (1/|R_s|) sum_{j in R_s} f_j + (S_{J_s} - f_{J_s}) / (|R_s| q_s(J_s)),

and ``E[Y_s | past] = mean_{R_s} S`` for *any* predictions (`desraj_proxies`): the property
the confidence sequences of `pulse_jax.stats.confidence` rest on, with the range
``mean_{R_s} f + [-max f_j / (|R_s| q_s(j)), max (1 - f_j) / (|R_s| q_s(j))]`` known before the
draw. The sequence on the raw scores is *not* valid under these draws (their conditional mean is
not the unseen mean), so the model has the proxy sequence alone. The estimate is the running mean
of one-step estimates ``theta = (sum_{O} S + |R_s| Y_s) / N``, averaged over a pull's draws, each
unbiased given the past. The derivation is in ``docs/confidence.md``.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import chex
import jax.numpy as jnp

from pulse_jax.errors import require
from pulse_jax.estimators.base import Estimator, ModelSums, Pull, observed_mean, populations


def residual_sd_weights(uniform_share: float):
    """``(preds, unseen, params) -> w``: the predicted residual standard deviation mixed with uniform, so each
    unseen example's draw probability is at least ``uniform_share`` times the uniform one."""

    def weights(preds, unseen, params):
        del params
        sd = jnp.sqrt(jnp.clip(preds * (1.0 - preds), 1e-12, None))
        mean_sd = jnp.sum(jnp.where(unseen, sd, 0.0)) / jnp.maximum(jnp.sum(unseen), 1)
        return uniform_share * mean_sd + (1.0 - uniform_share) * sd

    return weights


def desraj_proxies(scores, preds, design, valid):
    """Per-draw proxies ``(Y, lower, width)`` (each ``(B,)``) of a weighted pull (module docstring).

    Before draw ``s`` the unseen examples are those before the pull less the pull's earlier draws:
    their count, prediction sum and weight sum follow from the `DrawDesign`. The range uses
    the largest ``f_j / w_j`` and ``(1 - f_j) / w_j`` over the examples unseen *before the pull*, a
    superset of ``R_s``, so it only widens.
    """
    earlier = lambda x: jnp.cumsum(x) - x   # noqa: E731  (sum over the pull's earlier draws)
    count = jnp.maximum(design.unseen - jnp.arange(scores.shape[0], dtype=jnp.float32), 1.0)
    weight_left = jnp.maximum(design.weight_total - earlier(design.weights), 1e-30)
    fbar = (design.pred_total - earlier(jnp.where(valid, preds, 0.0))) / count
    scale = weight_left / count                                   # 1 / (|R_s| q_s(j)) = scale / w_j
    safe_w = jnp.where(valid, design.weights, 1.0)
    y = fbar + jnp.where(valid, (scores - preds) * scale / safe_w, 0.0)
    lower = fbar - scale * design.max_low
    return y, lower, scale * (design.max_low + design.max_high)


class AdaptiveState(NamedTuple):
    theta_sum: chex.Array   # sum of the model's one-step estimates (the initial sample mean is the first)
    n_theta: chex.Array     # how many


@functools.cache
def pulse_adaptive(uniform_share: float = 0.5) -> Estimator:
    """PULSE's predictions with adaptive example sampling and Des Raj's estimator (module docstring).

    ``uniform_share`` in (0, 1]: the uniform part of the draw probabilities (1: uniform draws, where
    ``Y_s`` is PULSE's proxy with lambda = 1). The interval is the proxy confidence sequence alone;
    the paper's fixed-count radius does not apply (NaN).
    """
    require(0.0 < float(uniform_share) <= 1.0, f"pulse_adaptive: uniform_share must lie in (0, 1], "
                                               f"got {uniform_share!r}")

    def init(sums: ModelSums, params):
        del params
        m = sums.n_obs.shape[0]
        return AdaptiveState(observed_mean(sums), jnp.ones(m, jnp.float32))

    def theta(sums, pull, n_examples):
        """The pull's one-step estimates of the model's mean, averaged over its draws."""
        i = pull.model
        y, _, _ = desraj_proxies(pull.scores, pull.preds, pull.design, pull.valid)
        count = jnp.maximum(pull.design.unseen - jnp.arange(y.shape[0], dtype=jnp.float32), 1.0)
        seen = sums.obs_sum[i] + jnp.cumsum(pull.scores) - pull.scores
        thetas = (seen + count * y) / populations(sums, n_examples)[i]
        return jnp.sum(jnp.where(pull.valid, thetas, 0.0)) / jnp.maximum(pull.size, 1)

    def update(state, sums, pull: Pull, n_examples, params):
        del params
        live = (pull.size > 0).astype(jnp.float32)
        i = pull.model
        return AdaptiveState(state.theta_sum.at[i].add(live * theta(sums, pull, n_examples)),
                             state.n_theta.at[i].add(live)), ()

    def estimate(state, sums, params):
        del sums, params
        return state.theta_sum / state.n_theta

    def proxies(state, sums, pull, n_examples, params):
        del state, sums, n_examples, params
        return tuple(r[None] for r in desraj_proxies(pull.scores, pull.preds, pull.design, pull.valid))

    # No fixed-count radius (the default NaN) and nothing to refresh after a refit (the default).
    return Estimator(name="pulse_adaptive", uses_predictions=True, init=init, update=update, estimate=estimate,
                     proxies=proxies, settings=(("uniform_share", float(uniform_share)),),
                     draw_weights=residual_sd_weights(float(uniform_share)))
