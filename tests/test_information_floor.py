"""The information floor (`pulse_jax.stats.information_floor`) against brute-force optimisation.

Garivier & Kaufmann's characteristic time is a max-min over the simplex; here it is also found by
evaluating the max-min on a fine grid of the simplex (two and three models), an independent route
to the same number. The grid's step bounds the agreement: a step h in the weights moves the
objective by O(h) around its maximum, so the grid's T* is within a few h (relative) of the exact one.
"""
import numpy as np
import pytest

from pulse_jax.errors import PulseInputError
from pulse_jax.stats.information_floor import (bernoulli_kl, characteristic_time, finite_population_cells,
                                               information_floor)


def _objective(mu, w):
    """``min_{a != best} [w_1 kl(mu_1, x_a) + w_a kl(mu_a, x_a)]`` for weight rows ``w`` (k, m), best first."""
    terms = []
    for a in range(1, len(mu)):
        x = (w[:, 0] * mu[0] + w[:, a] * mu[a]) / np.maximum(w[:, 0] + w[:, a], 1e-300)
        terms.append(w[:, 0] * bernoulli_kl(mu[0], x) + w[:, a] * bernoulli_kl(mu[a], x))
    return np.min(terms, axis=0)


@pytest.mark.parametrize("mu", [(0.7, 0.5), (0.55, 0.5), (0.95, 0.2), (1.0, 0.8), (0.3, 0.0)])
def test_two_models_match_a_fine_grid(mu):
    mu = np.asarray(mu)
    w = np.linspace(1e-6, 1 - 1e-6, 200_001)
    grid = _objective(mu, np.stack([w, 1 - w], axis=1))
    t_star, weights = characteristic_time(mu)
    assert 1 / t_star == pytest.approx(grid.max(), rel=1e-6)
    assert weights[0] == pytest.approx(w[np.argmax(grid)], abs=1e-4)


@pytest.mark.parametrize("mu", [(0.8, 0.7, 0.4), (0.6, 0.55, 0.54), (0.9, 0.3, 0.1)])
def test_three_models_match_a_fine_grid_of_the_simplex(mu):
    mu = np.asarray(mu)
    h = 1 / 1500
    a, b = np.meshgrid(np.arange(h, 1, h), np.arange(h, 1, h), indexing="ij")
    inside = a + b < 1
    w = np.stack([a[inside], b[inside], 1 - a[inside] - b[inside]], axis=1)
    grid = _objective(mu, w)
    t_star, weights = characteristic_time(mu)
    assert 1 / t_star == pytest.approx(grid.max(), rel=5e-3)
    assert 1 / t_star >= grid.max() * (1 - 1e-9)          # the exact maximum is never below a grid point
    np.testing.assert_allclose(weights, w[np.argmax(grid)], atol=5e-3)


def test_the_optimal_weights_equalise_every_constraint():
    """At ``w*`` every alternative's information equals ``1 / T*`` (Garivier & Kaufmann, Lemma 4)."""
    mu = np.array([0.62, 0.6, 0.5, 0.41, 0.2, 0.05])
    t_star, weights = characteristic_time(mu)
    order = np.argsort(-mu)
    w, m = weights[order][None, :], mu[order]
    for a in range(1, len(m)):
        x = (w[:, 0] * m[0] + w[:, a] * m[a]) / (w[:, 0] + w[:, a])
        value = w[0, 0] * bernoulli_kl(m[0], x[0]) + w[0, a] * bernoulli_kl(m[a], x[0])
        assert value == pytest.approx(1 / t_star, rel=1e-8)
    assert weights.sum() == pytest.approx(1.0)
    assert weights[0] > weights[1] > weights[2] > weights[3] > weights[4] > weights[5]


def test_the_finite_population_conversion_inverts_the_variance_ratio():
    N = np.array([800.0, 800.0, 50.0])
    n = np.array([1.0, 400.0, 49.0])
    n_eff = n * (N - 1) / (N - n)
    np.testing.assert_allclose(finite_population_cells(n_eff, N), n, rtol=1e-12)
    assert finite_population_cells(np.inf, 800.0) == 800.0
    assert finite_population_cells(1e12, 800.0) == pytest.approx(800.0)


def test_the_floor_adds_each_models_cells_within_its_first_look_and_its_examples():
    rng = np.random.default_rng(0)
    means = np.array([0.8, 0.75, 0.5, 0.1])
    scores = (rng.random((4, 400)) < means[:, None]).astype(float)
    floor = information_floor(scores, 0.05, first_look=16)
    assert floor.best == int(np.argmax(scores.mean(1)))
    assert floor.cells == pytest.approx(floor.per_model.sum())
    assert np.all(floor.per_model >= 16) and np.all(floor.per_model <= 400)
    assert floor.per_model[3] == 16                      # a clearly worse model: its first look is enough
    assert floor.per_model[:2].min() > 16
    looser = information_floor(scores, 0.2, first_look=16)
    assert looser.cells < floor.cells                    # a looser claim needs less information
    wide = np.concatenate([scores, scores], axis=1)      # the same means, twice the examples per model
    assert information_floor(wide, 0.05, first_look=16).cells > floor.cells   # less finite-population help


def test_tied_best_models_need_every_example():
    scores = np.array([[1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 1]], float)
    floor = information_floor(scores, 0.05, first_look=1)
    assert floor.per_model[0] == floor.per_model[1] == 4
    assert np.isinf(floor.characteristic_time)
    assert 1 <= floor.per_model[2] <= 4


def test_missing_cells_shrink_the_population():
    scores = np.array([[1, 1, 1, np.nan], [1, 1, 0, 0]], float)
    floor = information_floor(scores, 0.05)
    assert floor.per_model[0] <= 3


@pytest.mark.parametrize("scores,delta,needle", [
    (np.full((3, 5), 0.5), 0.05, "needs 0/1 scores"),
    (np.ones((1, 5)), 0.05, "at least 2 models"),
    (np.eye(3), 0.7, "delta must be in (0, 0.5)"),
])
def test_bad_input_is_refused_in_one_line(scores, delta, needle):
    with pytest.raises(PulseInputError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        information_floor(scores, delta)
