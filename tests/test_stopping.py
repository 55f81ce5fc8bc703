"""Stopping rules: one mechanism for simulation and live selection, and what a stop certifies."""
import jax.numpy as jnp
import numpy as np
import pytest

import pulse_jax as pj
from pulse_jax import cli, synthetic
from pulse_jax.stats import factorization
from pulse_jax.engine import BanditConfig
from pulse_jax.live import Selector, run
from pulse_jax.simulation import simulate
from conftest import as_simulated

B = 8


@pytest.fixture(scope="module")
def bench():
    b = synthetic.make_benchmark(seed=1, n_models=6, n_examples=400, n_train=60, gap=0.15)
    return b, factorization.fit_example_embeddings(b.train, rank=4)


def _after_spending(cells):
    """A plug-in stopping rule of the user's: stop once ``cells`` cells are spent (claims nothing)."""
    return pj.StoppingRule(f"after_{cells}", lambda inputs, params: inputs.spent >= cells)


def _live(bench, stop, method="pulse", budget=2000):
    b, V = bench
    sel = Selector(b.models, 400, budget, method=method, batch_size=B, V=V, seed=3, refit_every=7, stop=stop, concurrency=1,
                   **as_simulated(params=pj.BanditParams(delta=0.2)))
    report = run(lambda model, ids: b.scores[b.models.index(model), ids].tolist(), sel)
    return sel, report


def _simulated(bench, stop, method="pulse", budget=2000):
    b, V = bench
    config = BanditConfig(n_models=6, n_examples=400, budget=budget, batch_size=B, refit_every=7)
    return simulate(b.scores, config, pj.Plugins(method, stop=stop), V=V, reps=1, seed=3, params=pj.BanditParams(delta=0.2))


@pytest.mark.parametrize("method", ["ucbe", "pulse"])
def test_live_selection_stops_where_the_simulation_stops(bench, method):
    """The same StoppingRule stops both: a certified live run spends exactly the simulated run's cells,
    names the simulated certificate's model, and claims it in the report."""
    sel, report = _live(bench, "certified", method)
    sim = _simulated(bench, "certified", method)
    cert = sim.certification()
    assert cert["certified_fraction"] == 1.0                 # the budget is large enough to certify
    assert sel.stopped and report.stopped and report.stop == "certified"
    assert report.spent == int(sim.spent[0, -1]) < report.budget
    assert report.claimed == (report.leader,) == (sel.models[int(sim.certified_model[0])],)
    assert report.leader in report.certificate and "0.2" in report.certificate
    assert "Stopping rule `certified` (stopped)" in report.to_markdown()
    assert report.to_dict()["claimed"] == [report.leader]


def test_a_users_stopping_rule_runs_live_as_in_simulation(bench):
    rule = _after_spending(6 * B + 8 * 40)
    sel, report = _live(bench, rule, "ucbe")
    sim = _simulated(bench, rule, "ucbe")
    assert report.spent == int(sim.spent[0, -1]) == 6 * B + 8 * 40
    assert sel.stopped and report.claimed == ()
    assert report.certificate == "nothing is certified (this stopping rule makes no claim)"


def test_budget_rule_spends_everything_and_claims_nothing(bench):
    sel, report = _live(bench, "budget", budget=6 * B + 8 * 30)
    assert report.spent == report.budget and report.claimed == ()
    assert "certifies nothing" in report.certificate


def test_use_stop_lets_a_certified_run_go_on(bench):
    b, V = bench
    sel, report = _live(bench, "certified")
    assert sel.ask() is None                                   # stopped: nothing more is asked
    assert report.stopped and sel.stopped and bool(sel._live.bandit.stopped)   # the kernel's own stop
    sel.use_stop("budget")
    assert not bool(sel._live.bandit.stopped)
    assert sel.ask() is not None and not sel.stopped
    fresh = Selector(b.models, 400, 6 * B + 8 * 20, batch_size=B, V=V, seed=3, refit_every=7, concurrency=1)
    assert fresh.stop.name == "certified"                     # the default for a method with an interval
    fresh.use_stop("budget")
    spent = run(lambda model, ids: b.scores[b.models.index(model), ids].tolist(), fresh)
    assert spent.spent == spent.budget and fresh.stop.name == "budget"
    assert Selector(b.models, 400, 100, method="naive", batch_size=B, V=V).stop.name == "budget"


def test_a_stopping_rule_that_needs_an_interval_is_refused_for_a_method_without_one(bench):
    b, V = bench
    with pytest.raises(pj.PulseInputError, match="method 'naive' has no valid interval, so it cannot use "
                                                 "stop='certified'"):
        Selector(b.models, 400, 100, method="naive", batch_size=B, V=V, stop="certified")


def test_select_takes_stop_on_the_command_line(bench, tmp_path, capsys, monkeypatch):
    """``select --stop budget`` spends the budget, ``--stop certified`` (the default) stops at the
    certificate and the report says what it certifies."""
    b, _ = bench
    models = tmp_path / "models.txt"
    models.write_text("\n".join(b.models))
    scorer = tmp_path / "my_scorer.py"
    np.save(tmp_path / "scores.npy", b.scores)
    scorer.write_text("import numpy as np, pathlib\n"
                      f"S = np.load({str(tmp_path / 'scores.npy')!r})\n"
                      f"M = pathlib.Path({str(models)!r}).read_text().split()\n"
                      "def evaluate(model, ids):\n    return S[M.index(model), ids].tolist()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    common = ["select", "--models", str(models), "--examples", "400", "--evaluate", "my_scorer:evaluate",
              "--method", "ucbe", "--batch-size", "8", "--delta", "0.2", "--quiet"]
    assert cli.main(common + ["--budget", "400", "--log", str(tmp_path / "a.jsonl"), "--stop", "budget"]) == 0
    out = capsys.readouterr().out
    assert "400 of 400 cells evaluated" in out and "Stopping rule `budget` (finished)" in out
    assert cli.main(common + ["--budget", "2400", "--log", str(tmp_path / "b.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "Stopping rule `certified` (stopped)" in out and "is the best model, with probability at least 0.8" in out
    assert cli.main(common + ["--budget", "400", "--log", str(tmp_path / "c.jsonl"), "--no-early-stop"]) == 2
    assert "unrecognized arguments: --no-early-stop" in capsys.readouterr().err
    assert cli.main(common + ["--budget", "400", "--log", str(tmp_path / "d.jsonl"), "--stop", "nope"]) == 2
    assert "--stop: unknown stopping rule 'nope'" in capsys.readouterr().err


def test_claims_of_the_built_in_rules_are_boolean_model_sets():
    inputs = pj.StopInputs(jnp.int32(3), jnp.int32(10), 100, jnp.array([0.1, 0.5, 0.3]), jnp.zeros(3), jnp.ones(3),
                           jnp.bool_(True), jnp.int32(1))
    np.testing.assert_array_equal(pj.when_certified().claim(inputs, None), [False, True, False])
    np.testing.assert_array_equal(pj.spend_budget().claim(inputs, None), [False, False, False])
    not_yet = inputs._replace(certified=jnp.bool_(False), certified_model=jnp.int32(-1))
    np.testing.assert_array_equal(pj.when_certified().claim(not_yet, None), [False, False, False])
