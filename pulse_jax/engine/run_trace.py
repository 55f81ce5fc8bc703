"""What only a run's report reads, kept beside the state rather than in it: the money spent, the
claim the stopping rule made when it fired, the interval snapshots and each confidence sequence's
running bounds.

A `Trace` is folded from each step's `pulse_jax.engine.state.StepInfo` by the drivers (`fold`), as
gymnax keeps metrics in a step's ``info``: `pulse_jax.engine.state.BanditState` holds only what the
next step reads, so a new metric widens the fold, never the state every step threads.
"""
from __future__ import annotations

from typing import NamedTuple

import chex
import jax.numpy as jnp

from pulse_jax.engine.bookkeeping import Snapshots
from pulse_jax.engine.config import BanditConfig
from pulse_jax.engine.state import StepInfo, StepRecord


class Trace(NamedTuple):
    """A run's analysis so far: ``money`` (what the cells spent cost, initialization included),
    ``claimed`` ((m,) bool: what the stopping rule's claim named when it fired; all False until then),
    ``snapshots`` (the half-widths at ``config.snapshot_budgets``, NaN until reached) and
    ``seq_low`` / ``seq_high`` ((m, C): each confidence sequence's own running max / min, so each
    can be studied alone; [0, 1] before any draw)."""

    money: chex.Array
    claimed: chex.Array
    snapshots: Snapshots
    seq_low: chex.Array
    seq_high: chex.Array


def empty(config: BanditConfig, n_sequences: int) -> Trace:
    """The trace before anything is spent (``n_sequences``: the estimator's confidence sequences per model)."""
    m, k = config.n_models, len(config.snapshot_budgets)
    nan = jnp.full((k, m), jnp.nan, jnp.float32)
    return Trace(jnp.float32(0.0), jnp.zeros(m, bool), Snapshots(nan, nan),
                 jnp.zeros((m, n_sequences), jnp.float32), jnp.ones((m, n_sequences), jnp.float32))


def fold(config: BanditConfig, trace: Trace, info: StepInfo) -> tuple[Trace, StepRecord]:
    """The trace after a step and the step's record: the step's cost added, the claim kept where the
    stop fired, the told model's sequences intersected with their new bounds, and the snapshot rows
    whose budget the step reached filled with its half-widths."""
    told = info.told
    money = trace.money + told.cost
    seq_low, seq_high = trace.seq_low, trace.seq_high
    if not isinstance(told.seq_low, tuple):   # () without an interval: the sequences never move
        seq_low, seq_high = seq_low.at[told.model].max(told.seq_low), seq_high.at[told.model].min(told.seq_high)
    claimed = jnp.where(info.fired, info.claim, trace.claimed)
    snapshots = trace.snapshots
    if config.snapshot_budgets:
        budgets = jnp.asarray(config.snapshot_budgets, jnp.int32)
        hit = ((info.spent_before < budgets) & (info.spent >= budgets))[:, None]
        snapshots = Snapshots(*(jnp.where(hit, w[None], old) for w, old in zip(info.widths, snapshots)))
    record = StepRecord(info.best, info.spent, info.chosen, told.info, info.estimates, info.low, info.high, money)
    return Trace(money, claimed, snapshots, seq_low, seq_high), record
