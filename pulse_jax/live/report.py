"""A live selection's report for people: ranking, confidence sequences, separation, audit trail.

Imports neither the simulation engine nor matplotlib (``plot`` loads it when called), so live
selection stands alone.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from pulse_jax.fileio.jsonable import plain_number
from pulse_jax.live.money import money


@dataclasses.dataclass
class Report:
    """A selector's state for people: ranking, intervals, separation, audit trail."""

    method: str
    seed: int
    models: tuple[str, ...]
    estimates: np.ndarray
    low: np.ndarray              # confidence sequence: valid at every look (for every model at once if simultaneous)
    high: np.ndarray
    n_obs: np.ndarray
    n_pulls: np.ndarray
    spent: int
    budget: int
    delta: float
    leader: str
    separated: bool | None       # None: the method has no valid interval (Naive-Pooling)
    tied_with_leader: tuple[str, ...]
    evaluated: dict               # model -> example ids, in evaluation order
    simultaneous: bool = True     # False: certification levels (each interval holds alone, not all at once)
    stop: str = "budget"          # the stopping rule's name
    stopped: bool = False         # the stopping rule has ended the run
    claimed: tuple[str, ...] = () # the models the stopping rule's certificate names now
    certificate: str = ""         # the rule's one-line statement of what is certified (StoppingRule.statement)
    finished: bool = False        # nothing more will be asked (stopped, budget spent, or every model known exactly)
    groups: tuple = ()            # tie groups, best first (pulse_jax.stopping.groups)
    spend: dict | None = None     # money: cells, tokens, dollars (pulse_jax.live.money.Meter.summary)
    spend_line: str = ""          # the same in one line
    failed_attempts: int = 0      # scorer calls that raised, over every run of the log (each retried, or the one
                                  # that ended a run)
    retries: int = 0              # scorer calls made again after a failure, over every run of the log
    after_stop: int = 0           # cells asked before the stopping rule fired that returned after it (in flight)
    prices: tuple | None = None   # each model's expected dollars per cell (a run with prices)
    spent_by_model: tuple | None = None   # each model's dollars paid (pulse_jax.live.money.Meter.by_model)
    stops_early: bool = True      # the stopping rule can end a run before its budget (a fixed budget cannot)

    @property
    def ranking(self) -> list[str]:
        order = np.argsort(-np.nan_to_num(self.estimates, nan=-np.inf), kind="stable")
        return [self.models[i] for i in order]

    def to_dict(self) -> dict:
        rows = []
        for name in self.ranking:
            i = self.models.index(name)
            rows.append({"model": name, "estimate": plain_number(self.estimates[i]), "low": plain_number(self.low[i]),
                         "high": plain_number(self.high[i]), "cells": int(self.n_obs[i]), "pulls": int(self.n_pulls[i]),
                         **({"price_per_cell": float(self.prices[i])} if self.prices is not None else {}),
                         **({"spent_usd": round(float(self.spent_by_model[i]), 6)}
                            if self.spent_by_model is not None else {})})
        return {"method": self.method, "seed": self.seed, "spent": self.spent, "budget": self.budget,
                "delta": self.delta, "leader": self.leader, "separated": self.separated,
                "tied_with_leader": list(self.tied_with_leader), "stop": self.stop, "stopped": self.stopped,
                "finished": self.finished,
                "claimed": list(self.claimed), "certificate": self.certificate,
                # Tie groups describe the intervals; what is certified is said by the next two fields.
                "groups": [list(g) for g in self.groups],
                "group_heads_certified_above_later_groups": self.simultaneous,
                "certified_pairs": self.certified_pairs(),
                **({"spend": self.spend} if self.spend is not None else {}),
                "scorer_failures": {"failed_attempts": self.failed_attempts, "retries": self.retries},
                "after_stop": self.after_stop,
                "ranking": rows,
                "evaluated": {k: list(v) for k, v in self.evaluated.items()}}

    def certified_pairs(self) -> list[list[str]]:
        """``[better, worse]`` pairs that hold together with probability at least ``1 - delta``: with every
        interval holding at once (``simultaneous``), each pair whose lower bound clears the other's upper
        bound; at certification levels, which cover the lower bounds and a best model's upper bound only,
        the separated leader above each other model (docs/certificates.md), and nothing when it is not."""
        low, high = np.asarray(self.low, np.float64), np.asarray(self.high, np.float64)
        if not (np.isfinite(low).all() and np.isfinite(high).all()):
            return []
        order = [self.models.index(name) for name in self.ranking]
        if self.simultaneous:
            return [[self.models[i], self.models[j]] for i in order for j in order if low[i] > high[j]]
        if not self.separated:
            return []
        return [[self.leader, self.models[j]] for j in order if self.models[j] != self.leader]

    def to_markdown(self) -> str:
        level = f"{1 - self.delta:.0%}"
        # A stop that certified something other than the exact best says that first; "not separated"
        # answers the exact-best question only.
        other_claim = bool(self.claimed) and self.stop not in ("certified", "budget") and not self.separated
        lines = [f"# Model selection ({self.method}, seed {self.seed})", "",
                 f"{self.spent:,} of {self.budget:,} cells evaluated. Leader: **{self.leader}**; "
                 + (f"certified by `{self.stop}`: {self.certificate}. As the exact best it is not separated: "
                    f"{len(self.tied_with_leader)} model(s) overlap it" if other_claim else
                    "separated from every other model" if self.separated else
                    "not yet separated; tied with the leader: " + _some(self.tied_with_leader)
                    if self.separated is not None else "no valid interval for this method")
                 + f" ({level} confidence sequences, valid at every look"
                 + (", simultaneous over the models)." if self.simultaneous else
                    "; certification levels: each holds on its own, and a certified best is wrong at most "
                    f"{self.delta:g} of the time, but not every interval holds at once)."), "",
                 *((f"Stopping rule `{self.stop}` ({self._how_it_ended()}): {self.certificate}.", "")
                   if self.certificate else ()),
                 *((self._groups_line(), "") if len(self.groups) > 1 else ()),
                 *((self.spend_line.capitalize() + ".", "") if self.spend_line else ()),
                 *((f"{self.after_stop:,} cells were asked before the stop and returned after it (batches in "
                    "flight when the stopping rule fired; their scores are in the estimates).", "")
                   if self.after_stop else ()),
                 *((f"The scorer failed {self.failed_attempts:,} time(s) over this log's runs; {self.retries:,} "
                    "call(s) were retried (a retried call is paid for once more; no cell whose scores came back is "
                    "asked again).", "") if self.failed_attempts else ()),
                 f"| rank | model | estimate | {level} confidence sequence | cells |"
                 + (" price per cell | spent |" if self.prices is not None else ""),
                 "|---:|---|---:|---|---:|" + ("---:|---:|" if self.prices is not None else "")]
        for k, row in enumerate(self.to_dict()["ranking"], start=1):
            money_cells = (f" {money(row['price_per_cell'])} | {money(row.get('spent_usd'))} |"
                           if self.prices is not None else "")
            lines.append(f"| {k} | {row['model']} | {_fmt(row['estimate'])} | [{_fmt(row['low'])}, "
                         f"{_fmt(row['high'])}] | {row['cells']} |" + money_cells)
        if len(self.tied_with_leader) > _SHOWN and not other_claim and not self.separated:
            lines += ["", f"Tied with the leader {self.leader} (not separated from it, "
                          f"{len(self.tied_with_leader)}): " + ", ".join(self.tied_with_leader) + "."]
        return "\n".join(lines) + "\n"

    def _how_it_ended(self) -> str:
        """Whether the stopping rule fired, or what ended the run before it could."""
        if self.stopped:
            return "stopped"
        if not self.finished:
            return "running"
        if not self.stops_early:
            return "finished"
        if self.spend and self.spend.get("stopped_by_budget"):
            return "not reached: the money budget ran out first"
        if self.spent >= self.budget:
            return "not reached: the cell budget ran out first"
        return "not reached: every model is evaluated on every example"

    def _groups_line(self) -> str:
        """What the tie groups certify, as a statement true as written: the groups' first models in a
        certified order (each above every model of the later groups), each group's other members said
        to be *not separated* from its first model, and models whose interval still reaches past every
        group's first model said apart, as too little evaluated to place."""
        index = {m: i for i, m in enumerate(self.models)}
        heads = [g[0] for g in self.groups]
        spread = [index[h] for h in heads]
        top, bottom = max(self.estimates[spread]), min(self.estimates[spread])
        unplaced = [m for g in self.groups for m in g[1:]
                    if self.low[index[m]] <= bottom and self.high[index[m]] >= top]
        parts = []
        for group in self.groups:
            rest = [m for m in group[1:] if m not in unplaced]
            if rest:
                parts.append(f"not separated from {group[0]}: " + ", ".join(
                    f"{m} ({_fmt(self.estimates[index[m]])})" for m in rest))
        loose = ("; too little evaluated to place: " + ", ".join(
            f"{m} [{_fmt(self.low[index[m]])}, {_fmt(self.high[index[m]])}]" for m in unplaced)) if unplaced else ""
        if not self.simultaneous:
            return (f"At certification levels one thing is certified about the order: the best model is "
                    f"{heads[0]}" + (f" or one not separated from it ({', '.join(self.groups[0][1:])})"
                                     if len(self.groups[0]) > 1 else "")
                    + f". The groups' order ({' > '.join(heads)}) is not certified here (`--bounds all` certifies "
                    "it)" + (": " + "; ".join(parts) + loose if parts or loose else "") + ".")
        return (f"Certified order, with probability at least {1 - self.delta:g} (every interval holds at once): "
                f"{' > '.join(heads)}, each above every model of the groups after its own"
                + ("; " + "; ".join(parts) if parts else "") + loose + ". Nothing else about the order is certified.")

    def plot(self, path):
        from pulse_jax.analysis import plotting   # matplotlib only when a figure is asked for

        return plotting.estimates_with_intervals(self, path)


#: Names listed in a report's opening line; a longer list goes below the table.
_SHOWN = 5


def _some(names) -> str:
    """``names`` in a line: all of them up to `_SHOWN`, else the first ones and how many more."""
    names = list(names)
    if len(names) <= _SHOWN:
        return ", ".join(names)
    return ", ".join(names[:_SHOWN]) + f" and {len(names) - _SHOWN} more (all listed below the table)"


def _fmt(x):
    return "n/a" if x is None else f"{x:.3f}"
