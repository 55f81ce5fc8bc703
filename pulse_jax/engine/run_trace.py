"""What only a run's report reads, kept beside the state rather than in it: the money spent, the
claim the stopping rule made when it fired and the interval snapshots.

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
    ``claimed`` ((m,) bool: what the stopping rule's claim named when it fired; all False until then)
    and ``snapshots`` (the half-widths at ``config.snapshot_budgets``, NaN until reached)."""

    money: chex.Array
    claimed: chex.Array
    snapshots: Snapshots


def empty(config: BanditConfig) -> Trace:
    """The trace before anything is spent."""
    m, k = config.n_models, len(config.snapshot_budgets)
    nan = jnp.full((k, m), jnp.nan, jnp.float32)
    return Trace(jnp.float32(0.0), jnp.zeros(m, bool), Snapshots(nan, nan))


def fold(config: BanditConfig, trace: Trace, info: StepInfo) -> tuple[Trace, StepRecord]:
    """The trace after a step and the step's record: the step's cost added, the claim kept where the
    stop fired, and the snapshot rows whose budget the step reached filled with its half-widths."""
    money = trace.money + info.cost
    claimed = jnp.where(info.fired, info.claim, trace.claimed)
    snapshots = trace.snapshots
    if config.snapshot_budgets:
        budgets = jnp.asarray(config.snapshot_budgets, jnp.int32)
        hit = ((info.spent_before < budgets) & (info.spent >= budgets))[:, None]
        snapshots = Snapshots(*(jnp.where(hit, w[None], old) for w, old in zip(info.widths, snapshots)))
    record = StepRecord(info.best, info.spent, info.chosen, info.info, info.estimates, info.low, info.high, money)
    return Trace(money, claimed, snapshots), record
