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
    config = pj.BanditConfig(n_models=5, n_examples=40, budget=100, batch_size=4, stop=rule)
    with pytest.raises(PulseInputError) as refused:
        pj.simulate(scores, config, "ucbe", reps=2)
    message = str(refused.value)
    assert message.startswith("stopping rule 'traced_k': done uses a traced number " + where), message
    assert "belongs in the plug-in's fixed settings" in message and "\n" not in message
    assert "Tracer" not in message and "jax" not in message.lower().replace("jax_", "")
