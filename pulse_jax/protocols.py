"""The plug-in function signatures, as `typing.Protocol` s.

Each field of `pulse_jax.Estimator`, `pulse_jax.SamplingRule` and
`pulse_jax.StoppingRule` that holds a function is annotated with one of
these. They document the contract (argument order, what comes back, the
shapes); `pulse_jax.engine.conformance.check_plugins` enforces the shapes on a
run's own sizes before anything is compiled. Shapes use ``m`` models, ``n``
examples, ``B`` the batch size and ``C`` the estimator's ``n_sequences``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import chex
import numpy as np

if TYPE_CHECKING:   # annotations only: this module imports nothing of the package at run time
    from pulse_jax.engine import BanditConfig
    from pulse_jax.estimators import Ledger, Pull
    from pulse_jax.rules.base import RuleInputs
    from pulse_jax.stopping.base import StopInputs

#: An estimator's, a rule's own state: any pytree of arrays (``()`` for none).
State = Any
#: An estimator's per-step record: any pytree of scalars (``()`` for none).
Info = Any
#: A plug-in's own traced numbers: the pytree its ``params`` field declares, with the run's values.
Params = Any


# ----------------------------------------------------------------------------- estimators


class EstimatorInit(Protocol):
    """``init(ledger, params) -> state``, after every model's initial batches."""

    def __call__(self, ledger: Ledger, params: Params) -> State: ...


class EstimatorUpdate(Protocol):
    """``update(state, ledger, pull, n_examples, params) -> (state, info)``; ``ledger`` is the
    bookkeeping before the pull; the state must not change when ``pull.size == 0``."""

    def __call__(self, state: State, ledger: Ledger, pull: Pull, n_examples: int,
                 params: Params) -> tuple[State, Info]: ...


class EstimatorRefresh(Protocol):
    """``refresh(state, ledger, n_examples, params) -> state``, right after a refit of the factorization."""

    def __call__(self, state: State, ledger: Ledger, n_examples: int, params: Params) -> State: ...


class EstimatorEstimate(Protocol):
    """``estimate(state, ledger, params) -> (m,) float``: every model's current mean estimate."""

    def __call__(self, state: State, ledger: Ledger, params: Params) -> chex.Array: ...


class EstimatorRadius(Protocol):
    """``radius(state, ledger, n_examples, delta, params) -> (m,) float``: the fixed-count ``1 - delta``
    half-width (NaN where the method has none); ``delta`` may be an ``(m,)`` array."""

    def __call__(self, state: State, ledger: Ledger, n_examples: int, delta: chex.Array,
                 params: Params) -> chex.Array: ...


class EstimatorProxies(Protocol):
    """``proxies(state, ledger, pull, n_examples, params) -> (Y, lower, width)``, each ``(C, B)``:
    per-draw observations with ``E[Y_s | past]`` the mean of the unseen scores, and ``Y_s`` in
    ``[lower_s, lower_s + width_s]``."""

    def __call__(self, state: State, ledger: Ledger, pull: Pull, n_examples: int,
                 params: Params) -> tuple[chex.Array, chex.Array, chex.Array]: ...


class DrawWeights(Protocol):
    """``draw_weights(preds, unseen, params) -> (n,) float``: one model's draw weight per example."""

    def __call__(self, preds: chex.Array, unseen: chex.Array, params: Params) -> chex.Array: ...


# ----------------------------------------------------------------------------- sampling rules


class RuleInit(Protocol):
    """``init(config) -> state``, once per repetition."""

    def __call__(self, config: BanditConfig) -> State: ...


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


# ----------------------------------------------------------------------------- stopping rules


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
