"""One `Plugins` value (estimator, sampling rule, stopping rule) beside a `BanditConfig` that holds only
numbers and shapes: names resolve where they are given, an estimator alone means the paper's rule and
the whole budget, and a plug-in given to the config is refused in one line saying where it goes."""
import dataclasses

import numpy as np
import pytest

import pulse_jax as pj
from pulse_jax import engine, registry


def test_a_plugins_value_resolves_its_names_and_defaults_to_the_papers_rule_and_budget():
    plugins = pj.Plugins("pulse_hedged", rule="top_two_interval", stop="certified")
    assert plugins.estimator is registry.estimator("pulse_hedged")
    assert (plugins.rule.name, plugins.stop.name) == ("top_two", "certified")
    assert repr(plugins) == "Plugins(estimator='pulse_hedged', rule='top_two', stop='certified')"
    assert engine.as_plugins("ucbe") == pj.Plugins("ucbe", "ucbe", "budget") == pj.Plugins("ucbe")
    assert engine.as_plugins(plugins) is plugins
    assert hash(pj.Plugins("ucbe", "lucb")) == hash(pj.Plugins(registry.estimator("ucbe"), "lucb"))
    with pytest.raises(pj.PulseInputError, match="^Plugins.stop: unknown stopping rule 'certifed'"):
        pj.Plugins("ucbe", stop="certifed")


def test_the_config_holds_numbers_and_shapes_only():
    kinds = (int, float, bool, str, tuple, type(None))
    config = pj.BanditConfig(n_models=3, n_examples=10, budget=30, batch_size=2, snapshot_budgets=(12,))
    for field in dataclasses.fields(config):
        assert isinstance(getattr(config, field.name), kinds), field.name


@pytest.mark.parametrize("field", ["rule", "stop", "method", "estimator"])
def test_a_plugin_given_to_the_config_is_refused_naming_where_it_goes(field):
    with pytest.raises(pj.PulseInputError) as err:
        pj.BanditConfig(n_models=3, n_examples=10, budget=30, batch_size=2, **{field: "ucbe"})
    text = str(err.value)
    assert text.startswith(f"BanditConfig({field}=...)") and "pulse_jax.Plugins(" in text and "\n" not in text
    config = pj.BanditConfig(n_models=3, n_examples=10, budget=30, batch_size=2)
    with pytest.raises(pj.PulseInputError, match=rf"^BanditConfig\({field}=\.\.\.\)"):
        dataclasses.replace(config, **{field: "ucbe"})


def test_an_estimator_alone_runs_as_its_plugins_value_and_the_result_records_them(tmp_path):
    rng = np.random.default_rng(0)
    scores = (rng.random((5, 40)) < np.linspace(0.3, 0.7, 5)[:, None]).astype(np.float32)
    config = pj.BanditConfig(n_models=5, n_examples=40, budget=5 * 4 + 60, batch_size=4)
    alone = pj.simulate(scores, config, "ucbe", reps=3, seed=1)
    spelled = pj.simulate(scores, config, pj.Plugins("ucbe", "ucbe", "budget"), reps=3, seed=1)
    np.testing.assert_array_equal(alone.chosen, spelled.chosen)
    assert alone.plugins == spelled.plugins == pj.Plugins("ucbe") and alone.method == "ucbe"
    lucb = pj.simulate(scores, config, pj.Plugins("ucbe", rule="lucb", stop="certified"), reps=3, seed=1,
                       params={"delta": 0.5})
    assert (lucb.plugins.rule.name, lucb.plugins.stop.name) == ("lucb", "certified")
    assert lucb.claims()["stopped_fraction"] >= 0.0      # the claim is read from the result's own stop
    swept = pj.sweep(scores, config, pj.Plugins("ucbe", rule="lucb"), {"delta": [0.1, 0.3]}, reps=2)
    assert all(r.plugins.rule.name == "lucb" for r in swept.results)
    import json

    swept.write(tmp_path / "sw", figure=False, n_boot=50)
    record = json.loads((tmp_path / "sw" / "provenance.json").read_text())
    assert record["plugins"]["rule"]["name"] == "lucb" and record["method"] == "ucbe"


def test_an_equal_plugins_value_made_anew_reuses_the_compiled_program():
    """Plug-ins are static arguments: a `Plugins` spelled again (names resolve to the same built-in objects)
    runs the program the first one compiled, and another rule compiles its own."""
    from sweep_compiles import count_compiles

    rng = np.random.default_rng(1)
    scores = (rng.random((4, 24)) < np.linspace(0.3, 0.7, 4)[:, None]).astype(np.float32)
    config = pj.BanditConfig(n_models=4, n_examples=24, budget=4 * 4 + 28, batch_size=4)
    first = pj.simulate(scores, config, pj.Plugins("ucbe", rule="lucb"), reps=2, seed=3)
    with count_compiles() as compiles:
        again = pj.simulate(scores, config, pj.Plugins("ucbe", rule="lucb"), reps=2, seed=3)
        assert len(compiles) == 0
        pj.simulate(scores, config, pj.Plugins("ucbe", rule="top_two"), reps=2, seed=3)
        assert len(compiles) >= 1
    np.testing.assert_array_equal(first.chosen, again.chosen)


def test_a_result_made_without_its_plugins_reads_as_spending_the_budget():
    """A `SimulationResult` built by hand or read back from a file (no `plugins`) reports no claim, as the
    whole budget's rule claims nothing, instead of failing on a missing stop."""
    from pulse_jax.analysis.metrics import SimulationResult

    config = pj.BanditConfig(n_models=3, n_examples=10, budget=30, batch_size=2)
    best, spent = np.zeros((2, 3), int), np.tile([6, 8, 10], (2, 1))
    result = SimulationResult("ucbe", config, 0, np.array([0.2, 0.5, 0.4]), best, spent, np.zeros((2, 2), int),
                              np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((2, 3), int), np.zeros((2, 3), int))
    assert result.stop.name == "budget"
    assert result.claims()["stopped_fraction"] == 0.0
