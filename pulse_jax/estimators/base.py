"""The estimator interface: `Estimator`, and the bookkeeping every estimator shares
(`ModelSums`, `Pull`, `DrawDesign`). See `pulse_jax.estimators`."""
from __future__ import annotations

from typing import NamedTuple, Protocol

import chex
import jax.numpy as jnp

from pulse_jax.protocols import Info, Params, State

def built_ins() -> dict:
    """The built-in estimators by name: the factories `pulse_jax.registry.BUILT_INS` declares, their modules
    loaded the first time (importing the package loads none)."""
    from pulse_jax import registry

    return registry.factories("estimator")


class ModelSums(NamedTuple):
    """Per-model sufficient statistics shared by every estimator (shape ``(m,)`` each).

    ``pred_sum`` / ``pred_sq_sum`` are ``F_i = sum_{j in U_i} f_ij`` and
    ``Phi_i = sum_{j in U_i} f_ij^2`` over the model's *unobserved* examples,
    under the predictions current at this step (zero for UCB-E). ``population``
    is ``N_i``, the number of examples model i has a score for (its benchmark:
    a candidate matrix may have missing cells); ``None`` means every model has
    all ``n_examples``.
    """

    n_obs: chex.Array       # N_i, observed cells
    n_pulls: chex.Array     # K_i, pulls (the initial batch is the first)
    obs_sum: chex.Array
    obs_sq_sum: chex.Array
    pred_sum: chex.Array
    pred_sq_sum: chex.Array
    population: chex.Array = None


def populations(sums: ModelSums, n_examples) -> chex.Array:
    """``N_i`` of every model, as float32 ``(m,)``: the sums', else ``n_examples`` for all."""
    size = sums.population if sums.population is not None else n_examples
    return jnp.broadcast_to(jnp.asarray(size, jnp.float32), sums.n_obs.shape)


class Pull(NamedTuple):
    """One batch drawn for one model: its cells in draw order and their sums (``size`` of them)."""

    model: chex.Array       # int32 scalar
    size: chex.Array        # B' = |b|, int32 scalar
    score_sum: chex.Array   # sum_{j in b} S_ij
    pred_sum: chex.Array    # sum_{j in b} f_ij
    scores: chex.Array = None   # (B,) S_ij in draw order, 0 past ``size`` (for ``proxies``)
    preds: chex.Array = None    # (B,) f_ij in draw order, 0 past ``size``
    valid: chex.Array = None    # (B,) bool, the first ``size``
    design: "DrawDesign | None" = None       # DrawDesign of a weighted draw (estimators with ``draw_weights``), else None


class DrawDesign(NamedTuple):
    """How a weighted pull was drawn (`Estimator.draw_weights`), all fixed before it.

    Draw ``s`` (0-based) took example ``J_s`` with probability ``weights[s] / (weight_total -
    sum of weights[:s])`` among the examples still unseen; ``pred_total`` is the sum of the
    predictions over the examples unseen before the pull (``unseen`` of them), and ``max_low`` /
    ``max_high`` the largest ``f_j / w_j`` and ``(1 - f_j) / w_j`` over them (the proxies' range).
    """

    weights: chex.Array       # (B,) w_{J_s}, 0 past ``size``
    weight_total: chex.Array  # sum of w over the unseen examples before the pull
    pred_total: chex.Array    # sum of f over them
    unseen: chex.Array        # how many there were (float)
    max_low: chex.Array       # max f_j / w_j over them
    max_high: chex.Array      # max (1 - f_j) / w_j over them


def draw_design(preds, unseen, weights, examples, valid) -> DrawDesign:
    """The `DrawDesign` of a pull of ``examples`` (``valid`` of them) drawn with ``weights``
    (``(n,)``, 0 off the ``unseen`` examples) from a model with predictions ``preds`` (``(n,)``)."""
    safe = jnp.where(unseen, weights, 1.0)
    return DrawDesign(jnp.where(valid, weights[examples], 0.0), jnp.sum(weights), jnp.sum(jnp.where(unseen, preds, 0.0)),
                      jnp.sum(unseen).astype(jnp.float32), jnp.max(jnp.where(unseen, preds / safe, 0.0)),
                      jnp.max(jnp.where(unseen, (1.0 - preds) / safe, 0.0)))


def _no_state(sums, params):
    del sums, params
    return ()


def _no_update(state, sums, pull, n_examples, params):
    del sums, pull, n_examples, params
    return state, ()


def _no_refresh(state, sums, n_examples, params):
    del sums, n_examples, params
    return state


def _observed_mean(state, sums, params):
    del state, params
    return observed_mean(sums)


def _no_radius(state, sums, n_examples, delta, params):
    del state, n_examples, delta, params
    return jnp.full(sums.n_obs.shape, jnp.nan, jnp.float32)


class EstimatorInit(Protocol):
    """``init(sums, params) -> state``, after every model's initial batches."""

    def __call__(self, sums: ModelSums, params: Params) -> State: ...


class EstimatorUpdate(Protocol):
    """``update(state, sums, pull, n_examples, params) -> (state, info)``; ``sums`` is the
    bookkeeping before the pull; the state must not change when ``pull.size == 0``."""

    def __call__(self, state: State, sums: ModelSums, pull: Pull, n_examples: int,
                 params: Params) -> tuple[State, Info]: ...


class EstimatorRefresh(Protocol):
    """``refresh(state, sums, n_examples, params) -> state``, right after a refit of the factorization."""

    def __call__(self, state: State, sums: ModelSums, n_examples: int, params: Params) -> State: ...


class EstimatorEstimate(Protocol):
    """``estimate(state, sums, params) -> (m,) float``: every model's current mean estimate."""

    def __call__(self, state: State, sums: ModelSums, params: Params) -> chex.Array: ...


class EstimatorRadius(Protocol):
    """``radius(state, sums, n_examples, delta, params) -> (m,) float``: the fixed-count ``1 - delta``
    half-width (NaN where the method has none); ``delta`` may be an ``(m,)`` array."""

    def __call__(self, state: State, sums: ModelSums, n_examples: int, delta: chex.Array,
                 params: Params) -> chex.Array: ...


class EstimatorProxies(Protocol):
    """``proxies(state, sums, pull, n_examples, params) -> (Y, lower, width)``, each ``(C, B)``:
    per-draw observations with ``E[Y_s | past]`` the mean of the unseen scores, and ``Y_s`` in
    ``[lower_s, lower_s + width_s]``."""

    def __call__(self, state: State, sums: ModelSums, pull: Pull, n_examples: int,
                 params: Params) -> tuple[chex.Array, chex.Array, chex.Array]: ...


class DrawWeights(Protocol):
    """``draw_weights(preds, unseen, params) -> (n,) float``: one model's draw weight per example."""

    def __call__(self, preds: chex.Array, unseen: chex.Array, params: Params) -> chex.Array: ...


class Estimator(NamedTuple):
    """A mean estimator as pure functions (see module docstring).

    Build it by keyword; every function has a default, so an estimator writes only what it
    changes: ``init`` keeps no state (``()``), ``update`` changes nothing, ``refresh`` ignores
    refits, ``estimate`` is the mean of the observed cells, ``radius`` is NaN (no fixed-count
    interval) and ``proxies`` is ``None`` (no anytime-valid interval)::

        Estimator(name="shrunk", estimate=my_estimate, proxies=my_proxies)

    The signatures are the protocols of `pulse_jax.protocols`;
    `pulse_jax.engine.conformance.check_plugins` checks them on a run's shapes before it compiles.

    ``update`` must leave the state unchanged when ``pull.size == 0`` (a step
    that spends nothing). Each estimator masks its own scatters rather than
    the engine selecting between old and new state afterwards: a select over
    whole arrays stops XLA from updating them in place, which made every
    step copy them.
    """

    name: str
    uses_predictions: bool = False
    init: EstimatorInit = _no_state
    update: EstimatorUpdate = _no_update
    refresh: EstimatorRefresh = _no_refresh
    estimate: EstimatorEstimate = _observed_mean
    radius: EstimatorRadius = _no_radius
    proxies: EstimatorProxies | None = None
    n_sequences: int = 1    # rows of what ``proxies`` returns: confidence sequences per model
    settings: tuple = ()    # static settings, (name, value) pairs
    draw_weights: DrawWeights | None = None   # (preds (n,), unseen (n,), params) -> draw weights; None: uniform
    params: tuple = ()      # the estimator's own traced numbers with their defaults (each function receives them)

    @property
    def refreshes(self) -> bool:
        """Whether a refit changes the estimator's state (it has a ``refresh`` of its own)."""
        return self.refresh is not _no_refresh

    @property
    def has_interval(self) -> bool:
        """Whether the method has an anytime-valid interval (its ``proxies``)."""
        return self.proxies is not None


def observed_mean(sums: ModelSums) -> chex.Array:
    """Every model's mean over its observed cells (0 for a model with none)."""
    return sums.obs_sum / jnp.maximum(sums.n_obs, 1)


def raw_proxies(pull: Pull):
    """The scores themselves as ``(1, B)`` observations: range [0, 1]."""
    return pull.scores[None], jnp.zeros_like(pull.scores)[None], jnp.ones_like(pull.scores)[None]
