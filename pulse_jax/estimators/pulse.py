"""PULSE: the running mean of doubly robust (AIPW) one-step estimates, with its lambda rules,
proxies and the certification variants `pulse_certify` and `pulse_hedged`."""
from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import chex
import jax.numpy as jnp

from pulse_jax.stats import confidence
from pulse_jax.errors import require
from pulse_jax.estimators.base import Estimator, ModelSums, observed_mean, populations, raw_proxies
from pulse_jax.registry import PulseParams   # PULSE's number, declared where a command is checked


class PulseInfo(NamedTuple):
    """What PULSE reports about one pull."""

    lam: chex.Array   # the lambda the pull used (NaN for a step without a pull)


class PulseState(NamedTuple):
    theta_sum: chex.Array   # weighted sum of the model's one-step estimates theta (K_i of them)
    z_sum: chex.Array       # sum of past residual corrections Z (bandit pulls only)
    n_z: chex.Array         # number of Zs in z_sum
    weight_sum: chex.Array | None   # sum of the thetas' weights; None with equal weights (it is K_i)


def inverse_variance_weight(pred_sum, pred_sq_sum, n_unobserved, batch_size, lam, population):
    """A one-step estimate's weight ``1 / v``, ``v`` its model-based variance given the past:

        v  = (U / N)^2 s2 / B' (U - B') / (U - 1),
        s2 = [(F - Phi) + (1 - lam)^2 (Phi - F^2 / U)] / U,

    the variance of ``S - lam f`` over the ``U`` unobserved examples if each score were a
    Bernoulli draw with probability ``f`` (``F``, ``Phi``: sums of ``f`` and ``f^2`` over them),
    times the batch mean's factor for drawing ``B'`` of ``U`` without replacement. Everything is
    known before the draw, so the weighted sum ``sum_k w_k (theta_k - mu)`` stays a martingale.
    Capped at 1e6 (a batch that takes every unobserved example gives an exact theta).
    """
    u = jnp.maximum(n_unobserved, 1.0)
    s2 = ((pred_sum - pred_sq_sum) + (1.0 - lam) ** 2 * (pred_sq_sum - pred_sum ** 2 / u)) / u
    b = jnp.maximum(batch_size, 1.0)
    v = (u / population) ** 2 * jnp.maximum(s2, 1e-6) / b * jnp.maximum(u - b, 0.0) / jnp.maximum(u - 1.0, 1.0)
    return jnp.minimum(1.0 / jnp.maximum(v, 1e-6), 1e6)


LambdaRule = Callable[[chex.Array, chex.Array, chex.Array, chex.Array], chex.Array]


def paper_lambda(pred_sum, pred_sq_sum, mean_past_z, n_unobserved):
    """The paper's predictable plug-in (Step 3):

        lambda = clip(1 - F * Zbar / (|U_i| * Phi), 0, 1)

    with ``F = sum_{U_i} f``, ``Phi = sum_{U_i} f^2`` and ``Zbar`` the mean of
    the model's past residual corrections (0 before any). Where ``Phi = 0`` all
    predictions are 0 and lambda is irrelevant; we return 1.
    """
    denom = n_unobserved * pred_sq_sum
    ratio = jnp.where(denom > 0, pred_sum * mean_past_z / jnp.where(denom > 0, denom, 1.0), 0.0)
    return jnp.clip(1.0 - ratio, 0.0, 1.0)


@functools.cache
def constant_lambda(value: float) -> LambdaRule:
    """A fixed lambda (0 = ignore predictions, 1 = full prediction weight)."""

    def rule(pred_sum, pred_sq_sum, mean_past_z, n_unobserved):
        del pred_sq_sum, mean_past_z, n_unobserved
        return jnp.full_like(pred_sum, value)

    rule.__qualname__ = f"constant_lambda({value!r})"   # what logs record as PULSE's lambda_rule setting
    return rule


def pulse_theta(obs_sum, pred_sum_unobserved, n_unobserved, batch_score_sum, batch_pred_sum,
                batch_size, *, lam, n_examples):
    """One-step AIPW estimate and residual correction (paper eq. 2, batch form).

        Z     = (1/pi) sum_{j in b} (S_ij - lam f_ij),   pi = B' / |U_i|
        theta = (sum_{O_i} S + lam sum_{U_i} f + Z) / n

    ``E[theta | past] = mu_i`` for any predictions and any predictable ``lam``
    (Lemma 1). Returns ``(theta, Z)``.
    """
    inv_pi = n_unobserved / jnp.maximum(batch_size, 1)
    z = inv_pi * (batch_score_sum - lam * batch_pred_sum)
    theta = (obs_sum + lam * pred_sum_unobserved + z) / n_examples
    return theta, z


def aipw_proxies(scores, preds, pred_sum_unobserved, n_unobserved, lam):
    """Per-draw AIPW proxies, lambda and predictions frozen when the batch is asked:

        Y_s = S_s - lambda f_s + lambda fbar_s,
        fbar_s = (F - sum of f over the batch's earlier draws) / (N - s + 1),

    ``fbar_s`` the mean prediction over the examples still unseen before
    draw s (``F`` = the sums' prediction sum over the unobserved ones).
    Draw s is uniform over those examples given the past, so
    ``E[S_s | past]`` is the mean of the unseen scores and
    ``E[f_s | past] = fbar_s``: ``E[Y_s | past] = m_s(mu)`` for *any*
    predictions in [0, 1] and any predictable lambda in [0, 1]. Since
    ``S_s - lambda f_s`` lies in ``[-lambda, 1]``, ``Y_s`` lies in
    ``[lambda (fbar_s - 1), lambda (fbar_s - 1) + 1 + lambda]``, a range
    known before the draw. A refit between batches changes f, F and
    lambda for later batches only, so every term stays predictable.
    Returns ``(Y, lower, width)``, each ``(B,)``.

    PULSE with ``raw_sequence`` runs them beside a sequence on the raw scores:
    both are valid on the same draws and the engine intersects them (the raw
    one is tighter while lambda's doubled range costs more than the
    predictions save, the proxies after).
    """
    unseen = jnp.maximum(n_unobserved - jnp.arange(preds.shape[0], dtype=jnp.float32), 1.0)
    fbar = (pred_sum_unobserved - (jnp.cumsum(preds) - preds)) / unseen
    y = scores - lam * preds + lam * fbar
    return y, lam * (fbar - 1.0), jnp.full_like(y, 1.0 + lam)


def _first_weight(sums: ModelSums) -> chex.Array:
    """The initial theta's weight: a batch of ``n0`` draws of a score with variance 1/4 (the most a
    score in [0, 1] can have), with the without-replacement factor when ``N_i`` is known."""
    n0 = jnp.maximum(sums.n_obs.astype(jnp.float32), 1.0)
    fpc = 1.0 if sums.population is None else \
        jnp.maximum(sums.population - n0, 0.0) / jnp.maximum(sums.population - 1.0, 1.0)
    return jnp.minimum(1.0 / jnp.maximum(0.25 / n0 * fpc, 1e-6), 1e6)


def _lambda_of(lambda_rule: LambdaRule):
    """``lam_for(state, sums, i, n_unobserved, params)``: the rule's lambda, or ``params.fixed_lambda``
    where that is not NaN (a traced switch)."""

    def lam_for(state, sums, i, n_unobserved, params):
        mean_past_z = jnp.where(state.n_z[i] > 0, state.z_sum[i] / jnp.maximum(state.n_z[i], 1), 0.0)
        lam = lambda_rule(sums.pred_sum[i], sums.pred_sq_sum[i], mean_past_z, n_unobserved)
        fixed = jnp.asarray(params.fixed_lambda, jnp.float32)
        return jnp.where(jnp.isnan(fixed), lam, fixed)

    return lam_for


def _running_theta(lambda_rule: LambdaRule, weighted: bool):
    """PULSE's ``(init, update, estimate)``: the running (equal or inverse-variance weighted) mean of theta."""
    lam_for = _lambda_of(lambda_rule)

    def init(sums, params):
        del params
        m = sums.n_obs.shape[0]
        zeros = jnp.zeros(m, jnp.float32)
        first = _first_weight(sums) if weighted else None   # theta_sum is a weighted sum only when weighted
        return PulseState(observed_mean(sums) * (first if weighted else 1.0), zeros, jnp.zeros(m, jnp.int32), first)

    def update(state, sums, pull, n_examples, params):
        i = pull.model
        size_i = populations(sums, n_examples)[i]
        n_unobserved = size_i - sums.n_obs[i].astype(jnp.float32)
        lam = lam_for(state, sums, i, n_unobserved, params)
        size = pull.size.astype(jnp.float32)
        theta, z = pulse_theta(sums.obs_sum[i], sums.pred_sum[i], n_unobserved, pull.score_sum,
                               pull.pred_sum, size, lam=lam, n_examples=size_i)
        w = inverse_variance_weight(sums.pred_sum[i], sums.pred_sq_sum[i], n_unobserved, size, lam,
                                    size_i) if weighted else 1.0
        live = pull.size > 0
        return PulseState(
            theta_sum=state.theta_sum.at[i].add(jnp.where(live, w * theta, 0.0)),
            z_sum=state.z_sum.at[i].add(jnp.where(live, z, 0.0)),
            n_z=state.n_z.at[i].add(live.astype(jnp.int32)),
            weight_sum=state.weight_sum.at[i].add(jnp.where(live, w, 0.0)) if weighted else None,
        ), PulseInfo(jnp.where(live, lam, jnp.nan))

    def estimate(state, sums, params):
        del params
        if weighted:
            return state.theta_sum / jnp.maximum(state.weight_sum, 1e-12)
        return state.theta_sum / jnp.maximum(sums.n_pulls, 1)

    return init, update, estimate


def _intervals(lambda_rule: LambdaRule, variance_bound, raw_sequence: bool):
    """PULSE's ``(radius, proxies)``: Theorem 1's fixed-count radius and the confidence sequences' draws."""
    lam_for = _lambda_of(lambda_rule)

    def radius(state, sums, n_examples, delta, params):
        del state, params
        return confidence.freedman_radius(sums.n_pulls, populations(sums, n_examples), delta, variance_bound)

    def proxies(state, sums, pull, n_examples, params):
        """`aipw_proxies` of the pull (with the raw scores as a first row when ``raw_sequence``)."""
        i = pull.model
        n_unobserved = populations(sums, n_examples)[i] - sums.n_obs[i].astype(jnp.float32)
        lam = lam_for(state, sums, i, n_unobserved, params)
        rows = aipw_proxies(pull.scores, pull.preds, sums.pred_sum[i], n_unobserved, lam)
        if not raw_sequence:
            return tuple(r[None] for r in rows)
        return tuple(jnp.stack([r[0], p]) for r, p in zip(raw_proxies(pull), rows))

    return radius, proxies


@functools.cache
def pulse(lambda_rule: LambdaRule = paper_lambda, variance_bound: float | None = None,
          raw_sequence: bool = True, weighting: str = "equal") -> Estimator:
    """PULSE: the running mean of doubly robust one-step estimates ``theta``.

    The initial sample mean is the first ``theta`` (it is ``theta`` with
    ``lambda = 0`` and no observed cells); its ``Z`` does not enter ``Zbar``,
    which averages the residuals of bandit pulls only ("0 before any").
    Interval: Freedman radius of Theorem 1 with ``variance_bound`` (default
    ``n^2``, always valid).

    ``raw_sequence``: the anytime-valid interval intersects a confidence sequence on the raw
    scores with one on the AIPW proxies (True), or runs the proxy sequence alone (False: one
    sequence at twice the level; the initial batch enters it as raw scores, the proxy at lambda 0).
    ``weighting``: ``"equal"`` (the paper's running mean) or ``"inverse_variance"``:
    ``sum_k w_k theta_k / sum_k w_k`` with the predictable weights of
    `inverse_variance_weight` (the initial theta's: `_first_weight`).
    """
    require(weighting in ("equal", "inverse_variance"),
            f"pulse: weighting must be 'equal' or 'inverse_variance', got {weighting!r}")
    weighted = weighting == "inverse_variance"
    init, update, estimate = _running_theta(lambda_rule, weighted)
    radius, proxies = _intervals(lambda_rule, variance_bound, raw_sequence)

    # raw_sequence is recorded only when it is not the default, so logs written without it still resume.
    settings = (("lambda_rule", getattr(lambda_rule, "__qualname__", repr(lambda_rule))),
                ("variance_bound", None if variance_bound is None else float(variance_bound)),
                *((("raw_sequence", False),) if not raw_sequence else ()),
                *((("weighting", weighting),) if weighted else ()))
    return Estimator(name="pulse", uses_predictions=True, init=init, update=update, estimate=estimate, radius=radius,
                     proxies=proxies, n_sequences=2 if raw_sequence else 1, settings=settings, params=PulseParams())


@functools.cache
def pulse_certify() -> Estimator:
    """PULSE tuned for certification: lambda fixed at 1/2 and the proxy sequence alone.

    The same doubly robust estimator (unbiased for any fixed lambda) with one
    anytime-valid sequence on the AIPW proxies instead of two intersected ones.
    lambda = 1/2 keeps the proxies' range at 1.5 and takes half of what the
    predictions explain; it needs the fewest cells to certify, or within a few
    percent of the fewest, on every data set measured (the built-in benchmark,
    CRUXEval-O, ChemBench: ``docs/confidence.md``), where the paper's lambda
    (near 1) loses to UCB-E on CRUXEval-O. ``pulse-jax select`` uses it by default.
    """
    return pulse(constant_lambda(0.5), None, raw_sequence=False)._replace(name="pulse_certify")


@functools.cache
def pulse_hedged() -> Estimator:
    """PULSE for certification with betting sequences: lambda fixed at 1/2, raw and proxy sequences.

    Under betting confidence sequences (``BanditConfig.cs_grid > 0``) a model's two capitals are
    summed (`pulse_jax.stats.confidence.mixed_capital`), which rejects whatever either sequence
    alone would: the raw bets carry a model through its first batches, where the proxies' range
    of 1.5 costs more than the predictions save (CRUXEval-O), the proxies' after. It is the
    estimator of ``pulse-jax select``'s default (with ``--sequence betting``). Under the
    empirical-Bernstein sequences the two are intersected at half the level each, and
    `pulse_certify` is the better choice.
    """
    return pulse(constant_lambda(0.5), None, raw_sequence=True)._replace(name="pulse_hedged")
