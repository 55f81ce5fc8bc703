"""Plug-ins defined here, outside the package, run through simulate, sweep, Selector and the CLI.

An estimator, a sampling rule and a stopping rule are written below exactly as a user would write
them in their own module; nothing in pulse_jax knows their names.
"""
import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pulse_jax.live import journal
from conftest import tiny_problem

import pulse_jax as pj
from pulse_jax import cli, synthetic
from pulse_jax.stats import factorization
from pulse_jax.errors import PulseInputError
from pulse_jax.stats.ties import PULL, random_argmax, tie_uniform

COMPILES = []   # XLA backend compilations, as JAX's own monitoring reports them
jax.monitoring.register_event_duration_secs_listener(
    lambda event, *args, **kwargs: COMPILES.append(event) if event.endswith("backend_compile_duration") else None)


# ----------------------------------------------------------------------------- the plug-ins


def negated_mean() -> pj.Estimator:
    """One minus the sample mean: an estimator that prefers the *worst* model (no interval; its estimates
    stay in [0, 1], as the checks before compiling require of every estimate)."""
    base = pj.ucbe()
    return base._replace(name="negated_mean",
                         estimate=lambda state, ledger, params: 1.0 - ledger.obs_sum / ledger.n_obs,
                         proxies=None, n_sequences=1)


NEGATED = negated_mean()


def _round_robin_choose(state, inputs, params):
    """The pullable model with the fewest observed cells (random ties)."""
    del params
    u = tie_uniform(inputs.tie_key, inputs.t, PULL)
    fewest = jnp.where(inputs.active, -inputs.n_obs, jnp.iinfo(jnp.int32).min)
    return random_argmax(u, fewest, inputs.model_order), state + 1   # the state counts its choices


ROUND_ROBIN = pj.SamplingRule("round_robin", _round_robin_choose, init=lambda config: jnp.int32(0))


def _narrow_leader(inputs, params):
    """Stop once the leader's interval is narrower than 0.3 (its guarantee: the CS's, at every look)."""
    del params
    leader = jnp.argmax(inputs.estimates)
    return (inputs.high[leader] - inputs.low[leader]) < 0.3


NARROW_LEADER = pj.StoppingRule("narrow_leader", _narrow_leader, needs_interval=True)


# ----------------------------------------------------------------------------- the tests


@pytest.fixture(scope="module")
def problem():
    scores, train, V = tiny_problem(seed=11, m=6, n=60, rank=3)
    return scores, train, V


def test_plugins_run_through_simulate(problem):
    scores, _, V = problem
    config = pj.BanditConfig(n_models=6, n_examples=60, budget=6 * 4 + 120, batch_size=4)
    res = pj.simulate(scores, config, pj.Plugins("pulse", ROUND_ROBIN), V=V, reps=6, seed=2)
    pulls = np.stack([np.bincount(c[c >= 0], minlength=6) for c in res.chosen])
    assert (pulls.max(axis=1) - pulls.min(axis=1) <= 1).all()     # round robin: balanced to one batch
    neg = pj.simulate(scores, config, NEGATED, reps=6, seed=2)
    assert neg.method == "negated_mean"
    seen = neg.n_obs < 60                                  # (a model seen whole is known exactly)
    assert np.all((neg.estimates[seen] >= 0) & (neg.estimates[seen] <= 1))
    assert np.corrcoef(neg.estimates[seen], np.broadcast_to(neg.true_means, neg.estimates.shape)[seen])[0, 1] < 0
    whole = pj.BanditConfig(n_models=6, n_examples=60, budget=6 * 60, batch_size=4)
    stopped = pj.simulate(scores, whole, pj.Plugins("ucbe", ROUND_ROBIN, NARROW_LEADER), reps=6, seed=2)
    full = pj.simulate(scores, whole, pj.Plugins("ucbe", ROUND_ROBIN), reps=6, seed=2)
    assert (stopped.spent[:, -1] <= full.spent[:, -1]).all() and (stopped.spent[:, -1] < full.spent[:, -1]).any()
    with pytest.raises(PulseInputError, match="negated_mean.*no valid interval.*narrow_leader"):
        pj.simulate(scores, config, pj.Plugins(NEGATED, ROUND_ROBIN, NARROW_LEADER), reps=2)


# Integration: the default run keeps "new values compile nothing" for the engine's, an estimator's and a
# stopping rule's numbers (test_sweep.py, test_params.py, test_certificates.py); this repeats it on
# plug-in objects, with two more compiled runs.
@pytest.mark.integration
def test_plugins_sweep_without_recompiling(problem):
    scores, _, V = problem
    config = pj.BanditConfig(n_models=6, n_examples=60, budget=6 * 4 + 120, batch_size=4, refit_every=4)
    plugins = pj.Plugins("pulse", pj.top_two(0.6), NARROW_LEADER)
    first = pj.sweep(scores, config, plugins, {"refit_lr": [0.05, 0.2], "delta": [0.1, 0.3]}, reps=3, V=V)
    before = len(COMPILES)
    again = pj.sweep(scores, config, plugins, {"refit_lr": [0.01, 0.5], "delta": [0.05, 0.2]}, reps=3, V=V, seed=4)
    assert len(COMPILES) == before          # new parameter values and seed: nothing compiled
    assert len(first.results) == len(again.results) == 4
    custom = pj.BanditConfig(n_models=6, n_examples=60, budget=6 * 4 + 120, batch_size=4)
    pj.sweep(scores, custom, pj.Plugins(NEGATED, ROUND_ROBIN), {"delta": [0.5, 0.2]}, reps=2)
    before = len(COMPILES)
    pj.sweep(scores, custom, pj.Plugins(NEGATED, ROUND_ROBIN), {"delta": [0.1, 0.3]}, reps=2)   # same shape, new values
    assert len(COMPILES) == before


@pytest.fixture(scope="module")
def bench():
    b = synthetic.make_benchmark(seed=0, n_models=8, n_examples=300, n_train=60)
    return b, factorization.fit_example_embeddings(b.train, rank=4)


def _drive(selector, b):
    while (request := selector.ask()) is not None:
        selector.tell(request, b.scores[request.model_index, list(request.example_index)])
    return selector.result()


def test_selector_runs_the_estimator_object_it_is_given(bench):
    """An estimator passed as an object is the one that runs (not the default of the same name)."""
    b, V = bench
    kw = dict(batch_size=8, seed=3, V=V)
    plain = _drive(pj.Selector(b.models, 300, 8 * 8 + 160, method="ucbe", **kw), b)
    negated = _drive(pj.Selector(b.models, 300, 8 * 8 + 160, method=NEGATED, **kw), b)
    assert negated.leader != plain.leader
    assert negated.leader == negated.models[int(np.argmax(negated.estimates))]
    seen_means = np.array([b.scores[i, [int(e) for e in negated.evaluated[m]]].mean()
                           for i, m in enumerate(negated.models)])
    np.testing.assert_allclose(negated.estimates, 1.0 - seen_means, atol=1e-6)   # its own estimate, not UCB-E's
    assert negated.separated is None                       # it declares no interval
    lower = pj.pulse(variance_bound=1.0)
    sel = pj.Selector(b.models, 300, 8 * 8 + 160, method=lower, **kw)
    assert sel.plugins.estimator is lower and sel._programs.kernel is not None


def test_selector_with_a_custom_rule_equals_simulate(bench):
    b, V = bench
    sel = pj.Selector(b.models, 300, 8 * 8 + 160, method="pulse", batch_size=8, seed=3, V=V, refit_every=7,
                      rule=ROUND_ROBIN)
    chosen = []
    while (request := sel.ask()) is not None:
        sel.tell(request, b.scores[request.model_index, list(request.example_index)])
        if request.step:
            chosen.append(request.model_index)
    config = pj.BanditConfig(n_models=8, n_examples=300, budget=sel.config.budget, batch_size=8, refit_every=7)
    sim = pj.simulate(b.scores, config, pj.Plugins("pulse", ROUND_ROBIN), V=V, reps=1, seed=3)
    np.testing.assert_array_equal(chosen, sim.chosen[0, :len(chosen)])


@pytest.mark.parametrize("change, needle", [
    (dict(params=pj.BanditParams(refit_lr=0.2, cs_simultaneous=0.0)), "refit_lr is 0.1 in the log, 0.2 here"),
    (dict(params={"estimator.fixed_lambda": 0.5}), "estimator.fixed_lambda is None in the log, 0.5 here"),
    (dict(params=pj.BanditParams(init_refit_l2=0.02, cs_simultaneous=0.0)), "init_refit_l2 is 0.01 in the log, 0.02 here"),
    (dict(rule="top_two"), "rule is 'ucbe' in the log, 'top_two' here"),
    (dict(method=pj.pulse(variance_bound=2.0)), "method_settings"),
    (dict(refit_every=9), "refit_every is 7 in the log, 9 here"),
])
def test_resume_with_any_other_parameter_or_plugin_is_refused(bench, tmp_path, change, needle):
    b, V = bench
    log = tmp_path / "run.jsonl"
    kw = dict(method="pulse", batch_size=8, seed=3, V=V, refit_every=7, log=log, rule="ucbe", cs_grid=0)
    first = pj.Selector(b.models, 300, 8 * 8 + 160, **kw)
    request = first.ask()
    first.tell(request, b.scores[request.model_index, list(request.example_index)])
    first.close()
    header = journal.snapshot(log)[0]
    assert header["refit_lr"] == 0.1 and header["rule"] == "ucbe" and "method_settings" in header
    with pytest.raises(PulseInputError, match=needle):
        pj.Selector(b.models, 300, 8 * 8 + 160, **{**kw, **change})
    log2 = tmp_path / "tt.jsonl"
    pj.Selector(b.models, 300, 8 * 8 + 160, **{**kw, "log": log2, "rule": pj.top_two(0.5)}).close()
    with pytest.raises(PulseInputError, match="rule_settings"):    # the same rule with another static setting
        pj.Selector(b.models, 300, 8 * 8 + 160, **{**kw, "log": log2, "rule": pj.top_two(challenger="interval")})
    with pytest.raises(PulseInputError, match=r"rule.leader_fraction is 0.5 in the log, 0.25 here"):   # a rule's number
        pj.Selector(b.models, 300, 8 * 8 + 160, **{**kw, "log": log2, "rule": pj.top_two(0.25)})


def test_cli_takes_plugins_as_module_attribute(problem, tmp_path, capsys):
    """``--method/--rule/--stop package.module:attribute``: this test module's own plug-ins."""
    scores, train, V = problem
    np.savez(tmp_path / "cand.npz", scores=scores)
    np.save(tmp_path / "V.npy", V)
    args = ["simulate", "--scores", str(tmp_path / "cand.npz"), "--embeddings", str(tmp_path / "V.npy"),
            "--method", "ucbe,test_plugins:NEGATED", "--rule", "test_plugins:ROUND_ROBIN", "--stop",
            "test_plugins:NARROW_LEADER", "--reps", "3", "--batch-size", "4", "--budget", "150", "--quiet",
            "--out", str(tmp_path / "out")]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "negated_mean" in out
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert set(summary["methods"]) == {"ucbe", "negated_mean"}
    for bad, needle in ((["--method", "test_plugins:nothing_here"], "has no attribute 'nothing_here'"),
                        (["--rule", "test_plugins:NEGATED"], "is an Estimator, not a sampling rule"),
                        (["--stop", "no_such_module_xyz:rule"], "cannot import module 'no_such_module_xyz'")):
        argv = list(args)
        argv[argv.index(bad[0]) + 1] = bad[1]
        argv[-1] = str(tmp_path / "out_bad")                   # an empty folder: the plug-in is what is refused
        assert cli.main(argv) == 2
        assert needle in capsys.readouterr().err


def test_live_selection_loads_neither_the_simulation_nor_matplotlib():
    code = ("import sys, pulse_jax.live; "
            "print([m for m in ('pulse_jax.simulation', 'pulse_jax.sweeps', 'matplotlib') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
