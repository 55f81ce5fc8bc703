"""Monte Carlo checks of the statistics: unbiasedness, coverage, identification.

Tolerances: each check compares a mean over R independent repetitions with
its standard error; |mean| <= 4.5 SE has a false-alarm rate of about 7e-6 per
check under the null, and the power checks below show that the same R
detects a real bias (Naive-Pooling's) at many SEs.
"""
import numpy as np
import pytest
from conftest import tiny_problem

from pulse_jax import synthetic
from pulse_jax.stats import factorization
from pulse_jax.analysis import metrics
from pulse_jax.engine import BanditConfig
from pulse_jax.engine.params import BanditParams
from pulse_jax.simulation import simulate

REPS = 3000


@pytest.fixture(scope="module")
def biased_setup():
    """Predictions made badly wrong on purpose: embeddings with the sign flipped."""
    scores, _, V = tiny_problem(seed=5, m=5, n=200, rank=3)
    config = BanditConfig(n_models=5, n_examples=200, budget=5 * 6 + 150, batch_size=6, refit_every=3)
    return scores, -3.0 * V, config


LOOSE = BanditParams(delta=0.2)


def _z(values):
    return values.mean(axis=0) / (values.std(axis=0, ddof=1) / np.sqrt(len(values)))


@pytest.mark.optimized   # 3,000 repetitions: the optimized program's run saves more than its compile costs
def test_pulse_martingale_sum_has_mean_zero_under_adaptive_sampling(biased_setup):
    """sum_k (theta_k - mu) = K (mu_hat - mu) is a martingale stopped at a bounded time:
    mean zero exactly, for any predictions (Lemma 1 + optional stopping)."""
    scores, V_bad, config = biased_setup
    res = simulate(scores, config, "pulse", V=V_bad, reps=REPS, seed=0, params=LOOSE)
    assert (res.n_obs < config.n_examples).all()       # no exhausted model: the identity holds
    assert np.nanmean(np.abs(res.lam)) < 0.9            # the rule did react to bad predictions
    centred = res.n_pulls * (res.estimates - res.true_means)
    assert np.all(np.abs(_z(centred)) < 4.5), _z(centred)


@pytest.mark.optimized   # two 3,000-repetition studies
def test_pulse_final_estimates_unbiased_and_naive_bias_detected(biased_setup):
    """With a huge exploration bonus the pull counts are (nearly) fixed, so the final
    estimate itself is unbiased for PULSE; Naive-Pooling with the same wrong
    predictions is biased by many standard errors (this is the test's power)."""
    scores, V_bad, config = biased_setup
    fixed_counts = {"delta": 0.2, "rule.exploration": 1e6}
    pulse = simulate(scores, config, "pulse", V=V_bad, reps=REPS, seed=1, params=fixed_counts)
    naive = simulate(scores, config, "naive", V=V_bad, reps=REPS, seed=1, params=fixed_counts)
    assert np.all(np.abs(_z(pulse.estimates - pulse.true_means)) < 4.5)
    assert np.max(np.abs(_z(naive.estimates - naive.true_means))) > 10


@pytest.mark.parametrize("method", ["ucbe", "pulse"])
def test_intervals_cover_at_least_at_the_nominal_rate(biased_setup, method):
    scores, V_bad, config = biased_setup    # delta = 0.2: nominal coverage 80%
    res = simulate(scores, config, method, V=V_bad, reps=1000, seed=2, params=LOOSE)
    coverage = res.coverage()
    # 3 binomial SEs below the nominal rate: a real under-coverage of 5 points fails.
    assert np.all(coverage >= 0.8 - 3 * np.sqrt(0.8 * 0.2 / 1000)), coverage


@pytest.mark.integration   # two 200-repetition runs on the built-in benchmark (~60 s cold): the second test command
def test_pulse_needs_fewer_cells_than_ucbe_on_the_builtin_benchmark():
    """Paired (common random numbers) comparison on the demo's default problem."""
    bench = synthetic.make_benchmark(seed=0)
    m, n = bench.scores.shape
    V = factorization.fit_example_embeddings(bench.train, rank=8)
    config = BanditConfig(n_models=m, n_examples=n, budget=m * 16 + 6400, batch_size=16, refit_every=25)
    ucbe = simulate(bench.scores, config, "ucbe", reps=200, seed=0)
    pulse = simulate(bench.scores, config, "pulse", V=V, reps=200, seed=0)
    paired = metrics.paired_auc_difference(pulse, ucbe)
    assert paired["z"] > 3, paired          # accuracy over the budget range: higher, significantly
    to90 = {k: metrics.budget_to_target(r, 0.9, n_boot=200) for k, r in (("ucbe", ucbe), ("pulse", pulse))}
    assert to90["pulse"]["budget"] < to90["ucbe"]["budget"], to90
