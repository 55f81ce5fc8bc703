"""A stopping rule's claim is paid for by the levels only where its ``upper_models`` says: a plug-in that
leaves it out gets every bound held at once, so a claim about a model the data chose (here the worst)
keeps its stated level (at certification levels, which pay for one fixed model's upper bound, such a
claim's error can exceed delta)."""
import functools

import jax.numpy as jnp
import numpy as np
import pytest

import pulse_jax as pj
from pulse_jax.errors import PulseInputError
from pulse_jax.stopping import StoppingRule
from pulse_jax.stopping.base import EVERY_MODEL, TIE_TOLERANCE, others_max


def _clear_below(inputs):
    """Each model whose upper bound lies below every other model's lower bound."""
    lowest_other_low = -others_max(-inputs.low)
    return inputs.high < lowest_other_low


def _done(inputs, params):
    return jnp.any(_clear_below(inputs))


def _claim(inputs, params):
    below = _clear_below(inputs)
    return below & (jnp.arange(below.shape[0]) == jnp.argmax(below))


def _holds(claimed, true_means, params):
    return bool(claimed.sum() == 1 and true_means[claimed].min() <= true_means.min() + TIE_TOLERANCE)


def _statement(names, delta, params):
    return f"{names[0]} is the worst model" if names else "no model is certified worst yet"


@functools.cache
def worst(**declared):
    return StoppingRule("worst", _done, needs_interval=True, claim=_claim, statement=_statement, holds=_holds,
                        **declared)


def _problem(m=8, n=120, reps_seed=0):
    rng = np.random.default_rng(reps_seed)
    means = np.array([0.30] + [0.40] * (m - 1))       # one worst model, the others 0.1 above it
    scores = (rng.random((m, n)) < means[:, None]).astype(np.float32)
    config = pj.BanditConfig(n_models=m, n_examples=n, budget=m * n, batch_size=8)
    return scores, config


def _worst_by_lucb():
    """The plug-ins of `_problem`'s runs: UCB-E sampled by LUCB, claiming the worst model."""
    return pj.Plugins("ucbe", "lucb", worst())


def test_a_rule_that_leaves_upper_models_out_rests_on_every_bound():
    from pulse_jax import registry

    assert worst().upper_models == EVERY_MODEL
    for name in ("certified", "epsilon_good", "tie_group", "budget"):     # best-model claims, and none
        assert registry.stopping_rule(name).upper_models == 1, name


def test_certification_levels_are_refused_for_a_claim_that_did_not_declare_its_bounds():
    scores, config = _problem()
    with pytest.raises(PulseInputError, match="cs_simultaneous"):
        pj.simulate(scores, config, _worst_by_lucb(), reps=2, params={"cs_simultaneous": 0.0})


def test_a_live_selector_raises_the_levels_for_it(recwarn):
    from pulse_jax.live import Selector

    selector = Selector([f"m{i}" for i in range(8)], 120, 960, method="ucbe", batch_size=8, stop=worst())
    assert float(selector.params.engine.cs_simultaneous) == 1.0


@pytest.mark.slow
def test_a_worst_model_claim_with_the_default_keeps_its_level():
    """300 repetitions of a worst-model claim left at the default (every bound held at once), on 8
    models whose worst is 0.1 below the rest: it claims in (nearly) every repetition, and wrongly at
    most delta = 0.05 plus three standard errors (0.038) of the time, so a real excess fails."""
    scores, config = _problem(n=300)
    claims = pj.simulate(scores, config, _worst_by_lucb(), reps=300, seed=0, progress=False).claims()
    assert claims["stopped_fraction"] >= 0.9, claims
    assert claims["error_rate"] <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 300), claims
