"""Adaptive example sampling (``pulse_adaptive``): the weighted draw, Des Raj's proxies and the
estimate are exact by enumeration; coverage is in ``test_confidence.py``."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pulse_jax as pj
from pulse_jax.stats import without_replacement as sampling
from pulse_jax.estimators import adaptive
from pulse_jax.errors import PulseInputError
from pulse_jax.estimators import ModelSums, Pull, draw_design


def test_weighted_draw_is_sequential_sampling_proportional_to_the_weights():
    """Ordered pairs from 40,000 keys against their exact probabilities w_j / W * w_k / (W - w_j); an
    example of weight 0 is never drawn. Each of the 12 cells within 4.5 standard errors (a false alarm
    in fewer than 1 in 10,000 runs of this test)."""
    w = jnp.asarray([1.0, 2.0, 3.0, 0.0, 4.0])
    R = 40_000
    pairs = np.asarray(jax.jit(jax.vmap(lambda k: sampling.weighted_draw(k, w, 2)))(
        jax.random.split(jax.random.PRNGKey(0), R)))
    assert not np.any(pairs == 3)
    W = float(w.sum())
    for j, k in itertools.permutations([0, 1, 2, 4], 2):
        exact = float(w[j]) / W * float(w[k]) / (W - float(w[j]))
        seen = np.mean((pairs[:, 0] == j) & (pairs[:, 1] == k))
        assert abs(seen - exact) <= 4.5 * np.sqrt(exact * (1 - exact) / R), (j, k, seen, exact)


def _population():
    rng = np.random.default_rng(3)
    n = 7
    scores = np.clip(rng.random(n) * 0.4 + (rng.random(n) < 0.5) * 0.6, 0, 1)      # soft scores
    unseen = np.array([True, True, False, True, True, True, True])                   # example 2 was seen
    preds = np.clip(1 - scores + 0.1 * rng.normal(size=n), 0.02, 0.98)               # sign-flipped predictions
    return scores, preds, unseen


@pytest.mark.parametrize("share", [0.5, 0.2, 1.0])
def test_desraj_proxies_are_unbiased_by_exact_enumeration(share):
    """Every ordered batch of 3 of the 6 unseen examples, with its probability: after any prefix, the
    next proxy's conditional mean is the mean of the scores still unseen, and every proxy lies in its
    predictable range; the pull's one-step estimate (the estimator's update) has mean mu exactly."""
    scores, preds, unseen = _population()
    f, s = jnp.asarray(preds, jnp.float32), jnp.asarray(scores, jnp.float32)
    weights = adaptive.residual_sd_weights(share)(f, jnp.asarray(unseen), ())
    w = np.asarray(jnp.where(jnp.asarray(unseen), weights, 0.0))
    idx = np.flatnonzero(unseen)
    B = 3
    est = pj.pulse_adaptive(share)
    obs = float(scores[~unseen].sum())
    ledger = ModelSums(jnp.asarray([1]), jnp.asarray([1]), jnp.asarray([obs]), jnp.asarray([obs ** 2]),
                    jnp.asarray([float(preds[unseen].sum())]), jnp.asarray([float((preds[unseen] ** 2).sum())]),
                    jnp.asarray([len(scores)]))
    theta_mean = 0.0
    for order in itertools.permutations(idx, B):
        prob, left = 1.0, w[idx].sum()
        for j in order:
            prob *= w[j] / left
            left -= w[j]
        ex = jnp.asarray(order, jnp.int32)
        valid = jnp.ones(B, bool)
        design = draw_design(f, jnp.asarray(unseen), jnp.asarray(w), ex, valid)
        y, low, width = (np.asarray(a, np.float64) for a in adaptive.desraj_proxies(s[ex], f[ex], design, valid))
        assert np.all(y >= low - 1e-5) and np.all(y <= low + width + 1e-5)
        pull = Pull(jnp.int32(0), jnp.int32(B), s[ex].sum(), f[ex].sum(), s[ex], f[ex], valid, design)
        state, _ = est.update(est.init(ledger, est.params), ledger, pull, len(scores), est.params)
        theta_mean += prob * (float(state.theta_sum[0]) - obs)     # the initial theta is obs (1 cell)
    assert theta_mean == pytest.approx(scores.mean(), abs=2e-5)
    # Conditional means after each prefix: sum over the next draw of q * Y, against the unseen mean.
    for prefix in [p for k in range(B) for p in itertools.permutations(idx, k)]:
        rest = [j for j in idx if j not in prefix]
        left = w[rest].sum()
        mean_y = 0.0
        for j in rest:
            order = tuple(prefix) + (j,) + tuple(r for r in rest if r != j)[:B - len(prefix) - 1]
            ex = jnp.asarray(order, jnp.int32)
            design = draw_design(f, jnp.asarray(unseen), jnp.asarray(w), ex, jnp.ones(B, bool))
            y = np.asarray(adaptive.desraj_proxies(s[ex], f[ex], design, jnp.ones(B, bool))[0], np.float64)
            mean_y += w[j] / left * y[len(prefix)]
        assert mean_y == pytest.approx(scores[rest].mean(), abs=2e-5), prefix


def test_uniform_share_one_is_pulse_proxy_with_lambda_one():
    """With uniform weights Des Raj's proxy is PULSE's AIPW proxy at lambda = 1."""
    from pulse_jax.estimators import aipw_proxies
    scores, preds, unseen = _population()
    f, s = jnp.asarray(preds, jnp.float32), jnp.asarray(scores, jnp.float32)
    w = jnp.where(jnp.asarray(unseen), 1.0, 0.0)
    ex, valid = jnp.asarray([4, 0, 6], jnp.int32), jnp.ones(3, bool)
    y, low, width = adaptive.desraj_proxies(s[ex], f[ex], draw_design(f, jnp.asarray(unseen), w, ex, valid), valid)
    y2, low2, width2 = aipw_proxies(s[ex], f[ex], f[jnp.asarray(unseen)].sum(), jnp.float32(unseen.sum()), 1.0)
    np.testing.assert_allclose(y, y2, atol=1e-6)
    # the range from the largest f and 1 - f over the unseen examples lies inside PULSE's [fbar - 1, fbar + 1]
    assert np.all(np.asarray(low) >= np.asarray(low2) - 1e-6)
    assert np.all(np.asarray(low + width) <= np.asarray(low2 + width2) + 1e-6)


def test_a_uniform_share_outside_0_1_is_refused():
    for share in (0.0, -0.5, 1.5):
        with pytest.raises(PulseInputError, match=r"uniform_share must lie in \(0, 1\]"):
            pj.pulse_adaptive(share)
