"""A run's numbers: each plug-in owns its own (a params NamedTuple), addressed by path, traced (no
recompiles), range-checked; the earlier BanditParams fields keep working with a DeprecationWarning."""
import json
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pulse_jax as pj
from pulse_jax import engine
from pulse_jax.live import journal, legacy_jsonl
from pulse_jax.errors import PulseInputError
from pulse_jax.engine.params import run_params
from sweep_compiles import count_compiles
from conftest import tiny_problem

PULSE = (pj.pulse(), pj.ucb_index_rule(), pj.spend_budget())


class ShrinkParams(NamedTuple):
    strength: float = 8.0

    RANGES = {"strength": (0.0, math.inf, True, False, False)}


def _raw(state, ledger, pull, n_examples, params):
    ones = jnp.ones_like(pull.scores)[None]
    return pull.scores[None], 0.0 * ones, ones


def _shrunk(state, ledger, params):
    return (ledger.obs_sum + 0.5 * params.strength) / (ledger.n_obs + params.strength)


SHRUNK = pj.Estimator(name="shrunk", estimate=_shrunk, proxies=_raw, params=ShrinkParams())


def test_names_and_paths_resolve_and_mistakes_are_one_line():
    p = run_params(PULSE)
    assert p.path_of("delta") == "engine.delta" and p.path_of("exploration") == "rule.exploration"
    assert p.path_of("fixed_lambda") == "estimator.fixed_lambda" and p.value("rule.exploration") == 1.0
    assert math.isnan(p.value("fixed_lambda")) and p.delta == p.engine.delta == 0.05
    q = p.replace({"exploration": 0.5, "estimator.fixed_lambda": 0.25, "engine.delta": 0.1})
    assert (q.rule.exploration, q.estimator.fixed_lambda, q.delta) == (0.5, 0.25, 0.1)
    assert q.to_dict()["rule"] == {"exploration": 0.5} and q.to_dict()["engine"]["delta"] == 0.1
    for name, needle in (("explor", "unknown parameter 'explor'; this run's are engine.delta"),
                         ("rule.leader_fraction", "unknown parameter 'rule.leader_fraction'"),
                         ("motor.delta", "unknown parameter 'motor.delta'")):
        with pytest.raises(PulseInputError, match=needle) as err:
            p.path_of(name)
        assert "\n" not in str(err.value)
    both = run_params((pj.pulse(), pj.top_two(), pj.spend_budget()))
    assert set(both.paths()) >= {"rule.exploration", "rule.leader_fraction", "estimator.fixed_lambda"}


def test_values_are_checked_against_the_plugins_declared_ranges():
    with pytest.raises(PulseInputError, match=r"estimator.fixed_lambda: fixed_lambda=1.2 is out of range; it must "
                                              r"lie in \[0, 1\] or NaN"):
        run_params(PULSE, {"fixed_lambda": 1.2})
    with pytest.raises(PulseInputError, match=r"rule.exploration: exploration=-1.0 is out of range"):
        run_params(PULSE, {"rule.exploration": -1.0})
    with pytest.raises(PulseInputError, match=r"params: delta=0.0 is out of range"):
        run_params(PULSE, {"delta": 0.0})
    with pytest.raises(PulseInputError, match=r"params.rule must be the 'ucbe' plug-in's params"):
        run_params(PULSE, pj.RunParams(pj.BanditParams(), pj.PulseParams(), pj.PulseParams(), ()))
    assert math.isnan(run_params(PULSE, {"fixed_lambda": float("nan")}).estimator.fixed_lambda)


def test_an_estimators_own_number_sweeps_without_recompiling_and_changes_what_it_estimates():
    """``estimator.strength`` reaches ``estimate``: each sweep point equals simulate with its value, a
    second sweep over new values compiles nothing, and the shrinkage moves the estimates towards 1/2."""
    scores, _, V = tiny_problem(seed=6, m=5, n=200)
    config = pj.BanditConfig(n_models=5, n_examples=200, budget=5 * 8 + 200, batch_size=8)
    with count_compiles() as compiles:
        result = pj.sweep(scores, config, SHRUNK, {"estimator.strength": [0.0, 50.0]}, reps=4)
        first = len(compiles)
        pj.sweep(scores, config, SHRUNK, {"strength": [1.0, 20.0]}, reps=4, seed=3)
        assert len(compiles) == first                           # new values: nothing compiled
    assert result.axes == ("estimator.strength",) and result.values(1) == {"estimator.strength": 50.0}
    alone = pj.simulate(scores, config, SHRUNK, reps=4, params={"strength": 50.0})
    np.testing.assert_array_equal(alone.estimates, result.results[1].estimates)
    # 50 pseudo-cells against 8-100 observed cells per model pull the estimates about halfway to 1/2
    # (the sample paths differ, so compare the average distance from 1/2, not model by model).
    plain, shrunk = (np.abs(r.estimates - 0.5).mean() for r in result.results)
    assert shrunk < 0.8 * plain, (shrunk, plain)
    ucbe = pj.simulate(scores, config, "ucbe", reps=4)
    np.testing.assert_allclose(result.results[0].estimates, ucbe.estimates, atol=1e-6)   # strength 0: the mean
    with pytest.raises(PulseInputError, match="estimator.strength: strength=-1.0 is out of range"):
        pj.sweep(scores, config, SHRUNK, {"strength": [-1.0]}, reps=2)


def test_live_logs_record_the_plugins_numbers(tmp_path):
    scores, _, V = tiny_problem(seed=8, m=4, n=60)
    models = [f"m{i}" for i in range(4)]
    log = tmp_path / "run.jsonl"

    def selector(**kw):
        return pj.Selector(models, 60, 4 * 4 + 40, method="pulse", batch_size=4, V=V, refit_every=3, log=log,
                           stop="budget", **kw)

    first = selector(exploration=0.5)
    for _ in range(5):
        request = first.ask()
        first.tell(request, scores[request.model_index, list(request.example_index)])
    first.close()
    lines = [json.loads(x) for x in legacy_jsonl.as_jsonl(*journal.snapshot(log)).splitlines()]
    assert lines[0]["rule.exploration"] == 0.5 and lines[0]["estimator.fixed_lambda"] is None
    with pytest.raises(PulseInputError, match="rule.exploration is 0.5 in the log, 1.0 here"):
        selector()


@pytest.mark.integration   # 14-17 s: the second test command keeps the default run within its time
def test_kernel_functions_take_run_params_or_the_engines_bandit_params():
    """The pure kernel accepts a RunParams, or a (stacked) BanditParams with the plug-ins' defaults."""
    scores, _, V = tiny_problem(seed=9, m=4, n=60)
    config = pj.BanditConfig(n_models=4, n_examples=60, budget=4 * 4 + 40, batch_size=4)
    run = engine.make_run(config, "pulse")
    key = jax.random.PRNGKey(2)
    a = run(key, scores, V, pj.BanditParams(delta=0.2))
    b = run(key, scores, V, run_params(PULSE, {"delta": 0.2}))
    np.testing.assert_array_equal(a.steps.chosen, b.steps.chosen)
    np.testing.assert_array_equal(a.estimates, b.estimates)
