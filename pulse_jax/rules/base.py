"""The sampling-rule interface: which model the next batch goes to.

A `SamplingRule` is a small set of pure functions over the rule's own
state pytree (``()`` for a stateless rule), in the optax style:

* ``init(config) -> state`` once per repetition (``config`` is the static
  `pulse_jax.BanditConfig`: shapes, budget, batch size);
* ``choose(state, inputs, params) -> (model, state)`` at every step, from
  the `RuleInputs` of that step and the rule's own traced ``params``
  (the pytree its ``params`` field declares, with the run's values); ``model =
  -1`` (or a model that cannot be pulled now) means "pull nothing this step";
* ``update(state, model, size) -> state`` after a batch of ``size`` cells of
  ``model`` was observed (``size = 0``: nothing was);
* ``eligible(state) -> (m,) bool`` (optional): the models the run's
  recommendation (its ``best``) may name, e.g. the survivors of successive
  halving; ``None``: every model.

``needs_interval`` asks the engine for the simultaneous bounds in
``inputs.low`` / ``inputs.high`` (otherwise they are NaN and cost nothing),
``settings`` lists the rule's static settings as ``(name, value)`` pairs,
which logs and results record, and ``params`` holds the rule's own numbers: a
small ``NamedTuple`` with their defaults (and, optionally, a ``RANGES`` class
attribute), traced like the engine's, so a sweep over ``rule.<field>`` never
recompiles (`pulse_jax.engine.params`). Every random choice takes its uniform from
`pulse_jax.stats.ties.tie_uniform` (``inputs.tie_key``, ``inputs.t``, a
stream), so runs on one key share their random numbers.
"""
from __future__ import annotations

from typing import NamedTuple, Protocol

import chex
import jax.numpy as jnp

from pulse_jax.protocols import Params, RunShape, State

def built_ins() -> dict:
    """The built-in sampling rules by name: the factories `pulse_jax.registry.BUILT_INS` declares, their modules
    loaded the first time (importing the package loads none)."""
    from pulse_jax import registry

    return registry.factories("sampling rule")


class RuleInputs(NamedTuple):
    """What a sampling rule sees at step ``t`` (arrays of shape ``(m,)`` unless noted)."""

    t: chex.Array            # the step, int32 scalar (1-based)
    estimates: chex.Array    # mu_hat (exhausted models: their exact mean)
    low: chex.Array          # simultaneous bounds (NaN unless the rule needs_interval and the method has one)
    high: chex.Array
    n_obs: chex.Array        # observed cells, int32
    n_pulls: chex.Array      # batches observed, the initial ones included, int32
    active: chex.Array       # bool: may be pulled now (not exhausted; live selection: no batch in flight)
    exhausted: chex.Array    # bool: every example of the model is observed
    model_order: chex.Array  # the repetition's shuffled model order (for random ties)
    tie_key: chex.PRNGKey    # the repetition's stream of per-step uniforms
    cost: chex.Array = None  # each model's mean cost per cell (ones when the run has no costs)
    focus: chex.Array = None  # bool: the models the stopping rule's claim waits on (all when its rule has no focus)


def no_state(config) -> tuple:
    del config
    return ()


def keep_state(state, model, size):
    del model, size
    return state


class RuleInit(Protocol):
    """``init(config) -> state``, once per repetition."""

    def __call__(self, config: RunShape) -> State: ...


class RuleChoose(Protocol):
    """``choose(state, inputs, params) -> (model, state)``: an integer scalar (-1: pull nothing) and
    the rule's state, of the same structure as the one it was given."""

    def __call__(self, state: State, inputs: RuleInputs, params: Params) -> tuple[chex.Array, State]: ...


class RuleUpdate(Protocol):
    """``update(state, model, size) -> state`` after a batch of ``size`` cells of ``model``."""

    def __call__(self, state: State, model: chex.Array, size: chex.Array) -> State: ...


class RuleEligible(Protocol):
    """``eligible(state) -> (m,) bool``: the models the run's recommendation may name."""

    def __call__(self, state: State) -> chex.Array: ...


class SamplingRule(NamedTuple):
    """A sampling rule as pure functions (see the module docstring)."""

    name: str
    choose: RuleChoose = None   # required: a missing one is refused when the rule is used, in one line
    init: RuleInit = no_state
    update: RuleUpdate = keep_state
    eligible: RuleEligible | None = None
    needs_interval: bool = False
    settings: tuple = ()
    params: tuple = ()   # the rule's own traced numbers with their defaults (``choose`` receives them)
    plans_on_budget: bool = False   # its requests depend on the total budget (a live log cannot be extended)


def cost_share(inputs: RuleInputs) -> chex.Array:
    """``(m,)``: ``sqrt(c_min / c_i)``, the share of pulls model i gets per pull of the cheapest model
    when cells are split to shrink a difference of two means fastest per unit of cost.

    The variance of a difference of means, ``s^2 (1 / n_a + 1 / n_b)``, is smallest for a fixed
    spend ``c_a n_a + c_b n_b`` at ``n_a / n_b = sqrt(c_b / c_a)`` (Lagrange; the square-root-cost
    weighting of cost-aware best-arm identification, Kanarios, Zhang & Ying 2024). Equal costs
    give exactly 1 everywhere, so a rule that scales by it chooses as it does without costs.
    """
    if inputs.cost is None:
        return jnp.ones(inputs.estimates.shape, jnp.float32)
    return jnp.sqrt(jnp.min(inputs.cost) / inputs.cost)


def cost_weighted_width(inputs: RuleInputs) -> chex.Array:
    """``(high - low) * cost_share ** 0.5``: the width a rule that pulls "the wider one" compares.

    Widths shrink like ``1 / sqrt(n)``, so pulling whichever has the larger ``width_i c_i^{-1/4}``
    keeps ``n_a sqrt(c_a) = n_b sqrt(c_b)``, the split of `cost_share`; equal costs compare the
    widths themselves."""
    return (inputs.high - inputs.low) * jnp.sqrt(cost_share(inputs))


def ucb_index(inputs: RuleInputs, exploration) -> chex.Array:
    """The paper's index ``mu_hat_i + sqrt(a / N_i)``, ``-inf`` where a model cannot be pulled."""
    bonus = jnp.sqrt(exploration / jnp.maximum(inputs.n_obs, 1).astype(jnp.float32))
    return jnp.where(inputs.active, inputs.estimates + bonus, -jnp.inf)
