"""Candidate matrices with missing cells: each model's benchmark is the examples it has a score for."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pulse_jax as pj
from conftest import tiny_problem
from pulse_jax import engine, cli, estimators
from pulse_jax.fileio import data
from pulse_jax.errors import PulseInputError
from pulse_jax.estimators import ModelSums, Pull
from reference import reference_run


def _ragged(seed=3, m=5, n=30, rate=0.2, rank=3):
    scores, _, V = tiny_problem(seed=seed, m=m, n=n, rank=rank)
    S = scores.astype(np.float64).copy()
    S[np.random.default_rng(seed).random(S.shape) < rate] = np.nan
    return S, V


@pytest.mark.parametrize("method", ["ucbe", "pulse", "naive"])
@pytest.mark.parametrize("exhaust", [False, True])
def test_engine_matches_numpy_reference_on_a_ragged_matrix(method, exhaust):
    """Step for step: draws only among a model's scored examples, N_i in every estimate, bound and stop."""
    S, V = _ragged()
    sizes = tuple(int(k) for k in (~np.isnan(S)).sum(1))
    budget = sum(sizes) if exhaust else 5 * 4 + 60            # exhaust: partial last batches, all N_i seen
    config = pj.BanditConfig(n_models=5, n_examples=30, budget=budget, batch_size=4, refit_every=3,
                             record_estimates=True, init_refit_epochs=20, refit_epochs=5, populations=sizes)
    run = jax.jit(engine.make_run(config, method))
    for seed in (0, 1):
        key = jax.random.PRNGKey(seed)
        out = run(key, S.astype(np.float32), V)
        ref = reference_run(S, V, config, method, key)
        np.testing.assert_array_equal(np.asarray(out.steps.chosen), ref["chosen"])
        np.testing.assert_array_equal(np.asarray(out.steps.best), ref["best"])
        np.testing.assert_allclose(np.asarray(out.steps.estimates), ref["estimates"], atol=2e-5)
        np.testing.assert_array_equal(np.asarray(out.n_obs), ref["n_obs"])
        if method != "naive":
            np.testing.assert_allclose(np.asarray(out.steps.low), ref["low"], atol=2e-5)
        if exhaust:
            assert (np.asarray(out.n_obs) == np.asarray(sizes)).all()   # every scored cell, never a missing one
            truth = np.nanmean(S, axis=1)
            np.testing.assert_allclose(np.asarray(out.estimates), truth, atol=1e-6)


def test_pulse_one_step_estimate_is_unbiased_over_a_ragged_population_by_enumeration():
    """Model 0 has 6 of 9 examples scored; 2 seen. Over every batch of 2 of its 4 unseen scored
    examples, the one-step estimate averages to its mean over its own 6 (wrong predictions on purpose)."""
    scored = np.array([0, 2, 3, 5, 6, 8])
    scores = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])           # on the scored examples, in that order
    preds = np.array([0.9, 0.2, 0.1, 0.3, 0.8, 0.2])
    seen = [0, 4]
    unseen = [k for k in range(6) if k not in seen]
    est = estimators.pulse()
    ledger = ModelSums(jnp.array([2, 3]), jnp.array([1, 1]), jnp.array([scores[seen].sum(), 1.0]),
                    jnp.array([scores[seen].sum(), 1.0]), jnp.array([preds[unseen].sum(), 0.0]),
                    jnp.array([(preds[unseen] ** 2).sum(), 0.0]), jnp.array([6, 9]))
    state = est.init(ledger, est.params)._replace(z_sum=jnp.array([1.7, 0.0]), n_z=jnp.array([1, 0]))
    thetas, ys = [], {}
    for batch in itertools.permutations(unseen, 2):
        pull = Pull(jnp.int32(0), jnp.int32(2), jnp.float32(scores[list(batch)].sum()),
                    jnp.float32(preds[list(batch)].sum()), jnp.asarray(scores[list(batch)], jnp.float32),
                    jnp.asarray(preds[list(batch)], jnp.float32), jnp.ones(2, bool))
        new, _ = est.update(state, ledger, pull, 9, est.params)
        thetas.append(float(new.theta_sum[0] - state.theta_sum[0]))
        y = np.asarray(est.proxies(state, ledger, pull, 9, est.params)[0][1])
        for k in range(2):
            ys.setdefault(batch[:k], []).append(y[k])
    assert np.mean(thetas) == pytest.approx(scores.mean(), abs=1e-6)
    for prefix, values in ys.items():
        rest = [k for k in unseen if k not in prefix]
        assert np.mean(values) == pytest.approx(scores[rest].mean(), abs=2e-6)
    del scored


# Monte Carlo tolerance as in test_confidence: 1,000 repetitions at delta = 0.2, 3 SE = 0.038.
@pytest.mark.parametrize("method", ["ucbe", "pulse"])
def test_confidence_sequences_cover_ragged_means_at_every_look(method):
    S, V = _ragged(seed=9, m=5, n=40, rate=0.25)
    config = pj.BanditConfig(n_models=5, n_examples=40, budget=5 * 4 + 90, batch_size=4, refit_every=5)
    res = pj.simulate(S, config, method, V=V, reps=1000, seed=4, params=pj.BanditParams(delta=0.2))
    assert res.config.populations == tuple(int(k) for k in (~np.isnan(S)).sum(1))
    np.testing.assert_allclose(res.true_means, np.nanmean(S, axis=1))
    miss = 1 - res.anytime_coverage()
    print(f"{method}: any-model miss rate over every look {miss:.3f} (delta 0.2)")
    assert miss <= 0.2 + 0.038
    exhausted = res.exhausted()
    assert exhausted.any()                                         # some small populations are used up
    np.testing.assert_allclose(res.estimates[exhausted], np.broadcast_to(res.true_means, exhausted.shape)[exhausted],
                               atol=1e-6)


def test_a_model_with_too_few_scores_is_named():
    S, V = _ragged()
    S[2, :3] = [1.0, 0.0, 1.0]
    S[2, 3:] = np.nan
    config = pj.BanditConfig(n_models=5, n_examples=30, budget=80, batch_size=4)
    with pytest.raises(PulseInputError, match="model row 2 has 3 scored examples; the initialization needs"):
        pj.simulate(S, config, "ucbe", reps=2)


def test_missing_policies(tmp_path, capsys):
    S, _ = _ragged(m=4, n=12, rate=0.15)
    matrix = data.ScoreMatrix(S, tuple(f"m{i}" for i in range(4)), tuple(f"e{j}" for j in range(12)), "x.csv")
    assert data.handle_missing(matrix) is matrix
    common = data.handle_missing(matrix, "drop-examples")
    assert not np.isnan(common.scores).any() and len(common.examples) == int((~np.isnan(S).any(0)).sum())
    complete_rows = int((~np.isnan(S).any(1)).sum())
    if complete_rows >= 2:
        assert len(data.handle_missing(matrix, "drop-models").models) == complete_rows
    else:
        with pytest.raises(PulseInputError, match="have every example"):
            data.handle_missing(matrix, "drop-models")
    data.save_csv(matrix, tmp_path / "c.csv")
    assert cli.main(["simulate", "--scores", str(tmp_path / "c.csv"), "--method", "ucbe", "--batch-size", "2",
                     "--reps", "4", "--quiet", "--out", str(tmp_path / "o")]) == 0
    assert "candidate cells are missing (empty, nan or NA); each model is judged on the examples it has a score for" in \
        capsys.readouterr().out


def _with_nan_text(path, rows: int, cols: int, holes: int, seed: int = 0):
    """A CSV whose first ``holes`` cells of row 1 are written ``nan`` (as pandas writes a missing value)."""
    rng = np.random.default_rng(seed)
    lines = ["model," + ",".join(f"e{j}" for j in range(cols))]
    for i in range(rows):
        cells = ["nan" if i == 1 and j < holes else f"{float(rng.random() < 0.6):g}" for j in range(cols)]
        lines.append(f"h{i}," + ",".join(cells))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_nan_cells_of_a_history_are_said_in_one_line(tmp_path, capsys):
    """``nan`` in a --train CSV reads as a missing cell (the data format's rule): the command says how
    many, for simulate and for tune, instead of fitting around them in silence."""
    train = _with_nan_text(tmp_path / "train.csv", rows=6, cols=30, holes=4)
    cand = _with_nan_text(tmp_path / "cand.csv", rows=4, cols=30, holes=0, seed=1)
    assert cli.main(["simulate", "--scores", str(cand), "--train", str(train), "--rank", "2", "--method", "pulse",
                     "--batch-size", "2", "--reps", "2", "--quiet", "--out", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err
    assert f"--train {train}: 4 of 180 cells are missing (empty, nan or NA); the fit uses the cells present" in err
    assert cli.main(["tune", "--train", str(train), "--ranks", "1", "--lams", "0.01", "--epochs", "20", "--folds", "2",
                     "--out", str(tmp_path / "h.json")]) == 0
    assert "4 of 180 cells are missing (empty, nan or NA)" in capsys.readouterr().err
