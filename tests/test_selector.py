"""Live selection: ask/tell equals the simulation, durable logs, concurrency, stopping, failures."""
import json
import random
import threading
import time

import numpy as np
import pytest

from pulse_jax.live import journal

from pulse_jax import cli, synthetic
from pulse_jax.stats import factorization
from pulse_jax.engine import BanditConfig
from pulse_jax.errors import PulseInputError
from pulse_jax.live import EvaluationError, Selector, run
from pulse_jax.simulation import simulate
from conftest import as_simulated

B = 8


@pytest.fixture(scope="module")
def bench():
    b = synthetic.make_benchmark(seed=0, n_models=8, n_examples=300, n_train=60)
    return b, factorization.fit_example_embeddings(b.train, rank=4)


def _selector(bench, method="pulse", log=None, budget=None, **kw):
    b, V = bench
    m, n = b.scores.shape
    kw.setdefault("refit_every", 7)
    return Selector(b.models, n, budget or m * B + 8 * 40, method=method, batch_size=B, V=V, seed=3, log=log,
                    **as_simulated(**kw))


def _oracle(b, calls=None, lock=None):
    def evaluate(model, ids):
        if calls is not None:
            with lock:
                calls.extend((model, e) for e in ids)
        return b.scores[b.models.index(model), ids].tolist()
    return evaluate


@pytest.mark.parametrize("method", ["ucbe", "pulse", "naive", "pulse_adaptive"])
def test_ask_tell_replay_makes_the_simulation_engines_choices(bench, method):
    b, V = bench
    sel = _selector(bench, method)
    chosen, best = [], []
    while (request := sel.ask()) is not None:
        sel.tell(request, b.scores[request.model_index, list(request.example_index)])
        if request.step:
            chosen.append(request.model_index)
            best.append(int(sel._live.bandit.best))
    config = BanditConfig(n_models=8, n_examples=300, budget=sel.config.budget, batch_size=B, refit_every=7)
    sim = simulate(b.scores, config, method, V=V, reps=1, seed=3)
    steps = len(chosen)
    np.testing.assert_array_equal(chosen, sim.chosen[0, :steps])
    assert (sim.chosen[0, steps:] == -1).all()          # the engine only pads with no-op steps
    np.testing.assert_array_equal(best, sim.best[0, 1:steps + 1])
    report = sel.result()
    np.testing.assert_allclose(report.estimates, sim.estimates[0], atol=1e-6)
    assert report.spent == sel.config.budget
    for model, ids in report.evaluated.items():
        assert len(ids) == len(set(ids))                   # never the same cell twice


def test_a_selector_with_bets_tuned_to_the_gap_makes_the_simulations_choices(bench):
    """``gap_horizon`` reaches the live kernel as the simulated one: `select`'s rule, stop, betting sequences
    and certification bounds, the same batches and the same stop, and a log records it."""
    b, V = bench
    m, n = b.scores.shape
    sel = Selector(b.models, n, m * n, method="pulse_hedged", batch_size=B, V=V, seed=3, refit_every=7,
                   gap_horizon=1.0, concurrency=1)
    chosen = []
    while (request := sel.ask()) is not None:
        sel.tell(request, b.scores[request.model_index, list(request.example_index)])
        if request.step:
            chosen.append(request.model_index)
    assert sel.stopped and sel.config.gap_horizon == 1.0
    config = BanditConfig(n_models=m, n_examples=n, budget=m * n, batch_size=B, refit_every=7,
                          cs_grid=sel.config.cs_grid, gap_horizon=1.0)
    sim = simulate(b.scores, config, sel.plugins, V=V, reps=1, seed=3, params=sel.params)
    assert (sel.plugins.rule.name, sel.plugins.stop.name) == ("top_two", "certified")
    np.testing.assert_array_equal(chosen, sim.chosen[0, :len(chosen)])
    assert sel.result().spent == int(sim.spent[0, -1])
    anytime = Selector(b.models, n, m * n, method="pulse_hedged", batch_size=B, V=V, seed=3, refit_every=7,
                       gap_horizon=0.0, concurrency=1)
    assert run(_oracle(b), anytime).spent != sel.result().spent      # the bets differ, and so does the run


def test_resume_after_a_crash_at_every_point(bench, tmp_path):
    b, _ = bench
    full = run(_oracle(b), _selector(bench, budget=8 * B + 8 * 12, stop="budget", concurrency=1))
    n_tells = 8 + 12
    for crash_after in range(n_tells + 1):
        log = tmp_path / f"run{crash_after}.db"
        calls, lock = [], threading.Lock()
        first = _selector(bench, log=log, budget=8 * B + 8 * 12, concurrency=1)
        for _ in range(crash_after):                         # the process dies after `crash_after` tells
            request = first.ask()
            first.tell(request, _oracle(b, calls, lock)(request.model, list(request.example_ids)))
        del first
        resumed = _selector(bench, log=log, budget=8 * B + 8 * 12, stop="budget", concurrency=1)
        report = run(_oracle(b, calls, lock), resumed)
        assert len(calls) == len(set(calls)) == report.spent  # no cell evaluated twice
        np.testing.assert_allclose(report.estimates, full.estimates, atol=1e-6)
        assert report.evaluated == full.evaluated


def test_in_flight_batches_are_asked_again(bench, tmp_path):
    b, _ = bench
    log = tmp_path / "run.db"
    sel = _selector(bench, log=log)
    for _ in range(10):
        r = sel.ask()
        sel.tell(r, _oracle(b)(r.model, list(r.example_ids)))
    in_flight = sel.ask()                                    # the process dies with this batch unanswered
    resumed = _selector(bench, log=log)
    assert resumed.spent == sel.spent
    assert resumed.pending() == []
    again = resumed.ask()                                    # the batch in flight is asked again
    assert (again.model, again.example_ids) == (in_flight.model, in_flight.example_ids)


def test_concurrent_runs_are_valid_and_reproducible(bench):
    b, _ = bench
    rng = random.Random(0)

    def slow(model, ids):
        time.sleep(rng.random() * 0.01)                      # results come back out of order
        return b.scores[b.models.index(model), ids].tolist()

    reports = [run(slow, _selector(bench, stop="budget", concurrency=4)) for _ in range(2)]
    assert reports[0].evaluated == reports[1].evaluated
    np.testing.assert_array_equal(reports[0].estimates, reports[1].estimates)
    assert reports[0].spent == reports[0].budget
    for ids in reports[0].evaluated.values():
        assert len(ids) == len(set(ids))


# Integration: the default run keeps coverage at every look over 1,000 simulated repetitions
# (test_confidence.py) and a live selection's choices and estimates equal to the simulation's
# (test_ask_tell_replay_makes_the_simulation_engines_choices); this is the live loop's own check.
@pytest.mark.integration
@pytest.mark.parametrize("method", ["ucbe", "pulse"])
def test_simultaneous_bounds_hold_at_every_look(method):
    """What makes stopping after any batch valid: with probability >= 1 - delta the
    simultaneous bounds contain every model's true mean at every time.

    Monte Carlo on the built-in generator, checked after every batch of every run,
    through the worst ratio |centre - mu| / half-width over all looks and models
    (> 1 is a violation). The bounds are conservative: the worst ratio is about
    0.1-0.2 here, so this test catches a bound that is too narrow by a factor of
    10 or more (asserted below), not a subtle error in its constants; the exact
    formulas are checked in test_estimators.py."""
    reps, delta, worst = 10, 0.2, []
    for seed in range(reps):
        b = synthetic.make_benchmark(seed=seed, n_models=4, n_examples=2000, n_train=30, gap=0.05)
        sel = Selector(b.models, 2000, 5000, method=method, batch_size=50, delta=delta, seed=seed,
                       refit_every=4, train=b.train, rank=3)
        ratio = 0.0
        while (request := sel.ask()) is not None:
            sel.tell(request, b.scores[request.model_index, list(request.example_index)])
            r = sel.result()
            half, centre = (r.high - r.low) / 2, (r.high + r.low) / 2
            outside = (b.true_means < r.low - 1e-6) | (b.true_means > r.high + 1e-6)
            if outside.any():
                ratio = np.inf
            informative = (half > 1e-9) & (r.low > 0) & (r.high < 1)
            if informative.any():
                ratio = max(ratio, float(np.max(np.abs(b.true_means - centre)[informative] / half[informative])))
        worst.append(ratio)
    worst = np.array(worst)
    print(f"{method}: worst |centre - mu| / half-width per run: {np.round(worst, 3).tolist()}")   # pytest -s
    assert (worst > 1).mean() <= delta + 3 * np.sqrt(delta * (1 - delta) / reps)
    assert (worst > 0.1).mean() > 0.5       # power: a bound 10x too narrow would fail above


@pytest.mark.parametrize("method", ["ucbe", "pulse"])
def test_early_stopping_stops_early_and_is_right(method):
    """Built-in generator, top-2 gap about 0.25: the rule stops well before the budget."""
    reps, wrong, spent = 8, 0, []
    for seed in range(reps):
        b = synthetic.make_benchmark(seed=seed, n_models=3, n_examples=2000, n_train=30, gap=0.25, pool_factor=6,
                                     ability_spread=1.5)
        sel = Selector(b.models, 2000, 6000, method=method, batch_size=50, delta=0.2, seed=seed, refit_every=5,
                       train=b.train, rank=4)
        report = run(_oracle(b), sel)
        assert report.separated and not report.tied_with_leader
        wrong += report.leader != b.models[b.best_model]
        spent.append(report.spent)
    assert wrong == 0 and max(spent) < 6000


def test_evaluate_failures(bench, tmp_path):
    b, _ = bench
    log = tmp_path / "run.db"
    attempts = []

    def flaky(model, ids):
        attempts.append(model)
        if len(attempts) in (3, 4):
            raise TimeoutError("API timeout")
        return _oracle(b)(model, ids)

    report = run(flaky, _selector(bench, log=tmp_path / "retry.db", stop="budget"), retries=2, retry_wait=0.0)
    assert report.spent == report.budget                      # recovered through retries

    def dies(model, ids):
        if len(attempts) >= 30:
            raise RuntimeError("quota exceeded")
        attempts.append(model)
        return _oracle(b)(model, ids)

    attempts.clear()   # one batch at a time: the 30 calls that succeed are the first 30 asked
    with pytest.raises(EvaluationError, match="quota exceeded"):
        run(dies, _selector(bench, log=log, stop="budget", concurrency=1), retry_wait=0.0)
    kept = _selector(bench, log=log, stop="budget", concurrency=1)
    assert kept.spent == 30 * B                                # the 30 batches told are kept
    report = run(_oracle(b), kept)
    assert report.spent == report.budget

    sel = _selector(bench)
    request = sel.ask()
    for bad, needle in (([0.5] * (B - 1), "got 7 scores for 8 examples"), ([np.nan] * B, "not a number in"),
                        ([1.5] * B, "not a number in"), (["x"] * B, "not numbers")):
        with pytest.raises(PulseInputError, match=needle):
            sel.tell(request, bad)
    assert sel.spent == 0 and sel.pending() == [request]        # nothing recorded
    sel.tell(request, [1.0] * B)
    with pytest.raises(PulseInputError, match="already told"):
        sel.tell(request, [1.0] * B)


def test_log_from_another_configuration_is_refused(bench, tmp_path):
    log = tmp_path / "run.db"
    _selector(bench, log=log)
    with pytest.raises(PulseInputError, match="--budget 300 is smaller than the 384 .* give --budget 384 or more"):
        _selector(bench, log=log, budget=300)
    with pytest.raises(PulseInputError, match="method is 'pulse' in the log, 'ucbe' here"):
        _selector(bench, "ucbe", log=log)


def test_budget_already_spent_and_unknown_model(bench, tmp_path):
    b, _ = bench
    log = tmp_path / "run.db"
    run(_oracle(b), _selector(bench, log=log, stop="budget"))
    again = _selector(bench, log=log)
    assert again.ask() is None
    calls = []
    report = run(lambda m, ids: calls.append(m), again)
    assert calls == [] and report.spent == report.budget
    with pytest.raises(PulseInputError, match="unknown model"):
        again.paired_difference("candidate-000", "gpt-9")
    diff = again.paired_difference(b.models[0], b.models[1])
    assert diff["n_common"] > 0 and diff["low"] <= diff["estimate"] <= diff["high"]
    truth = b.true_means[0] - b.true_means[1]
    assert diff["low"] <= truth <= diff["high"]


@pytest.mark.integration   # a long end-to-end run: the second test command
def test_cli_select_runs_and_resumes(tmp_path, capsys, monkeypatch):
    from pulse_jax import stand_in
    from pulse_jax.cli import stand_in as stand_in_cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "models.txt").write_text("\n".join(stand_in.models()[:10]) + "\n")
    stand_in_cli.main(["train", str(tmp_path / "history.csv")])
    args = ["select", "--models", "models.txt", "--examples", "1000", "--budget", "960", "--batch-size", "16",
            "--refit-every", "10", "--rank", "4", "--evaluate", "pulse_jax.stand_in:score", "--train",
            "history.csv", "--log", "run.db", "--quiet", "--stop", "budget"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "Leader:" in out and (tmp_path / "run_report" / "estimates.png").stat().st_size > 1000
    header, records = journal.snapshot(tmp_path / "run.db")
    assert header["type"] == "header" and len(records) == 10 + 50
    # the defaults: pulse_hedged, Top-Two with the interval challenger, certification bounds, betting sequences
    assert header["method"] == "pulse_hedged" and "raw_sequence" not in header["method_settings"]
    assert header["method_settings"]["lambda_rule"] == "constant_lambda(0.5)"
    assert header["cs_simultaneous"] == 0.0 and "top_two" in json.dumps(header["rule"])
    assert header["cs_grid"] == 1000
    assert "certification levels" in out
    assert cli.main(args) == 0                                # the same command on a finished run: said, nothing run
    assert "this selection already finished" in capsys.readouterr().err
    assert journal.snapshot(tmp_path / "run.db")[1] == records
    bad = args[:args.index("--budget") + 1] + ["500"] + args[args.index("--budget") + 2:]
    assert cli.main(bad) == 2
    assert "--budget 500 is smaller than the 960 run.db was started with; give --budget 960 or more" in \
        capsys.readouterr().err
    assert cli.main(args + ["--sequence", "bernstein"]) == 2
    assert "different configuration: cs_grid is 1000 in the log, 0 here" in capsys.readouterr().err


@pytest.mark.integration   # subprocesses for seconds each: the second test command
def test_kill_9_loses_at_most_the_batch_in_flight(tmp_path):
    """A real SIGKILL of ``pulse-jax select``, then the same command again."""
    import os
    import signal
    import subprocess

    from conftest import log_records, recovered_records, write_slow_scorer

    args = write_slow_scorer(tmp_path, delay=0.05) + ["--concurrency", "1"]   # one batch in flight
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    proc = subprocess.Popen(args + ["--log", "run.db"], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and len(log_records(tmp_path / "run.db")) < 20:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    told_before = len(recovered_records(tmp_path / "run.db"))
    assert 20 <= told_before < 50                                 # killed mid-run
    assert subprocess.run(args + ["--log", "run.db"], cwd=tmp_path, env=env, capture_output=True).returncode == 0
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    repeated = len(calls) - len(set(calls))
    assert repeated <= 16                                          # at most the one batch in flight
    (tmp_path / "calls.txt").unlink()
    assert subprocess.run(args + ["--log", "clean.db"], cwd=tmp_path, env=env, capture_output=True).returncode == 0
    resumed = json.loads((tmp_path / "run_report" / "report.json").read_text())
    clean = json.loads((tmp_path / "clean_report" / "report.json").read_text())
    assert resumed["evaluated"] == clean["evaluated"] and resumed["ranking"] == clean["ranking"]


def test_selector_with_swept_parameters_equals_simulate_and_writes_nothing_into_the_episode(bench):
    """The selector runs the simulation's kernel: non-default traced parameters give the same choices,
    and told scores live in the kernel's state, never in the (constant) episode."""
    b, V = bench
    params = {"rule.exploration": 0.3, "delta": 0.1, "refit_lr": 0.05, "estimator.fixed_lambda": 0.7,
              "cs_simultaneous": 1.0}      # the simulation's default bounds (a dict's other numbers: the live ones)
    sel = _selector(bench, "pulse", params=params)
    chosen = []
    episode = None
    while (request := sel.ask()) is not None:
        sel.tell(request, b.scores[request.model_index, list(request.example_index)])
        if request.step:
            chosen.append(request.model_index)
        elif sel.initialized:
            episode = sel._live.episode
            initial = np.asarray(episode.scores).copy()
    assert sel._live.episode is episode                                   # never replaced
    np.testing.assert_array_equal(np.asarray(sel._live.episode.scores), initial)
    assert np.count_nonzero(initial) <= 8 * B                      # the initial batches only
    config = BanditConfig(n_models=8, n_examples=300, budget=sel.config.budget, batch_size=B, refit_every=7)
    sim = simulate(b.scores, config, "pulse", V=V, reps=1, seed=3, params=params)
    np.testing.assert_array_equal(chosen, sim.chosen[0, :len(chosen)])
    report = sel.result()
    np.testing.assert_allclose(report.estimates, sim.estimates[0], atol=1e-6)
    np.testing.assert_allclose(report.low, sim.cs_low[0], atol=1e-6)
    assert report.delta == pytest.approx(0.1)
