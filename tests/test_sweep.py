"""Sweeps in one program: traced parameters never recompile, each point equals simulate, clear errors."""
import importlib
import json

import jax
import numpy as np
import pytest

import pulse_jax as pj
from conftest import same_floats, tiny_problem
from pulse_jax import engine, cli
from pulse_jax.errors import PulseInputError
from pulse_jax.sweeps import grid_points

simulate_module = importlib.import_module("pulse_jax.simulation")   # the module, not pj.simulate

COMPILES = []   # XLA backend compilations, as JAX's own monitoring reports them
jax.monitoring.register_event_duration_secs_listener(
    lambda event, *args, **kwargs: COMPILES.append(event) if event.endswith("backend_compile_duration") else None)


@pytest.fixture(scope="module")
def problem():
    scores, _, V = tiny_problem(seed=8, m=6, n=48, rank=3)
    config = pj.BanditConfig(n_models=6, n_examples=48, budget=6 * 4 + 90, batch_size=4, refit_every=4)
    return scores, V, config


@pytest.fixture
def counted_traces(monkeypatch):
    """Count how often the run function is traced (each trace precedes one compilation)."""
    traces = []
    original = engine.make_run

    def counting(config, method="pulse", *rest):
        run = original(config, method, *rest)

        def traced(*args):
            traces.append(config)
            return run(*args)
        return traced

    monkeypatch.setattr(engine.drivers, "make_run", counting)
    simulate_module.compiled_runner.cache_clear()
    yield traces
    simulate_module.compiled_runner.cache_clear()


def test_a_twelve_point_sweep_compiles_the_run_once(problem, counted_traces):
    scores, V, config = problem
    grid = {"exploration": [0.25, 0.5, 1.0, 2.0], "refit_lr": [0.03, 0.1, 0.3]}
    result = pj.sweep(scores, config, "pulse", grid, reps=3, seed=0, V=V)
    assert len(result.points) == 12 and len(counted_traces) == 1
    before = len(COMPILES)
    again = pj.sweep(scores, config, "pulse", {"exploration": [3.0, 4.0, 5.0, 6.0], "refit_lr": [0.01, 0.2, 0.5]},
                     reps=3, seed=1, V=V)
    assert len(COMPILES) == before and len(counted_traces) == 1   # new values, new seed: nothing compiled
    assert again.compile_seconds < result.compile_seconds
    # the values did reach the program: different exploration, different choices
    assert any(not np.array_equal(a.chosen, b.chosen) for a, b in zip(result.results, again.results))


def test_simulate_with_new_parameter_values_compiles_nothing(problem, counted_traces):
    scores, V, config = problem
    first = pj.simulate(scores, config, "pulse", V=V, reps=4, seed=0)
    before = len(COMPILES)
    second = pj.simulate(scores, config, "pulse", V=V, reps=4, seed=0,
                         params={"rule.exploration": 0.05, "delta": 0.2, "refit_lr": 0.3, "refit_l2": 0.1,
                                 "estimator.fixed_lambda": 0.5, "refit_prior": 2.0, "cs_simultaneous": 0.0})
    assert len(COMPILES) == before and len(counted_traces) == 1
    assert not np.array_equal(first.chosen, second.chosen)
    assert second.params.delta == pytest.approx(0.2)


@pytest.mark.parametrize("method", ["ucbe", "pulse", "naive"])
def test_each_sweep_point_equals_simulate_with_its_parameters(problem, method):
    scores, V, config = problem
    # fixed_lambda is PULSE's own number (estimator.fixed_lambda); the others are the engine's and the rule's.
    own = {"estimator.fixed_lambda": 0.4} if method == "pulse" else {}
    grid = [{"rule.exploration": 0.3, **own}, {"exploration": 2.0, "delta": 0.3, "init_refit_lr": 0.05},
            {"refit_lr": 0.02, "refit_l2": 0.2, "init_refit_l2": 0.001, "refit_prior": 5.0, "cs_simultaneous": 0.0}]
    result = pj.sweep(scores, config, method, grid, reps=5, seed=7, V=V, chunk_size=4)
    for point, res in zip(result.points, result.results):
        alone = pj.simulate(scores, config, method, V=V, reps=5, seed=7, params=point)
        for field in ("best", "chosen", "n_obs", "n_pulls", "certified_spent"):
            np.testing.assert_array_equal(getattr(res, field), getattr(alone, field), err_msg=field)
        # The sweep batches 4 items, simulate 5: the matrix kernels may block the contractions
        # differently, so sums can round differently in float32's last bit (eps 1.2e-7); a real
        # difference (another parameter, another draw) would be orders of magnitude larger.
        for field in ("estimates", "cs_low", "lam"):
            np.testing.assert_allclose(getattr(res, field), getattr(alone, field), rtol=1e-6, atol=1e-6, err_msg=field)


# Integration: the default run keeps the traced fixed_lambda reaching the estimates
# (test_each_sweep_point_equals_simulate_with_its_parameters[pulse]); this adds a second compiled
# PULSE, the static rule, to compare with.
@pytest.mark.integration
def test_fixed_lambda_parameter_equals_a_constant_lambda_estimator(problem):
    """The traced switch: fixed_lambda = 0.6 behaves exactly like the static constant-lambda rule."""
    scores, V, config = problem
    traced = pj.simulate(scores, config, "pulse", V=V, reps=6, seed=2, params={"estimator.fixed_lambda": 0.6})
    static = pj.simulate(scores, config, pj.pulse(pj.constant_lambda(0.6)), V=V, reps=6, seed=2)
    np.testing.assert_array_equal(traced.chosen, static.chosen)
    # XLA folds the static 0.6 into the program; the elemental emitters the suite compiles with
    # (conftest.py) may round that folded arithmetic one float32 step (6e-8 below 1) apart from the traced.
    same_floats(traced.estimates, static.estimates, atol=1.2e-7)
    assert np.all(traced.lam[traced.chosen >= 0] == np.float32(0.6))


def test_sweep_repetitions_share_keys_across_points(problem):
    """Common random numbers: with exploration so large the pulls are round-robin, the initial
    draws and every batch are the same at every point, whatever delta is."""
    scores, V, config = problem
    result = pj.sweep(scores, config, "ucbe", {"delta": [0.05, 0.2, 0.5]}, reps=4, seed=3,
                      base={"rule.exploration": 1e6})
    first = result.results[0]
    for res in result.results[1:]:
        np.testing.assert_array_equal(res.chosen, first.chosen)
        np.testing.assert_array_equal(res.estimates, first.estimates)
        assert np.all(res.cs_high - res.cs_low <= first.cs_high - first.cs_low + 1e-6)   # looser delta, narrower


@pytest.mark.parametrize("grid, needle", [
    ({"explor": [1.0]}, "unknown parameter 'explor'"),
    ({"exploration": []}, "parameter 'exploration' has no values"),
    ({"delta": [0.05, 1.5]}, "delta=1.5 is out of range"),
    ({"refit_lr": [0.0]}, "refit_lr=0.0 is out of range"),
    ({"fixed_lambda": [1.2]}, "fixed_lambda=1.2 is out of range"),
    ({"exploration": ["fast"]}, "exploration='fast' is not a number"),
    ({}, "no parameter given"),
    ([], "empty list"),
    ([{"refit_l2": -1}], "grid point 0: refit_l2=-1 is out of range"),
])
def test_bad_grid_input_is_one_line_naming_the_parameter(grid, needle):
    with pytest.raises(PulseInputError, match=needle) as err:
        grid_points(grid)
    assert "\n" not in str(err.value)


def test_grid_is_the_cartesian_product_in_the_order_given():
    axes, points = grid_points({"exploration": [1, 2], "estimator.fixed_lambda": [float("nan"), 0.5]})
    assert axes == ("exploration", "estimator.fixed_lambda")
    assert [(p.rule.exploration, p.estimator.fixed_lambda) for p in points][1] == (1.0, 0.5)
    assert np.isnan(points[0].value("fixed_lambda")) and points[3].value("rule.exploration") == 2.0
    assert points[0].delta == 0.05 == points[0].engine.delta


def test_cli_sweep_writes_table_json_csv_and_figure(problem, tmp_path, capsys):
    scores, _, _ = problem
    rng = np.random.default_rng(0)
    header = "model," + ",".join(f"e{j}" for j in range(scores.shape[1]))
    (tmp_path / "cand.csv").write_text(header + "\n" + "\n".join(
        f"m{i}," + ",".join(str(int(v)) for v in row) for i, row in enumerate(scores)) + "\n")
    train = (rng.random((20, scores.shape[1])) < scores.mean(0)).astype(int)
    (tmp_path / "train.csv").write_text(header + "\n" + "\n".join(
        f"t{i}," + ",".join(str(v) for v in row) for i, row in enumerate(train)) + "\n")
    out = tmp_path / "sweep"
    code = cli.main(["sweep", "--scores", str(tmp_path / "cand.csv"), "--train", str(tmp_path / "train.csv"),
                     "--rank", "3", "--batch-size", "4", "--refit-every", "4", "--budget", "120",
                     "--grid", "exploration=0.5,2", "--grid", "fixed_lambda=nan,0.5", "--baseline",
                     "exploration=2,fixed_lambda=nan", "--reps", "6", "--quiet", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "compilation" in printed and "baseline" in printed
    summary = json.loads((out / "sweep.json").read_text())
    assert summary["axes"] == ["exploration", "fixed_lambda"] and len(summary["table"]) == 4
    assert summary["table"][2]["baseline"] is True and summary["baseline"] == 2
    assert len((out / "sweep.csv").read_text().splitlines()) == 5
    assert (out / "sweep.png").stat().st_size > 5000


@pytest.mark.parametrize("argv, needle", [
    (["--grid", "explor=1"], "unknown parameter 'explor'"),
    (["--grid", "exploration="], "--grid exploration: no values given"),
    (["--grid", "delta=2"], "delta='2' is out of range"),
    (["--grid", "exploration=1", "--method", "ucbe,pulse"], "a sweep runs one method"),
    ([], "--grid: give at least one"),
])
def test_cli_sweep_errors_are_one_line(argv, needle, tmp_path, capsys):
    assert cli.main(["sweep", "--out", str(tmp_path / "o")] + argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_a_larger_repetition_count_adds_chunks_not_a_compile(problem, counted_traces):
    """Repetitions beyond one chunk run in chunks of that exact size (the last padded), so 20 then 44
    repetitions compile once; the results are those of one chunk per repetition (chunks never change
    results)."""
    scores, V, config = problem
    first = pj.simulate(scores, config, "pulse", V=V, reps=20, seed=0, chunk_size=8)
    before = len(COMPILES)
    more = pj.simulate(scores, config, "pulse", V=V, reps=44, seed=0, chunk_size=8)
    assert len(COMPILES) == before and len(counted_traces) == 1
    assert more.reps == 44 and np.array_equal(more.chosen[:20], first.chosen)
    alone = pj.simulate(scores, config, "pulse", V=V, reps=44, seed=0, chunk_size=44)
    assert np.array_equal(more.chosen, alone.chosen)


def test_the_default_chunk_keeps_its_shape_across_repetition_counts(problem, monkeypatch):
    """Where memory sets the chunk (full scale: about 40 repetitions), 200 and 500 repetitions run in
    chunks of one shape; only a count whose padding would pass a third of it gets equal, smaller chunks."""
    scores, V, config = problem
    from pulse_jax import registry

    estimator = registry.estimator("pulse")
    mesh = simulate_module.repetition_mesh()
    monkeypatch.setattr(simulate_module, "default_chunk_size", lambda *a, **k: 42)
    sizes = {total: simulate_module._chunk_of(config, estimator, 3, total, None, mesh) for total in (10, 200, 500, 50)}
    assert sizes[200] == sizes[500] == 42 and sizes[10] == 10
    assert sizes[50] == 25                  # 2 x 42 would pad 34 of 50: two equal chunks instead


def test_a_cpu_splits_the_repetitions_between_its_cores(problem, monkeypatch):
    """With two cores a CPU runs two chunks at once: each sized from half the memory, and a count under
    one chunk split in two."""
    scores, V, config = problem
    from pulse_jax import registry

    estimator = registry.estimator("pulse")
    mesh = simulate_module.repetition_mesh()
    budgets = []
    monkeypatch.setattr(simulate_module, "default_chunk_size", lambda *a, **k: budgets.append(a[-1]) or 42)
    assert simulate_module._chunk_of(config, estimator, 3, 500, None, mesh, workers=2) == 42
    assert budgets[-1] == simulate_module.device_memory_budget() // 2
    assert simulate_module._chunk_of(config, estimator, 3, 30, None, mesh, workers=2) == 15
    assert simulate_module._chunk_of(config, estimator, 3, 31, None, mesh, workers=2) == 16
    assert simulate_module._chunk_of(config, estimator, 3, 30, 30, mesh, workers=2) == 30    # as given


@pytest.mark.parametrize("method", ["ucbe", "pulse"])
def test_chunks_at_once_give_the_results_of_one_chunk_at_a_time(problem, monkeypatch, method):
    """Chunks run from several threads are the same computations: every result equal to the bit to one
    chunk at a time, progress reported in order, every repetition once."""
    scores, V, config = problem
    monkeypatch.setattr(simulate_module, "cpu_workers", lambda: 1)
    one = pj.simulate(scores, config, method, V=V, reps=13, seed=4, chunk_size=4)
    seen = []
    monkeypatch.setattr(simulate_module, "cpu_workers", lambda: 3)
    many = pj.simulate(scores, config, method, V=V, reps=13, seed=4, chunk_size=4,
                       progress=lambda done, total, seconds: seen.append(done))
    assert seen == [4, 8, 12, 13]
    for field in ("best", "spent", "chosen", "n_obs", "estimates", "certified_spent"):
        np.testing.assert_array_equal(getattr(one, field), getattr(many, field))
