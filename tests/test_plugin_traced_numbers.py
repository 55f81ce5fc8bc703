"""A plug-in that uses one of its (traced) params as a fixed value is refused before compiling, in one
line that says what to do, not with JAX's tracer error text."""
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pulse_jax as pj
from pulse_jax.errors import PulseInputError
from pulse_jax.stopping import StoppingRule


class KParams(NamedTuple):
    k: float = 2.0


def _as_size(inputs, params):
    return jax.lax.top_k(inputs.low, int(params.k))[0][-1] > 0.9


def _as_branch(inputs, params):
    if params.k > 1:
        return jnp.any(inputs.low > 0.9)
    return jnp.bool_(False)


def _as_shape(inputs, params):
    return jnp.zeros(params.k).sum() > 1


@pytest.mark.parametrize("done, where", [(_as_size, "where a fixed value is needed"),
                                         (_as_branch, "in a Python `if` or `while`"),
                                         (_as_shape, "where a fixed value is needed")])
def test_a_traced_number_used_as_a_size_or_a_branch_is_named_as_such(done, where):
    rule = StoppingRule("traced_k", done, needs_interval=True, params=KParams())
    scores = (np.random.default_rng(0).random((5, 40)) < 0.5).astype(np.float32)
    config = pj.BanditConfig(n_models=5, n_examples=40, budget=100, batch_size=4)
    with pytest.raises(PulseInputError) as refused:
        pj.simulate(scores, config, pj.Plugins("ucbe", stop=rule), reps=2)
    message = str(refused.value)
    assert message.startswith("stopping rule 'traced_k': done uses a traced number " + where), message
    assert "belongs in the plug-in's fixed settings" in message and "\n" not in message
    assert "Tracer" not in message and "jax" not in message.lower().replace("jax_", "")


def test_a_params_field_no_function_reads_is_refused_naming_it():
    """An estimator that reads a number closed over in its factory, not its params, made a sweep over that
    number give identical points reported as an axis: refused before compiling, naming the field."""
    import dataclasses

    from pulse_jax import registry

    class ShrinkParams(NamedTuple):
        strength: float = 4.0

    ucbe = registry.estimator("ucbe")
    closed_over = 4.0

    def estimate(state, ledger, params):
        return ucbe.estimate(state, ledger, ucbe.params) * closed_over / closed_over   # ignores params.strength

    frozen = ucbe._replace(name="frozen", estimate=estimate, params=ShrinkParams()) \
        if hasattr(ucbe, "_replace") else dataclasses.replace(ucbe, name="frozen", estimate=estimate,
                                                              params=ShrinkParams())
    scores = (np.random.default_rng(0).random((5, 40)) < 0.5).astype(np.float32)
    config = pj.BanditConfig(n_models=5, n_examples=40, budget=100, batch_size=4)
    with pytest.raises(PulseInputError, match=r"estimator 'frozen': params field 'strength' is read by none of its "
                                              r"functions: a sweep over it would give identical points"):
        pj.simulate(scores, config, frozen, reps=2)
    with pytest.raises(PulseInputError, match="field 'strength' is read by none"):
        pj.sweep(scores, config, frozen, {"strength": [1.0, 8.0]}, reps=2)


def test_an_estimate_outside_zero_one_is_refused_before_compiling():
    """An estimator that returns a sum per batch instead of a mean per cell was reported beside intervals
    like [0, 0.63]: refused after the first look, in one line naming the model and the value."""
    from pulse_jax import registry

    ucbe = registry.estimator("ucbe")

    def estimate(state, ledger, params):      # a batch's sum of 8 scores, not their mean
        return ucbe.estimate(state, ledger, params) * 8.0

    summing = ucbe._replace(name="summing", estimate=estimate)
    scores = (np.random.default_rng(0).random((5, 40)) < 0.5).astype(np.float32)
    config = pj.BanditConfig(n_models=5, n_examples=40, budget=100, batch_size=4)
    with pytest.raises(PulseInputError, match=r"estimator 'summing': estimate returned [\d.]+ for model \d after the "
                                              r"first look, outside \[0, 1\]"):
        pj.simulate(scores, config, summing, reps=2)
