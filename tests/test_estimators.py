"""Lemma 1 by exact enumeration, and the confidence radii against their formulas."""
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pulse_jax import estimators, registry
from pulse_jax.stats import confidence
from pulse_jax.estimators import ModelSums, Pull


def _enumerate_thetas(scores, observed, preds, batch_size, lam):
    """theta for every possible batch drawn from the unobserved examples."""
    n = len(scores)
    unobserved = [j for j in range(n) if j not in observed]
    obs_sum = sum(scores[j] for j in observed)
    pred_unobs = sum(preds[j] for j in unobserved)
    thetas = []
    for batch in itertools.combinations(unobserved, batch_size):
        theta, _ = estimators.pulse_theta(obs_sum, pred_unobs, len(unobserved), sum(scores[j] for j in batch),
                                          sum(preds[j] for j in batch), batch_size, lam=lam,
                                          n_examples=n)
        thetas.append(float(theta))
    return np.array(thetas)


@pytest.mark.parametrize("lam", [0.0, 0.37, 1.0])
@pytest.mark.parametrize("batch_size", [1, 2, 3])
def test_lemma1_exact_enumeration(lam, batch_size):
    # Binary and soft scores; predictions deliberately wrong (anti-correlated, miscalibrated).
    rng = np.random.default_rng(batch_size)
    for scores in (np.array([1, 0, 1, 1, 0, 0, 1, 0]), rng.random(8)):
        preds = 0.9 - 0.8 * scores + 0.05 * rng.random(8)
        for observed in ((), (0, 3), (1, 2, 5)):
            thetas = _enumerate_thetas(scores, observed, preds, batch_size, lam)
            # Every batch is equally likely, so the plain average is E[theta | past].
            # float32 arithmetic: |theta| <= 8, so 1e-5 is ~100 ulps.
            assert abs(thetas.mean() - scores.mean()) < 1e-5


def test_lemma1_through_the_estimator_update_with_the_paper_lambda():
    """Enumerate every batch through ``pulse().update`` itself, with a Z history, so the
    lambda the rule computes from the past is the one used."""
    n, batch_size = 7, 2
    scores = np.array([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    preds = np.array([0.1, 0.8, 0.9, 0.3, 0.2, 0.7, 0.6])   # wrong on purpose
    observed = [0, 4]
    est = estimators.pulse()
    unobs = [j for j in range(n) if j not in observed]
    ledger = ModelSums(
        n_obs=jnp.array([len(observed), 2]), n_pulls=jnp.array([3, 1]),
        obs_sum=jnp.array([scores[observed].sum(), 1.0]), obs_sq_sum=jnp.array([scores[observed].sum(), 1.0]),
        pred_sum=jnp.array([preds[unobs].sum(), 0.0]), pred_sq_sum=jnp.array([(preds[unobs] ** 2).sum(), 0.0]))
    state = est.init(ledger, est.params)._replace(theta_sum=jnp.array([1.1, 0.5]), z_sum=jnp.array([2.3, 0.0]),
                                      n_z=jnp.array([2, 0]))
    increments, lams = [], set()
    for batch in itertools.combinations(unobs, batch_size):
        pull = Pull(jnp.int32(0), jnp.int32(batch_size), jnp.float32(scores[list(batch)].sum()),
                    jnp.float32(preds[list(batch)].sum()))
        new, info = est.update(state, ledger, pull, n, est.params)
        increments.append(float(new.theta_sum[0] - state.theta_sum[0]))
        lams.add(round(float(info.lam), 6))
    assert len(lams) == 1 and 0 < lams.pop() < 1   # predictable: same lambda whatever the batch
    assert abs(np.mean(increments) - scores.mean()) < 1e-5


def test_paper_lambda_rule_values():
    lam = estimators.paper_lambda(jnp.float32(10.0), jnp.float32(5.0), jnp.float32(2.0), jnp.float32(20.0))
    assert float(lam) == pytest.approx(1 - 10 * 2 / (20 * 5))
    assert float(estimators.paper_lambda(jnp.float32(10.0), jnp.float32(5.0), jnp.float32(100.0), jnp.float32(20.0))) == 0
    assert float(estimators.paper_lambda(jnp.float32(10.0), jnp.float32(5.0), jnp.float32(-5.0), jnp.float32(20.0))) == 1
    assert float(estimators.paper_lambda(jnp.float32(0.0), jnp.float32(0.0), jnp.float32(1.0), jnp.float32(20.0))) == 1


def test_freedman_radius_solves_the_bound():
    n, delta = 500, 0.05
    for k in (1, 5, 40):
        for v in (None, n * n / 64):
            eps = float(confidence.freedman_radius(k, n, delta, v))
            vv = n * n if v is None else v
            bound = 2 * math.exp(-eps**2 / (2 * (vv / (k * n * n) + 2 * eps / (3 * k))))
            assert bound == pytest.approx(delta, rel=1e-4)


def test_bernstein_serfling_radius_formula():
    k, big_n, var, delta = 50, 400, 0.2, 0.1
    rho = 1 - (k - 1) / big_n
    log_term = math.log(5 / (delta / 2))
    expected = math.sqrt(var) * math.sqrt(2 * rho * log_term / k) + (7 / 3 + 3 / math.sqrt(2)) * log_term / k
    assert float(confidence.bernstein_serfling_radius(k, big_n, var, delta)) == pytest.approx(expected, rel=1e-5)
    k = 300  # beyond N/2 the finite-population factor changes
    rho = (1 - k / big_n) * (1 + 1 / k)
    expected = math.sqrt(var) * math.sqrt(2 * rho * log_term / k) + (7 / 3 + 3 / math.sqrt(2)) * log_term / k
    assert float(confidence.bernstein_serfling_radius(k, big_n, var, delta)) == pytest.approx(expected, rel=1e-5)
    assert float(confidence.bernstein_serfling_radius(big_n, big_n, var, delta)) == 0.0


@pytest.mark.parametrize("name", list(registry.ESTIMATORS))
def test_update_with_an_empty_pull_changes_nothing(name):
    """The engine relies on it: a step that spends nothing passes ``size = 0`` (and arbitrary sums)."""
    est = registry.ESTIMATORS[name]()
    ledger = ModelSums(jnp.array([3, 5, 2, 7]), jnp.array([1, 2, 1, 3]), jnp.array([1.0, 3.0, 1.0, 4.0]),
                    jnp.array([1.0, 3.0, 1.0, 4.0]), jnp.array([2.0, 1.0, 3.0, 0.5]),
                    jnp.array([1.0, 0.5, 2.0, 0.2]))
    params = est.params

    def pull(model, size, scores, preds):
        """A pull with its per-draw arrays (and, for an estimator that weights its draws, their design)."""
        s, f, valid = jnp.asarray(scores), jnp.asarray(preds), jnp.arange(2) < size
        design = None
        if est.draw_weights is not None:
            all_f, unseen = jnp.asarray([0.3, 0.6, 0.5, 0.9, 0.2]), jnp.ones(5, bool)
            weights = est.draw_weights(all_f, unseen, est.params)
            design = estimators.draw_design(all_f, unseen, weights, jnp.asarray([1, 3]), valid)
        return Pull(jnp.int32(model), jnp.int32(size), jnp.sum(s), jnp.sum(f), s, f, valid, design)

    state, _ = est.update(est.init(ledger, est.params), ledger, pull(1, 2, [1.0, 0.0], [0.6, 0.9]), 10, params)
    after, info = est.update(state, ledger, pull(2, 0, [1.0, 1.0], [0.5, 0.5]), 10, params)
    if isinstance(info, estimators.PulseInfo):   # PULSE and its variants report their lambda
        assert np.isnan(float(info.lam))   # an empty pull used no lambda
    else:
        assert info == ()                  # the others report nothing per step
    before_leaves, after_leaves = jax.tree_util.tree_leaves(state), jax.tree_util.tree_leaves(after)
    assert len(before_leaves) == len(after_leaves)
    for a, b in zip(before_leaves, after_leaves):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_inverse_variance_weights_are_predictable_and_keep_lemma1():
    """Enumerate every batch through ``pulse(weighting="inverse_variance").update``: the weight is the same
    whatever the batch (it is fixed before the draw), and the weighted increments average to
    ``w * mu``, so ``sum_k w_k (theta_k - mu)`` is a martingale."""
    n, batch_size = 7, 2
    scores = np.array([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    preds = np.array([0.1, 0.8, 0.9, 0.3, 0.2, 0.7, 0.6])   # wrong on purpose
    observed = [0, 4]
    est = estimators.pulse(weighting="inverse_variance")
    unobs = [j for j in range(n) if j not in observed]
    ledger = ModelSums(
        n_obs=jnp.array([len(observed), 2]), n_pulls=jnp.array([3, 1]),
        obs_sum=jnp.array([scores[observed].sum(), 1.0]), obs_sq_sum=jnp.array([scores[observed].sum(), 1.0]),
        pred_sum=jnp.array([preds[unobs].sum(), 0.0]), pred_sq_sum=jnp.array([(preds[unobs] ** 2).sum(), 0.0]),
        population=jnp.array([n, n]))
    state = est.init(ledger, est.params)._replace(z_sum=jnp.array([2.3, 0.0]), n_z=jnp.array([2, 0]))
    increments, weights = [], set()
    for batch in itertools.combinations(unobs, batch_size):
        pull = Pull(jnp.int32(0), jnp.int32(batch_size), jnp.float32(scores[list(batch)].sum()),
                    jnp.float32(preds[list(batch)].sum()))
        new, _ = est.update(state, ledger, pull, n, est.params)
        weights.add(round(float(new.weight_sum[0] - state.weight_sum[0]), 3))
        increments.append(float(new.theta_sum[0] - state.theta_sum[0]))
    assert len(weights) == 1
    w = weights.pop()
    assert w > 0 and abs(np.mean(increments) - w * scores.mean()) < 1e-4 * w
    # the initial theta's weight does not look at its own batch: only at how many cells it has
    a, b = (est.init(ledger._replace(obs_sum=jnp.array([s, 1.0])), est.params).weight_sum[0] for s in (0.0, 2.0))
    assert float(a) == float(b)
    with pytest.raises(Exception, match="weighting"):
        estimators.pulse(weighting="median")
