"""A plug-in author's mistakes, each refused in one line naming the plug-in before anything compiles:
no silent wrong result, no raw traceback.

Every case below is a plug-in written as a user would write it, with one mistake. The run goes through
`pulse_jax.simulate` (the checks run before any compilation, so each case costs milliseconds); the
registry's mistakes go through ``package.module:attribute`` names as ``--method`` / ``--rule`` give them.
"""
import textwrap
from typing import NamedTuple

import jax.numpy as jnp
import pytest
from conftest import tiny_problem

import pulse_jax as pj
from pulse_jax import registry
from pulse_jax.errors import PulseInputError
from pulse_jax.protocols import Range
from pulse_jax.stopping.base import best_claim_holds, no_claim_holds

M, N, B = 5, 40, 4
SCORES, _, V = tiny_problem(seed=3, m=M, n=N)
UCBE = pj.ucbe()
INDEX = registry.sampling_rule("ucbe")
CERTIFIED = registry.stopping_rule("certified")
BUDGET = registry.stopping_rule("budget")


class Strength(NamedTuple):
    strength: float = 1.0


class Wordy(NamedTuple):
    strength: str = "high"


class Misnamed(NamedTuple):
    strength: float = 1.0
    RANGES = {"strenght": Range(0.0, 1.0)}


class NanEnd(NamedTuple):
    strength: float = 1.0
    RANGES = {"strength": Range(float("nan"), 2.0)}


class Upside(NamedTuple):
    strength: float = 1.0
    RANGES = {"strength": Range(2.0, 0.5)}


def _state_estimator(**fields):
    """An estimator that keeps a per-model counter (so update / refresh have a state to get wrong)."""
    fields = {"update": lambda s, ledger, pull, n, params: (s.at[pull.model].add(pull.size > 0), ()), **fields}
    return UCBE._replace(name="counter", init=lambda ledger, params: jnp.zeros_like(ledger.obs_sum), **fields)


def _python_counter_choose():
    """A rule that cycles through the models with a Python counter: the counter moves only when the program
    is traced, so every step of a run would choose the same model."""
    calls = [0]

    def choose(state, inputs, params):
        calls[0] += 1
        return jnp.int32(calls[0] % M), state

    return choose


def _python_counter_done():
    """A stopping rule meant to stop after 3 looks, counting them in Python: traced once, it answers the
    same at every look (here: stop at the first)."""
    looks = [0]

    def done(inputs, params):
        looks[0] += 1
        return jnp.asarray(looks[0] >= 3) | (inputs.spent >= inputs.budget)

    return done


def _rule(**fields):
    return INDEX._replace(name="my_rule", **fields)


def _stop(**fields):
    return CERTIFIED._replace(name="my_stop", **fields)


# (id, estimator, rule, stop, the words the one-line refusal must hold)
CASES = [
    # -- estimators: fields
    ("estimator name empty", UCBE._replace(name=""), INDEX, BUDGET, "name must be a non-empty string"),
    ("estimator function not callable", UCBE._replace(name="e", estimate=3), INDEX, BUDGET, "'e': estimate must be a function"),
    ("uses_predictions not a bool", UCBE._replace(name="e", uses_predictions="yes"), INDEX, BUDGET, "uses_predictions must be True or False"),
    ("n_sequences zero", UCBE._replace(name="e", n_sequences=0), INDEX, BUDGET, "n_sequences must be >= 1"),
    ("n_sequences text", UCBE._replace(name="e", n_sequences="1"), INDEX, BUDGET, "n_sequences must be an integer"),
    ("params a dict", UCBE._replace(name="e", params={"a": 1.0}), INDEX, BUDGET, "params must be () or a NamedTuple"),
    ("params a plain tuple", UCBE._replace(name="e", params=(1.0,)), INDEX, BUDGET, "got a plain tuple"),
    ("params field not a number", UCBE._replace(name="e", params=Wordy()), INDEX, BUDGET, "field 'strength' must be a number"),
    ("RANGES names no field", UCBE._replace(name="e", params=Misnamed()), INDEX, BUDGET, "RANGES names 'strenght'"),
    ("settings a list", UCBE._replace(name="e", settings=[("k", 1)]), INDEX, BUDGET, "settings must be a tuple"),
    ("settings not pairs", UCBE._replace(name="e", settings=("k", 1)), INDEX, BUDGET, "settings must be a tuple of (name, value) pairs"),
    # -- estimators: functions
    ("estimate of the wrong shape", UCBE._replace(name="e", estimate=lambda s, l, p: l.obs_sum[:, None]), INDEX, BUDGET, "estimate returned float32[5,1]"),
    ("estimate of integers", UCBE._replace(name="e", estimate=lambda s, l, p: l.n_obs), INDEX, BUDGET, "expected one estimate per model"),
    ("init raises", UCBE._replace(name="e", init=lambda l, p: 1 / 0), INDEX, BUDGET, "init fails on this run's shapes: ZeroDivisionError"),
    ("update returns the state alone", _state_estimator(update=lambda s, l, pull, n, p: s), INDEX, BUDGET, "expected a (state, info) pair"),
    ("update changes the state's shape", _state_estimator(update=lambda s, l, pull, n, p: (s[:2], ())), INDEX, BUDGET, "update returned the state as"),
    ("update changes the state on an empty pull", _state_estimator(update=lambda s, l, pull, n, p: (s + 1.0, ())), INDEX, BUDGET, "changed the state on an empty pull"),
    ("refresh changes the state's dtype", _state_estimator(refresh=lambda s, l, n, p: s.astype(jnp.int32)), INDEX, BUDGET, "refresh returned the state as"),
    ("radius of the wrong shape", UCBE._replace(name="e", radius=lambda s, l, n, d, p: jnp.zeros(3)), INDEX, BUDGET, "one half-width per model"),
    ("proxies a pair", UCBE._replace(name="e", proxies=lambda s, l, pull, n, p: (pull.scores[None], pull.scores[None])), INDEX, BUDGET, "expected a (Y, lower, width) triple"),
    ("proxies without the sequence axis", UCBE._replace(name="e", proxies=lambda s, l, pull, n, p: (pull.scores, 0 * pull.scores, 1 + 0 * pull.scores)), INDEX, BUDGET, "with n_sequences x batch_size entries"),
    ("proxies outside their declared range", UCBE._replace(name="e", proxies=lambda s, l, pull, n, p: (2 * pull.scores[None] + 0.5, 0 * pull.scores[None], 1 + 0 * pull.scores[None])), INDEX, BUDGET, "outside its declared range"),
    ("proxies with width 0", UCBE._replace(name="e", proxies=lambda s, l, pull, n, p: (0 * pull.scores[None], 0 * pull.scores[None], 0 * pull.scores[None])), INDEX, BUDGET, "every width must be > 0"),
    ("proxies not finite", UCBE._replace(name="e", proxies=lambda s, l, pull, n, p: (pull.scores[None] / 0, 0 * pull.scores[None], 1 + 0 * pull.scores[None])), INDEX, BUDGET, "not finite"),
    ("draw_weights of the wrong shape", UCBE._replace(name="e", draw_weights=lambda preds, unseen, p: jnp.ones(3)), INDEX, BUDGET, "one weight per example"),
    # -- sampling rules
    ("rule without choose", UCBE, pj.SamplingRule(name="my_rule"), BUDGET, "'my_rule': choose must be a function"),
    ("choose names model m", UCBE, _rule(choose=lambda s, i, p: (jnp.int32(M), s)), BUDGET, f"returned model {M}"),
    ("choose names model -2", UCBE, _rule(choose=lambda s, i, p: (jnp.int32(-2), s)), BUDGET, "returned model -2"),
    ("choose ignores inputs.active", UCBE, _rule(choose=lambda s, i, p: (jnp.argmax(i.estimates).astype(jnp.int32), s)), BUDGET, "while inputs.active marks it as not pullable"),
    ("choose counts its calls in Python", UCBE, _rule(choose=_python_counter_choose()), BUDGET, "gives two answers on the same inputs"),
    ("done counts its looks in Python", UCBE, INDEX, BUDGET._replace(name="my_stop", done=_python_counter_done()), "gives two answers on the same inputs"),
    ("choose reads bounds it was not given", UCBE, _rule(choose=lambda s, i, p: (jnp.argmax(i.high).astype(jnp.int32), s)), BUDGET, "without declaring needs_interval=True"),
    ("choose returns a float", UCBE, _rule(choose=lambda s, i, p: (jnp.float32(0), s)), BUDGET, "the model to pull as an integer scalar"),
    ("choose returns the model alone", UCBE, _rule(choose=lambda s, i, p: jnp.int32(0)), BUDGET, "expected a (model, state) pair"),
    ("choose changes the rule's state", UCBE, _rule(init=lambda c: jnp.zeros(2), choose=lambda s, i, p: (jnp.int32(0), s[:1])), BUDGET, "choose returned the state as"),
    ("update changes the rule's state", UCBE, _rule(init=lambda c: jnp.zeros(2), update=lambda s, m, k: jnp.zeros(3)), BUDGET, "update returned the state as"),
    ("eligible of the wrong shape", UCBE, _rule(eligible=lambda s: jnp.ones(2, bool)), BUDGET, "one flag per model"),
    ("needs_interval an integer", UCBE, _rule(needs_interval=1), BUDGET, "needs_interval must be True or False"),
    ("rule init raises", UCBE, _rule(init=lambda c: c.nothing), BUDGET, "init fails on this run's configuration: AttributeError"),
    # -- stopping rules
    ("stop without done", UCBE, INDEX, pj.StoppingRule(name="my_stop"), "'my_stop': done must be a function"),
    ("done reads bounds it was not given", UCBE, INDEX, _stop(needs_interval=False, done=lambda i, p: jnp.max(i.low) > 0.5), "without declaring needs_interval=True"),
    ("claim without holds", UCBE, INDEX, _stop(claim=lambda i, p: jnp.zeros(i.estimates.shape, bool).at[0].set(True), holds=no_claim_holds), "holds is missing"),
    ("upper_models text", UCBE, INDEX, _stop(upper_models="2"), "upper_models must be an integer"),
    ("upper_models zero", UCBE, INDEX, _stop(upper_models=0), "upper_models must be between 1 and the number of models"),
    ("upper_models beyond the models", UCBE, INDEX, _stop(upper_models=M + 1), "upper_models must be between 1"),
    ("holds raises", UCBE, INDEX, _stop(holds=lambda c, t, p: t[5000]), "holds fails on concrete values"),
    ("holds answers in words", UCBE, INDEX, _stop(holds=lambda c, t, p: "yes"), "holds returned str 'yes'; expected True or False"),
    ("done of the wrong shape", UCBE, INDEX, _stop(done=lambda i, p: i.low > 0), "one flag for the run"),
    ("claim of the wrong shape", UCBE, INDEX, _stop(claim=lambda i, p: jnp.bool_(True), holds=best_claim_holds), "one flag per model"),
    ("statement raises", UCBE, INDEX, _stop(statement=lambda names, delta, p: names[3]), "statement fails for names="),
    ("statement not text", UCBE, INDEX, _stop(statement=lambda names, delta, p: 42), "statement returned int 42"),
    # -- mistakes that ran silently with harm: each refused in one line naming the plug-in and the field
    ("estimate not finite", UCBE._replace(name="e", estimate=lambda s, l, p: l.obs_sum * jnp.nan), INDEX, BUDGET, "'e': estimate returned nan for model 0"),
    ("draw_weights negative", UCBE._replace(name="e", draw_weights=lambda preds, unseen, p: preds - 0.5), INDEX, BUDGET, "'e': draw_weights returned -"),
    ("eligible leaves no model", UCBE, _rule(eligible=lambda s: jnp.zeros(M, bool)), BUDGET, "'my_rule': eligible leaves no model eligible"),
    ("statement of three lines", UCBE, INDEX, _stop(statement=lambda names, delta, p: "one\ntwo\nthree"), "'my_stop': statement returned several lines"),
    ("focus reads bounds it was not given", UCBE, INDEX, BUDGET._replace(name="my_stop", focus=lambda i, p: i.low > 0.5), "'my_stop': focus reads inputs.low / inputs.high without declaring needs_interval=True"),
    ("Range with a NaN end", UCBE._replace(name="e", params=NanEnd()), INDEX, BUDGET, "'e': params RANGES['strength'] has a NaN end"),
    ("Range low above high", UCBE._replace(name="e", params=Upside()), INDEX, BUDGET, "'e': params RANGES['strength'] has low 2 above high 0.5"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_plugin_mistake_is_refused_in_one_line_naming_the_plugin(case):
    _, estimator, rule, stop, needle = case
    config = pj.BanditConfig(n_models=M, n_examples=N, budget=80, batch_size=B)
    with pytest.raises(PulseInputError) as err:
        pj.simulate(SCORES, config, pj.Plugins(estimator, rule, stop), V=V, reps=2)
    message = str(err.value)
    assert needle in message and "\n" not in message, message
    named = [getattr(p, "name", None) for p in (estimator, rule, stop) if p is not None]
    assert any(f"{name!r}" in message for name in named if name) or "name must be" in message, message


def test_there_are_at_least_forty_mistakes_in_the_suite():
    assert len(CASES) + len(REGISTRY_CASES) >= 40


# -- the registry: names that resolve to something that is not a plug-in

PLUGIN_MODULE = textwrap.dedent("""
    import pulse_jax as pj

    def needs_an_argument(strength):
        return pj.ucbe()

    def raises():
        raise RuntimeError("no such backend")

    def returns_a_rule():
        from pulse_jax import registry
        return registry.sampling_rule("lucb")

    NOT_A_PLUGIN = 42
""")

REGISTRY_CASES = [
    ("estimator", "os:system", "'os:system' is a function that needs arguments"),
    ("estimator", "json:dumps", "'json:dumps' is a function that needs arguments"),
    ("estimator", "my_plugins:needs_an_argument", "is a function that needs arguments"),
    ("estimator", "my_plugins:raises", "'my_plugins:raises' raised RuntimeError: no such backend"),
    ("estimator", "my_plugins:returns_a_rule", "is a SamplingRule, not an estimator"),
    ("sampling rule", "my_plugins:NOT_A_PLUGIN", "is an int, not a sampling rule"),
    ("stopping rule", "my_plugins:nowhere", "has no attribute 'nowhere'"),
]


@pytest.mark.parametrize("kind, spec, needle", REGISTRY_CASES, ids=[c[1] for c in REGISTRY_CASES])
def test_a_name_that_is_not_a_plugin_is_refused_in_one_line(tmp_path, monkeypatch, kind, spec, needle):
    (tmp_path / "my_plugins.py").write_text(PLUGIN_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PulseInputError) as err:
        registry.resolve(kind, spec, "--method")
    assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_os_system_is_never_called(tmp_path, monkeypatch):
    import os

    called = []
    monkeypatch.setattr(os, "system", lambda command: called.append(command))
    with pytest.raises(PulseInputError):
        registry.resolve("estimator", "os:system", "--method")
    assert called == []


def test_a_claim_that_holds_raising_later_is_one_line_too():
    """``holds`` runs on the host after a simulation (false claims are counted): a failure there is one
    line naming the rule, as at the check."""
    from pulse_jax.engine import value_checks

    stop = _stop(holds=lambda claimed, true_means, params: claimed["x"])
    with pytest.raises(PulseInputError, match="stopping rule 'my_stop': holds fails on concrete values"):
        value_checks.check_holds(stop, SCORES.mean(1) > 0, SCORES.mean(1), ())


def test_every_built_in_passes_the_value_checks():
    """The built-ins skip the concrete-value checks in a run (`value_checks.written_by_user`) because they
    pass them: checked here, each on a run of its own kind."""
    from pulse_jax.engine import value_checks
    from pulse_jax.estimators import base as estimators
    from pulse_jax.rules import base as rules
    from pulse_jax.stopping import base as stops

    for name, factory in estimators.built_ins().items():
        estimator = factory()
        assert not value_checks.written_by_user(estimator, estimators.built_ins()), name
        value_checks.check_estimator_values(estimator, M, N, B, estimator.params)
    for name, factory in rules.built_ins().items():
        config, rule = pj.BanditConfig(n_models=M, n_examples=N, budget=80, batch_size=B), factory()
        assert not value_checks.written_by_user(rule, rules.built_ins()), name
        value_checks.check_rule_values(rule, config, rule.params)
    for name, factory in stops.built_ins().items():
        try:
            stop = factory()
        except TypeError:      # top_k(k): a factory that takes its size
            stop = factory(2)
        config = pj.BanditConfig(n_models=M, n_examples=N, budget=80, batch_size=B)
        value_checks.check_stop_values(stop, config, stop.params)


def test_a_built_in_with_needs_interval_switched_off_is_checked_as_user_code():
    from pulse_jax.engine import value_checks
    from pulse_jax.stopping import base as stops

    switched = registry.stopping_rule("epsilon_good")._replace(needs_interval=False)
    assert value_checks.written_by_user(switched, stops.built_ins())
    config = pj.BanditConfig(n_models=M, n_examples=N, budget=80, batch_size=B)
    with pytest.raises(PulseInputError, match="'epsilon_good': done reads inputs.low / inputs.high without declaring"):
        pj.simulate(SCORES, config, pj.Plugins(UCBE, INDEX, switched), V=V, reps=2)


def test_importing_the_engine_loads_no_built_in_plugin():
    import subprocess
    import sys

    code = ("import sys, pulse_jax.engine, pulse_jax.registry\n"
            "kinds = ('pulse_jax.estimators.', 'pulse_jax.rules.', 'pulse_jax.stopping.')\n"
            "print(sorted(m for m in sys.modules if m.startswith(kinds) and not m.endswith('.base')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
    # and a name still resolves (its kind's built-ins load then)
    assert registry.estimator("pulse").name == "pulse"
