"""The stopping-rule interface: when a repetition stops spending.

A `StoppingRule` is ``done(inputs, params) -> bool``: checked before
every step, a run whose rule says ``True`` pulls nothing more (its remaining
steps spend no cells). `StopInputs` carries what the run knows then,
including its first certificate: the engine records, for every method with
an interval, the first time the leader's lower bound exceeds every other
model's upper bound (`pulse_jax.stats.confidence.certify` on the
simultaneous, anytime-valid bounds), whatever the stopping rule.

A stop is final: once ``done`` says ``True`` the run pulls nothing more,
whatever the rule would say later. ``needs_interval`` says the rule is only
meaningful for methods with an interval; ``settings`` lists its static
settings as ``(name, value)`` pairs; ``stops_early`` (default ``True``) lets
a simulation stop computing once every repetition of a batch has stopped
(only the fixed-budget rule, which never fires, says ``False``).
A stopping rule that reads the bounds keeps the guarantee of the confidence
sequences: they hold at every look at once, so stopping at a data-dependent
time is valid.

What a stop certifies is the rule's to declare, not the engine's:

* ``claim(inputs, params) -> (m,) bool`` names the models the rule's
  certificate is about when it stops now (the certified best for
  `pulse_jax.stopping.when_certified`; no model for the fixed budget);
* ``statement(names, delta, params) -> str`` says it in one line a user can
  paste into a paper (host side; ``names`` the claimed models' names);
* ``holds(claimed, true_means, params) -> bool`` says whether a claim is true
  (host side; simulations count the false ones, `pulse_jax.analysis.metrics.claims`);
* ``upper_models``: how many models' upper bounds the claim rests on; by default
  `EVERY_MODEL`, right for any claim (the levels then hold every bound at once).
  A claim about the best model needs every lower bound and the best model's upper
  bound only and declares 1 (what certification levels, ``cs_simultaneous < 1``,
  pay for: the built-in best-model claims do); a claim about another
  data-dependent model (the worst, say) must not, since its model's upper bound is
  not one fixed model's; a top-k set
  needs the k best models' upper bounds, so it needs ``cs_simultaneous >=
  log k / log m`` (`pulse_jax.engine.check_levels` refuses less). `EVERY_MODEL` says every
  model's (certificates about costs: any model may be the one that decides), so ``cs_simultaneous = 1``;
* ``uses_cost``: the claim is about what models cost (``inputs.cost``, each model's mean cost per
  cell); ``holds`` then takes a fourth argument, the ``(m,)`` true costs per cell;
* ``focus(inputs, params) -> (m,) bool`` (optional): the models whose bounds stand between this look
  and the claim; the kernel passes it to the sampling rule as ``inputs.focus`` (`pulse_jax.rules.focus`
  pulls there). None: every model.

Simulation and live selection call the same ``done`` on the same
`StopInputs` (`pulse_jax.engine.Kernel.stop_status`), and the live report
prints the rule's statement.
"""
from __future__ import annotations

from typing import NamedTuple, Protocol

import chex
import jax.numpy as jnp
import numpy as np

from pulse_jax import registry
from pulse_jax.protocols import Params

def built_ins() -> dict:
    """The built-in stopping rules by name: the factories `pulse_jax.registry.BUILT_INS` declares, their modules
    loaded the first time (importing the package loads none)."""
    from pulse_jax import registry

    return registry.factories("stopping rule")


class StopInputs(NamedTuple):
    """What a stopping rule sees before a step (arrays of shape ``(m,)`` unless noted)."""

    t: chex.Array                 # the step about to run (int32)
    spent: chex.Array             # cells spent so far, initialization included (int32)
    budget: int                   # the run's total budget (static)
    estimates: chex.Array
    low: chex.Array               # simultaneous bounds (NaN for methods without an interval)
    high: chex.Array
    certified: chex.Array         # bool scalar: a model has been certified best
    certified_model: chex.Array   # int32 scalar, -1 before
    cost: chex.Array = None       # each model's mean cost per cell (ones when the run has no costs)


#: ``upper_models`` of a claim that rests on every model's upper bound (any number >= the models).
EVERY_MODEL = registry.EVERY_MODEL


def no_claim(inputs: StopInputs, params) -> chex.Array:
    """The default claim: the rule certifies nothing about any model."""
    del params
    return jnp.zeros(inputs.estimates.shape, bool)


#: Models whose true means differ from the best by at most this tie for the best (float64 means of
#: float32 scores: equal rows give equal means; 1e-9 absorbs summation order only).
TIE_TOLERANCE = 1e-9


def no_claim_holds(claimed, true_means, params) -> bool:
    """The default check: a rule that claims nothing is never wrong."""
    del claimed, true_means, params
    return True


def best_claim_holds(claimed, true_means, params) -> bool:
    """A claim of one model as the best holds when that model ties for the best true mean."""
    del params
    return bool(claimed.sum() == 1 and true_means[claimed].max() >= true_means.max() - TIE_TOLERANCE)


def others_max(values: chex.Array) -> chex.Array:
    """``(m,)``: for each model the largest value among the *other* models (the top two suffice)."""
    top = jnp.argmax(values)
    second = jnp.max(jnp.where(jnp.arange(values.shape[0]) == top, -jnp.inf, values))
    return jnp.where(jnp.arange(values.shape[0]) == top, second, values[top])


def no_statement(names, delta, params) -> str:
    """The default statement of a rule that certifies nothing."""
    del names, delta, params
    return "nothing is certified (this stopping rule makes no claim)"


class StopDone(Protocol):
    """``done(inputs, params) -> bool scalar``: stop before this step (final)."""

    def __call__(self, inputs: StopInputs, params: Params) -> chex.Array: ...


class StopClaim(Protocol):
    """``claim(inputs, params) -> (m,) bool``: the models the rule's certificate names now."""

    def __call__(self, inputs: StopInputs, params: Params) -> chex.Array: ...


class StopStatement(Protocol):
    """``statement(names, delta, params) -> str`` (host side): what is certified, in one line."""

    def __call__(self, names: list[str], delta: float, params: Params) -> str: ...


class StopHolds(Protocol):
    """``holds(claimed, true_means, params) -> bool`` (host side, NumPy): is the claim true? Simulations
    count the claims that are not (at most ``delta`` of the stopped runs, if the rule is valid)."""

    def __call__(self, claimed: np.ndarray, true_means: np.ndarray, params: Params) -> bool: ...


class StoppingRule(NamedTuple):
    """A stopping rule as pure functions (see the module docstring)."""

    name: str
    done: StopDone = None   # required: a missing one is refused when the rule is used, in one line
    needs_interval: bool = False
    settings: tuple = ()
    stops_early: bool = True
    claim: StopClaim = no_claim
    statement: StopStatement = no_statement
    params: tuple = ()   # the rule's own traced numbers with their defaults (its functions receive them)
    holds: StopHolds = no_claim_holds
    upper_models: int = EVERY_MODEL   # models whose upper bounds the claim rests on (every one unless declared)
    uses_cost: bool = False   # the claim is about costs: ``holds(claimed, true_means, params, cost)``
    focus: StopClaim | None = None   # ``focus(inputs, params) -> (m,) bool``: the models the claim waits on
