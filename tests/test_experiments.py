"""Pieces of the paper's experiments: splits, subsets, factor files, CV, metrics, figures."""
import dataclasses

import numpy as np
import pytest

from pulse_jax import tuning
from pulse_jax.fileio import data
from pulse_jax.analysis import metrics, plotting
from pulse_jax.engine import BanditConfig, Plugins
from pulse_jax.errors import PulseInputError
from pulse_jax.simulation import SimulationResult


def _matrix(m=6, n=4, dates=None):
    scores = (np.arange(m * n).reshape(m, n) % 2).astype(float)
    meta = {"created_date": tuple(dates)} if dates else {}
    return data.ScoreMatrix(scores, tuple(f"m{i}" for i in range(m)), tuple(f"q{j}" for j in range(n)), "x.csv", meta)


def test_chronological_split_puts_the_older_half_in_train():
    dates = ["2024-05-01", "2023-01-01", "2024-12-31", "2022-07-04", "2025-02-02", "2023-06-30"]
    train, cand, info = data.split_models(_matrix(dates=dates))
    assert info["split"] == "chronological" and info["train_until"] == "2023-06-30"
    assert train.models == ("m1", "m3", "m5") and cand.models == ("m0", "m2", "m4")
    assert cand.metadata["created_date"] == ("2024-05-01", "2024-12-31", "2025-02-02")


def test_random_split_is_recorded_and_reproducible():
    a = data.split_models(_matrix(), seed=3)
    b = data.split_models(_matrix(), seed=3)
    assert a[2] == b[2] and a[2]["split"] == "random" and a[2]["seed"] == 3
    assert set(a[0].models) | set(a[1].models) == {f"m{i}" for i in range(6)}


def test_top2_subset_on_a_hand_made_matrix():
    means = np.array([0.50, 0.90, 0.70, 0.88, 0.60, 0.80, 0.86, 0.65])
    # best = 1 (0.90); gaps to it: 0.88->0.02, 0.86->0.04, 0.80->0.10 ...; closest to 0.035 is 0.86 (row 6)
    picked = data.top2_subset(means, 4, 0.035)
    assert picked.tolist() == [1, 6, 5, 2]        # then the next best below 0.86: 0.80, 0.70
    assert data.top2_subset(means, 3, 0.0).tolist() == [1, 3, 6]
    with pytest.raises(PulseInputError, match="a subset of 8 needs 6"):
        data.top2_subset(means, 8, 0.035)


def test_factor_files(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "f.npz", U=rng.normal(size=(40, 3)).astype(np.float32),
             V=rng.normal(size=(25, 3)).astype(np.float32))
    train, cand, info = data.paper_scale_problem(tmp_path / "f.npz", seed=1, n_candidates=10, delta_top2=0.02)
    assert train.shape == (20, 25) and cand.shape == (10, 25)
    again = data.paper_scale_problem(tmp_path / "f.npz", seed=1, n_candidates=10, delta_top2=0.02)[1]
    np.testing.assert_array_equal(cand.scores, again.scores)
    np.savez(tmp_path / "bad.npz", U=np.zeros((40, 3)), V=np.zeros((25, 4)))
    with pytest.raises(PulseInputError, match="same rank"):
        data.load_factors(tmp_path / "bad.npz")
    np.savez(tmp_path / "nov.npz", U=np.zeros((40, 3)))
    with pytest.raises(PulseInputError, match=r"missing \['V'\]"):
        data.load_factors(tmp_path / "nov.npz")


def test_paper_scale_generator_on_the_shared_factors(shared_data):
    train, cand, info = data.paper_scale_problem(shared_data / "openllm_v2_mmlu_pro_factors.npz", seed=0,
                                                 delta_top2=0.02)
    assert cand.shape == (1000, 12032) and train.shape == (1106, 12032)
    assert abs(info["realized_top2_gap"] - 0.02) < 0.005
    assert 0.25 < train.scores.mean() < 0.4                      # the data README: mean accuracy 0.32


@pytest.mark.integration   # a long end-to-end run: the second test command
def test_cross_validation_selects_the_true_rank(tmp_path):
    rng = np.random.default_rng(0)
    m, n, r = 150, 300, 2
    U, V = rng.normal(0, 1.5, (m, r)), rng.normal(0, 1.5, (n, r))
    S = (rng.random((m, n)) < 1 / (1 + np.exp(-U @ V.T))).astype(np.float32)
    S[rng.random(S.shape) < 0.1] = np.nan                          # missing cells are fine
    result = tuning.cross_validate(S, {"rank": (1, 2, 4, 8), "lam": (0.01,), "lr": (0.05,), "epochs": (300,)})
    assert result["rank"] == 2
    tuning.save_hparams(result, tmp_path / "h.json")
    rank, settings = tuning.load_hparams(tmp_path / "h.json")
    assert rank == 2 and settings.epochs == 300
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(PulseInputError, match="not a hyperparameter file"):
        tuning.load_hparams(tmp_path / "bad.json")


def _result(best, spent, true_means, method="ucbe"):
    best, spent = np.asarray(best), np.asarray(spent)
    config = BanditConfig(n_models=len(true_means), n_examples=100, budget=int(spent.max()), batch_size=10)
    r, s = best.shape
    return SimulationResult(method, config, 0, np.asarray(true_means, float), best, spent,
                            np.zeros((r, s - 1), int), np.zeros((r, 3)), np.zeros((r, 3)),
                            np.zeros((r, 3), int), np.zeros((r, 3), int))


def test_metrics_against_hand_computed_values():
    means = [0.2, 0.9, 0.5]                      # the best model is 1
    spent = np.tile([30, 40, 50, 60], (4, 1))
    best = np.array([[0, 1, 1, 1], [0, 0, 1, 1], [2, 2, 2, 1], [1, 1, 1, 1]])
    res = _result(best, spent, means)
    acc, se = res.accuracy_at_budget([30, 40, 50, 60])
    np.testing.assert_allclose(acc, [0.25, 0.5, 0.75, 1.0])
    np.testing.assert_allclose(se[0], np.std([0, 0, 0, 1], ddof=1) / 2)
    assert res.best_at_budget([29]).tolist() == [[-1]] * 4          # before initialization ends: no guess
    assert metrics.first_budget_reaching(np.array([0.2, 0.96, 0.9, 0.97]), np.array([1, 2, 3, 4]), 0.95) == 4
    assert np.isnan(metrics.first_budget_reaching(np.array([0.96, 0.5]), np.array([1, 2]), 0.95))
    assert metrics.budget_to_target(res, 0.75, budgets=[30, 40, 50, 60], n_boot=50)["budget"] == 50
    assert metrics.savings(60, 100) == pytest.approx(40.0)
    np.testing.assert_allclose(metrics.top_k_accuracy(res, 2, [30, 60]), [0.5, 1.0])   # top 2 = models 1 and 2
    faster = _result(np.array([[1, 1, 1, 1]] * 4), spent, means, "pulse")
    np.testing.assert_array_equal(metrics.effective_budget(faster, res, [30, 40, 50, 60]), [30, 30, 30, 30])


def test_figures_are_written(tmp_path):
    means = [0.2, 0.9, 0.5]
    spent = np.tile([30, 40, 50, 60], (4, 1))
    ucbe = _result(np.array([[0, 1, 1, 1]] * 4), spent, means)
    pulse = _result(np.array([[1, 1, 1, 1]] * 4), spent, means, "pulse")
    panels = {"bench": {"ucbe": metrics.budget_to_target(ucbe, 0.95, n_boot=20),
                        "pulse": metrics.budget_to_target(pulse, 0.95, n_boot=20)}}
    for suffix in ("png", "pdf"):
        for path in (plotting.accuracy_vs_budget([ucbe, pulse], tmp_path / f"acc.{suffix}"),
                     plotting.budget_to_target_bars(panels, tmp_path / f"bars.{suffix}"),
                     plotting.effective_budget_plot([ucbe, pulse], tmp_path / f"eff.{suffix}")):
            assert path.stat().st_size > 1000


def test_stratified_split_deals_the_ranked_models_alternately_and_reports_the_gap():
    """Means 0.9, 0.8, ..., 0.4 (rows in scrambled order): the candidates get ranks 1, 3, 5 and the train
    split 2, 4, 6, so the candidates' top-2 gap is 0.2 (a random split can leave anything)."""
    means = [0.6, 0.9, 0.4, 0.8, 0.5, 0.7]
    scores = np.array([[1.0] * int(10 * p) + [0.0] * (10 - int(10 * p)) for p in means], np.float32)
    matrix = data.ScoreMatrix(scores, tuple(f"m{i}" for i in range(6)), tuple(f"e{j}" for j in range(10)), "hand")
    train, cand, info = data.split_models(matrix, how="stratified")
    assert cand.models == ("m1", "m4", "m5") and train.models == ("m0", "m2", "m3")
    assert info["split"] == "stratified" and info["candidates_top2_gap"] == pytest.approx(0.2)
    assert "candidates_top2_gap" in data.split_models(matrix, seed=1)[2]
    with pytest.raises(PulseInputError, match="split must be one of"):
        data.split_models(matrix, how="by-vibes")


def test_paired_auc_difference_of_identical_runs_says_no_difference():
    means = np.array([0.5, 0.4])
    spent = np.array([[10, 20, 30, 40]] * 4)
    a = _result(np.array([[0, 1, 1, 1]] * 4), spent, means)
    same = metrics.paired_auc_difference(a, a)
    assert same["z"] == 0 and same["identical"] and same["se"] == 0
    b = _result(np.array([[0, 0, 1, 1]] * 4), spent, means)
    shifted = metrics.paired_auc_difference(a, b)      # the same nonzero difference in every repetition
    assert np.isnan(shifted["z"]) and not shifted["identical"] and shifted["mean"] != 0


def test_enable_compilation_cache_is_exported_at_the_top_level():
    import importlib

    import pulse_jax as pj

    module = importlib.import_module("pulse_jax.compilation_cache")
    assert pj.enable_compilation_cache is module.enable_compilation_cache
    assert "enable_compilation_cache" in pj.__all__


def test_the_papers_budget_metric_by_hand():
    """The paper's count: bandit cells (step x B) at the *first* crossing, per bootstrap resample; this
    project's stricter count waits until the accuracy stays at or above the target."""
    accuracy = np.array([0.0, 0.8, 0.6, 0.9])
    assert metrics.first_step_reaching(accuracy, 0.75) == 1.0                     # touches at step 1
    assert metrics.first_budget_reaching(accuracy, np.arange(4), 0.75) == 3.0     # stays from step 3
    assert np.isnan(metrics.first_step_reaching(accuracy, 0.95))
    hits = np.array([[0, 1, 1, 1], [0, 0, 1, 1], [0, 0, 0, 1], [1, 1, 1, 1]])
    resamples = np.array([[0, 0, 0, 0], [2, 2, 2, 2], [1, 2, 1, 2], [0, 1, 2, 3]])
    draws = metrics.paper_budget_draws(hits, 16, 0.75, n_boot=4, resamples=resamples)
    np.testing.assert_array_equal(draws, [16.0, 48.0, 48.0, 32.0])                # steps 1, 3, 3, 2
    assert np.isnan(metrics.paper_budget_draws(hits[[2]], 16, 1.1, n_boot=1, resamples=np.zeros((1, 1), int))[0])


def test_paired_savings_in_both_metrics_on_a_real_pair():
    from pulse_jax import synthetic
    from pulse_jax.simulation import simulate

    bench = synthetic.make_benchmark(seed=4, n_models=10, n_examples=300, n_train=20)
    m, n = bench.scores.shape
    config = BanditConfig(n_models=m, n_examples=n, budget=m * 16 + 1600, batch_size=16)
    ucbe = simulate(bench.scores, config, "ucbe", reps=60, seed=0)
    same = simulate(bench.scores, config, "ucbe", reps=60, seed=0)
    for metric in ("paper", "strict"):
        self_pair = metrics.paired_savings(same, ucbe, target=0.5, n_boot=200, metric=metric)
        assert self_pair["savings_pct"] == 0.0 and self_pair["low"] == self_pair["high"] == 0.0   # paired: exact 0

    wide = simulate(bench.scores, config, "ucbe", reps=60, seed=0, params={"rule.exploration": 8.0})
    for metric in ("paper", "strict"):
        pair = metrics.paired_savings(ucbe, wide, target=0.5, n_boot=200, metric=metric)
        assert pair["both_reached_fraction"] > 0.5
        assert pair["low"] <= pair["high"] and np.isfinite(pair["savings_pct"])
    paper = metrics.paper_budget_to_target(ucbe, 0.5, n_boot=200)
    strict = metrics.budget_to_target(ucbe, 0.5, n_boot=200)
    assert paper["reached_fraction"] > 0.5 and paper["bandit_cells"] <= strict["bandit_budget"] + 16


def test_paired_certify_savings():
    """Paired savings in cells to certify: exactly 0 against itself, finite and bracketed for two real
    configurations, NaN when one never certifies (its median is beyond the budget)."""
    from pulse_jax import synthetic
    from pulse_jax.engine.params import BanditParams
    from pulse_jax.simulation import simulate

    bench = synthetic.make_benchmark(seed=4, n_models=6, n_examples=120, n_train=20)
    m, n = bench.scores.shape
    config = BanditConfig(n_models=m, n_examples=n, budget=m * n, batch_size=8)
    plugins = Plugins("ucbe", "lucb", "certified")
    all_bounds = simulate(bench.scores, config, plugins, reps=40, seed=0)
    again = simulate(bench.scores, config, plugins, reps=40, seed=0)
    certify = simulate(bench.scores, config, plugins, reps=40, seed=0, params=BanditParams(cs_simultaneous=0.0))
    same = metrics.paired_certify_savings(again, all_bounds, n_boot=200)
    assert same["savings_pct"] == same["low"] == same["high"] == 0.0
    pair = metrics.paired_certify_savings(certify, all_bounds, n_boot=200)
    assert pair["low"] <= pair["savings_pct"] <= pair["high"] and pair["savings_pct"] > 0   # fewer cells
    never = simulate(bench.scores, dataclasses.replace(config, budget=m * 8), "ucbe", reps=40, seed=0)
    assert np.isnan(metrics.paired_certify_savings(never, all_bounds, n_boot=50)["savings_pct"])


