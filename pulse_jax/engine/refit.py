"""The refit of ``U`` inside a run: every observed cell, ``V`` frozen, warm-started Adam, then the
sums of predictions over each model's unobserved cells that PULSE's estimates need.

On a CPU the repetitions of a vmapped run refit one at a time
(`pulse_jax.stats.factorization.one_repetition_at_a_time`), a few whole models at a time
(`pulse_jax.stats.refit_by_model`; the first look, one block per model, by its much smaller
`refit_first_look`); elsewhere the refit is the full-batch one of
`pulse_jax.stats.factorization.refit_rows_on_blocks`, whole block groups gathered once.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from pulse_jax.engine.params import RunParams
from pulse_jax.engine.state import BanditState, Episode, observed_blocks
from pulse_jax.stats import factorization
from pulse_jax.stats.factorization import FitSettings
from pulse_jax.stats.refit_by_model import refit_first_look, refit_rows_by_model


def adam_refit(epochs: int, learning_rate, l2, shrink=0.0, row_prior=None) -> FitSettings:
    """The bandit's refit schedule: ``epochs`` (static) Adam steps; rate, L2 weight and the prior's
    weight (``BanditParams.refit_prior``) may be traced; ``row_prior`` is the episode's
    `pulse_jax.stats.factorization.RowPrior` (None: the candidates' own mean row)."""
    return FitSettings(epochs, l2, optax.adam(learning_rate), shrink, row_prior)


class RefitNumbers(NamedTuple):
    """A refit schedule's traced numbers (`adam_refit` without its static ``epochs``)."""

    learning_rate: jax.Array
    l2: jax.Array
    shrink: jax.Array
    row_prior: factorization.RowPrior | None


def refit_numbers(learning_rate, l2, shrink, row_prior) -> RefitNumbers:
    """`RefitNumbers` in float32 (any of them may be traced)."""
    as_f32 = lambda x: jnp.asarray(x, jnp.float32)   # noqa: E731
    return RefitNumbers(as_f32(learning_rate), as_f32(l2), as_f32(shrink), row_prior)


def periodic_numbers(params: RunParams, episode: Episode) -> RefitNumbers:
    """The periodic refits' numbers from the run's params."""
    return refit_numbers(params.refit_lr, params.refit_l2, params.refit_prior, episode.row_prior)


def _by_model(U, V, blocks, n_examples, settings, *, filled=None):
    del filled                    # the refit by model sorts the empty slots out of its way
    return refit_rows_by_model(U, V, blocks, n_examples, settings)


def _first_look(U, V, blocks, n_examples, settings, *, filled=None):
    del filled                    # one block per model: nothing to skip
    return refit_first_look(U, V, blocks[0], n_examples, settings)


def refit(episode: Episode, state: BanditState, epochs: int, numbers: RefitNumbers, *, with_log: bool = True,
          filled: factorization.FilledPrefix | None = None, carry: bool = False) -> BanditState:
    """Refit U on every observed cell (V frozen, warm start, ``epochs`` Adam steps with ``numbers``);
    recompute F and Phi.

    ``F_i``/``Phi_i`` (sums of predictions and their squares over model i's
    unobserved cells) come from one pass over the dense predictions that leaves out
    the cells ``state.observed`` marks (the missing ones among them).
    ``with_log=False`` fits the initial batches alone; ``filled`` visits only the
    log's used slots (see `pulse_jax.stats.factorization.FilledPrefix`); ``carry``
    continues the optimizer run in ``state.refit_state`` (`BanditConfig.carry_refit_state`).
    """
    blocks = observed_blocks(episode, state, with_log)
    chunk = filled.chunk if filled is not None and len(blocks) > 1 else None
    used = filled.used if chunk is not None else jnp.int32(0)
    n = episode.scores.shape[1]

    def fit(U, refit_state, V, blocks, used, numbers):
        settings = adam_refit(epochs, *numbers)
        fill = None if chunk is None else factorization.FilledPrefix(used, chunk)
        if carry:
            return factorization.continue_refit_on_blocks(U, refit_state, V, blocks, n, settings, filled=fill)
        return refit_rows(U, V, blocks, n, settings, filled=fill), refit_state

    on_cpu = factorization.chunk_bytes() is not None
    refit_rows = factorization.refit_rows_on_blocks
    if on_cpu:   # the first look alone (one block per model) needs a much smaller program
        refit_rows = _by_model if with_log else _first_look
        fit = factorization.one_repetition_at_a_time(fit)
    U, refit_state = fit(state.U, state.refit_state, episode.V, blocks, used, numbers)
    pred_sum, pred_sq_sum = factorization.prediction_row_sums(U, episode.V, episode.missing, state.observed)
    return state._replace(U=U, refit_state=refit_state,
                          sums=state.sums._replace(pred_sum=pred_sum, pred_sq_sum=pred_sq_sum))


def refit_part(state: BanditState, with_estimator: bool) -> dict:
    """What a periodic refit reads and changes of ``state`` (the estimator's state where it refreshes
    it): all that goes through the refit's conditional. A leaf that went through it and that the step
    then updates in place would be copied after it at every step."""
    part = {"U": state.U, "refit_state": state.refit_state, "pred_sum": state.sums.pred_sum,
            "pred_sq_sum": state.sums.pred_sq_sum, "log": state.log, "observed": state.observed,
            "init_scores": state.init_scores}
    return {**part, "estimator": state.estimator} if with_estimator else part


def with_refit_part(state: BanditState, part: dict) -> BanditState:
    """``state`` with a `refit_part` put back."""
    sums = state.sums._replace(pred_sum=part["pred_sum"], pred_sq_sum=part["pred_sq_sum"])
    return state._replace(sums=sums, **{k: v for k, v in part.items() if k not in ("pred_sum", "pred_sq_sum")})
