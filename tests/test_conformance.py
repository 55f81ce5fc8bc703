"""Plug-in contracts: every built-in passes the conformance check on a run's shapes; a broken
contract is refused in one line naming the plug-in, the function and the shapes, before compiling."""
import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

import pulse_jax as pj
from pulse_jax import registry, synthetic
from pulse_jax.engine import conformance
from pulse_jax.estimators import observed_mean

SHAPES = dict(n_models=5, n_examples=120, budget=400, batch_size=8)


@pytest.mark.parametrize("estimator", sorted(registry.ESTIMATORS))
@pytest.mark.parametrize("rule", sorted(registry.SAMPLING_RULES))
@pytest.mark.parametrize("stop", sorted(registry.STOPPING_RULES))
def test_every_built_in_plugin_keeps_its_contract(estimator, rule, stop):
    conformance.check_plugins(pj.BanditConfig(**SHAPES), pj.Plugins(estimator, rule, stop))


def _raw(state, ledger, pull, n_examples, params):
    ones = jnp.ones_like(pull.scores)[None]
    return pull.scores[None], 0.0 * ones, ones


def _config():
    return pj.BanditConfig(**SHAPES)


BROKEN = [
    # (what, the rule or stop (`pulse_jax.Plugins` keywords), estimator, the message's expected text)
    ("choose returns a bare index", dict(rule=pj.SamplingRule("bare", lambda s, i, p: jnp.argmax(i.estimates))),
     pj.ucbe(), "sampling rule 'bare': choose returned int32[]; expected a (model, state) pair"),
    ("choose returns a float index", dict(rule=pj.SamplingRule("floaty", lambda s, i, p: (jnp.float32(1), s))),
     pj.ucbe(), "sampling rule 'floaty': choose returned float32[]; expected the model to pull as an integer "
                "scalar: int[]"),
    ("choose changes its state's shape",
     dict(rule=pj.SamplingRule("grows", lambda s, i, p: (jnp.int32(0), jnp.zeros(3)), init=lambda c: jnp.zeros(2))),
     pj.ucbe(), "sampling rule 'grows': choose returned the state as float32[3]; expected it unchanged in "
                "structure, shape and dtype: float32[2]"),
    ("eligible of the wrong length",
     dict(rule=pj.SamplingRule("few", lambda s, i, p: (jnp.int32(0), s), eligible=lambda s: jnp.ones(3, bool))),
     pj.ucbe(), "sampling rule 'few': eligible returned bool[3]; expected one flag per model: bool[5]"),
    ("settings as a list", dict(rule=pj.SamplingRule("listy", lambda s, i, p: (jnp.int32(0), s), settings=[("a", 1)])),
     pj.ucbe(), "sampling rule 'listy': settings must be a tuple of (name, value) pairs, got [('a', 1)]"),
    ("done per model", dict(stop=pj.StoppingRule("vec", lambda i, p: i.estimates > 0.5)),
     pj.ucbe(), "stopping rule 'vec': done returned bool[5]; expected one flag for the run: bool[]"),
    ("done raises", dict(stop=pj.StoppingRule("oops", lambda i, p: i.nothing)),
     pj.ucbe(), "stopping rule 'oops': done fails on this run's shapes: AttributeError: 'StopInputs' object has no "
                "attribute 'nothing'"),
    ("claim as an index", dict(stop=pj.StoppingRule("idx", lambda i, p: i.certified, claim=lambda i, p: jnp.int32(0))),
     pj.ucbe(), "stopping rule 'idx': claim returned int32[]; expected one flag per model: bool[5]"),
    ("estimator fields in the wrong order", {}, pj.Estimator("x", lambda ledger: (), lambda *a: a),
     "estimator 'x': uses_predictions must be True or False"),
    ("estimate of one number", {}, pj.Estimator(name="scalar", estimate=lambda s, l, q: jnp.float32(0.5)),
     "estimator 'scalar': estimate returned float32[]; expected one estimate per model: float[5]"),
    ("proxies of the wrong length", {}, pj.Estimator(name="short", proxies=lambda s, l, p, n, q: (p.scores[:3][None],) * 3),
     "estimator 'short': proxies returned float32[1,3]; expected Y with n_sequences x batch_size entries: "
     "float[1,8]"),
    ("update returns the state alone", {}, pj.Estimator(name="lone", update=lambda s, l, p, n, q: s),
     "estimator 'lone': update returned tuple of []; expected a (state, info) pair"),
]




@dataclasses.dataclass
class _DataclassParams:
    strength: float = 1.0


class _Opaque:
    """Not a pytree, not a NamedTuple."""


_NT = "must be () or a NamedTuple of numbers"
BROKEN += [
    ("estimator params as a dataclass", {}, pj.Estimator(name="dc", proxies=_raw, params=_DataclassParams()),
     f"estimator 'dc': params {_NT}"),
    ("estimator params as a list", {}, pj.Estimator(name="listed", proxies=_raw, params=[1.0]),
     f"estimator 'listed': params {_NT}"),
    ("estimator params as a dict", {}, pj.Estimator(name="mapped", proxies=_raw, params={"strength": 1.0}),
     f"estimator 'mapped': params {_NT}"),
    ("estimator params as an object", {}, pj.Estimator(name="opaque", proxies=_raw, params=_Opaque()),
     f"estimator 'opaque': params {_NT}"),
    ("estimator params as a plain tuple", {}, pj.Estimator(name="plain", proxies=_raw, params=(1.0,)),
     f"estimator 'plain': params {_NT}"),
    ("a params field that is not a number", {},
     pj.Estimator(name="texty", proxies=_raw, params=pj.PulseParams(fixed_lambda="half")),
     "estimator 'texty': params field 'fixed_lambda' must be a number"),
    ("rule params as a dict", dict(rule=pj.ucb_index_rule()._replace(name="ucb_dict", params={"exploration": 1.0})),
     pj.ucbe(), f"sampling rule 'ucb_dict': params {_NT}"),
    ("stop params as a list", dict(stop=pj.StoppingRule("listy_stop", lambda i, p: i.certified, params=[0.1])),
     pj.ucbe(), f"stopping rule 'listy_stop': params {_NT}"),
    ("statement returns a number", dict(stop=pj.StoppingRule("mute", lambda i, p: i.certified,
                                                             statement=lambda names, delta, p: 3)),
     pj.ucbe(), "stopping rule 'mute': statement returned int 3"),
    ("statement raises", dict(stop=pj.StoppingRule("loud", lambda i, p: i.certified,
                                                   statement=lambda names, delta, p: names[0].upper())),
     pj.ucbe(), "stopping rule 'loud': statement fails for names=[]: IndexError"),
]


@pytest.mark.parametrize("what, config, estimator, message", BROKEN, ids=[b[0] for b in BROKEN])
def test_a_broken_contract_is_one_line_naming_plugin_function_and_shapes(what, config, estimator, message):
    with pytest.raises(pj.PulseInputError) as err:
        conformance.check_plugins(_config(), pj.Plugins(estimator, **config))
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("params", [_DataclassParams(), [1.0], {"strength": 1.0}, _Opaque()],
                         ids=["dataclass", "list", "dict", "object"])
def test_bad_params_are_one_line_in_simulate_sweep_and_the_selector(params):
    """Nothing hashes the plug-in before its params are checked: one line, never ``unhashable type``."""
    bench = synthetic.make_benchmark(seed=0, n_models=5, n_examples=120, n_train=20)
    bad = pj.Estimator(name="bad_params", proxies=_raw, params=params)
    for call in (lambda: pj.simulate(bench.scores, _config(), bad, reps=2),
                 lambda: pj.sweep(bench.scores, _config(), bad, {"delta": [0.1]}, reps=2),
                 lambda: pj.Selector(bench.models, 120, 400, method=bad, batch_size=8)):
        with pytest.raises(pj.PulseInputError) as err:
            call()
        text = str(err.value)
        assert text.startswith("estimator 'bad_params': params must be () or a NamedTuple") and "\n" not in text
        assert "unhashable" not in text


def test_simulate_refuses_a_broken_plugin_before_compiling():
    bench = synthetic.make_benchmark(seed=0, n_models=5, n_examples=120, n_train=20)
    rule = pj.SamplingRule("bare", lambda s, i, p: jnp.argmax(i.estimates))
    with pytest.raises(pj.PulseInputError, match="sampling rule 'bare': choose returned int32"):
        pj.simulate(bench.scores, _config(), pj.Plugins("ucbe", rule), reps=2)
    with pytest.raises(pj.PulseInputError, match="stopping rule 'vec': done returned bool"):
        pj.Selector(bench.models, 120, 400, method="ucbe", batch_size=8,
                    stop=pj.StoppingRule("vec", lambda i, p: i.estimates > 0.5))


def test_an_estimator_built_by_keyword_takes_the_no_op_defaults():
    """An estimator that writes only its proxies is the mean of the observed cells with UCB-E's anytime
    interval: on shared draws it makes UCB-E's choices and estimates, and has no fixed-count radius."""
    bench = synthetic.make_benchmark(seed=2, n_models=5, n_examples=120, n_train=20)
    mean_only = pj.Estimator(name="mean_only", proxies=_raw)
    assert not mean_only.uses_predictions and mean_only.has_interval
    config = _config()
    mine = pj.simulate(bench.scores, config, pj.Plugins(mean_only, "lucb"), reps=4, seed=1)
    ucbe = pj.simulate(bench.scores, config, pj.Plugins("ucbe", "lucb"), reps=4, seed=1)
    np.testing.assert_array_equal(mine.chosen, ucbe.chosen)
    np.testing.assert_array_equal(mine.estimates, ucbe.estimates)
    assert np.isnan(mine.radius).all() and not np.isnan(ucbe.radius).all()


def test_observed_mean_is_the_mean_of_the_observed_cells():
    from pulse_jax.estimators import ModelSums

    ledger = ModelSums(jnp.array([2, 0, 4]), jnp.array([1, 0, 1]), jnp.array([1.0, 0.0, 3.0]), jnp.zeros(3), jnp.zeros(3),
                    jnp.zeros(3))
    np.testing.assert_allclose(observed_mean(ledger), [0.5, 0.0, 0.75])
