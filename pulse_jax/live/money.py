"""Budgets in money: prices, what a cell costs, and the cost line shown before anything is paid.

A cell (one model on one example) costs ``per_call + input_tokens * input / 1e6 +
output_tokens * output / 1e6`` dollars under a `Price`. What a run *will* spend is estimated
from a token history (`pulse_jax.harnesses.inspect_logs.InspectLogs`, e.g. earlier Inspect logs of
the same task): each candidate's mean tokens per cell where the history has the model, the
history's mean over its models otherwise. What a run *has* spent is measured: the tokens each
evaluated cell used (an Inspect scorer records them), or the flat ``per_call`` price.

`Meter` keeps the tally for a live run; its ``fits`` is the gate `pulse_jax.live.run` asks
for each batch before paying for it, counting every batch in flight at its own model's price, so
a ``budget_usd`` is never exceeded by more than the batches' deviation from their expected cost
(none with a price per call).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Mapping, Sequence

import numpy as np

from pulse_jax.errors import PulseInputError, require


@dataclasses.dataclass(frozen=True)
class Price:
    """Dollars per million input and output tokens, plus a flat amount per call (cell)."""

    input_per_million: float = 0.0
    output_per_million: float = 0.0
    per_call: float = 0.0

    def cost(self, input_tokens, output_tokens):
        """Dollars for cells with these token counts (arrays broadcast)."""
        return (self.per_call + np.asarray(input_tokens) * self.input_per_million / 1e6
                + np.asarray(output_tokens) * self.output_per_million / 1e6)

    @property
    def per_token(self) -> bool:
        return bool(self.input_per_million or self.output_per_million)


def _number(text: str, item: str, option: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise PulseInputError(f"{option} {item!r}: {text!r} is not a number") from None
    require(math.isfinite(x) and x >= 0, f"{option} {item!r}: {text} must be a non-negative number")
    require(x <= 1e12, f"{option} {item!r}: {text} dollars is no price (at most 1e12 per call or per million "
                       "tokens)")
    return x


def parse_prices(items: Sequence[str], models: Sequence[str], cost_per_call: float | None = None) -> dict[str, Price]:
    """``--price MODEL=IN/OUT`` entries (dollars per million input / output tokens) or ``MODEL=DOLLARS``
    (per call; ``*`` for every model without its own entry) and ``--cost-per-call`` (added to every
    call), as one `Price` per model. Every model must
    get a price; an entry naming no model is refused (a typo would price nothing)."""
    flat = 0.0
    if cost_per_call is not None:
        flat = _number(str(cost_per_call), str(cost_per_call), "--cost-per-call")
    table: dict[str, Price] = {}
    for item in items:
        name, numbers = _price_entry(item, "--price")
        require(name == "*" or name in models, f"--price {item!r}: no candidate {name!r} (candidates: "
                                               f"{', '.join(list(models)[:5])}{', ...' if len(models) > 5 else ''})")
        require(name not in table, f"--price: {name!r} is priced twice")
        table[name] = Price(per_call=flat + numbers[0]) if len(numbers) == 1 else Price(*numbers, flat)
    prices = {}
    for m in models:
        price = table.get(m, table.get("*"))
        if price is None:
            require(not table, f"--price: no price for {m!r}; give one (--price {m}=IN/OUT) or a default (*=IN/OUT)")
            price = Price(per_call=flat)
        prices[m] = price
    return prices


def _price_entry(item: str, option: str) -> tuple[str, list[float]]:
    """``MODEL=IN/OUT`` or ``MODEL=DOLLARS`` as ``(model, [numbers])``, each number non-negative."""
    name, sep, value = item.rpartition("=")
    require(sep and name, f"{option} {item!r}: expected MODEL=IN/OUT (dollars per million tokens), e.g. "
                          "openai/gpt-4o-mini=0.15/0.60, MODEL=DOLLARS per call, or * for every model")
    parts = value.split("/")
    require(len(parts) in (1, 2), f"{option} {item!r}: expected IN/OUT after '=', e.g. 0.15/0.60, or dollars "
                                  "per call, e.g. 0.002")
    return name, [_number(part, item, option) for part in parts]


def check_price_syntax(items: Sequence[str], option: str = "--price") -> None:
    """Each entry well formed (`_price_entry`); the models are checked against the candidates when they
    are known (`parse_prices`)."""
    for item in items:
        _price_entry(item, option)


def expected_cost_per_cell(models: Sequence[str], prices: Mapping[str, Price], history=None) -> np.ndarray:
    """Each candidate's expected dollars per cell: its price at its mean tokens per cell in ``history``
    (an `InspectLogs`; a model absent there gets the history's mean over its models)."""
    if not any(prices[m].per_token for m in models):
        return np.array([prices[m].per_call for m in models], dtype=float)
    require(history is not None, "--price in tokens needs a token history to estimate the cost: --usage LOGS "
                                 "(Inspect logs of the task), or price per call with --cost-per-call")
    names = list(history.scores.models)
    model_in = np.nanmean(history.input_tokens, axis=1)
    model_out = np.nanmean(history.output_tokens, axis=1)
    pooled = (float(np.nanmean(model_in)), float(np.nanmean(model_out)))
    out = []
    for m in models:
        k = names.index(m) if m in names else None
        t_in, t_out = (model_in[k], model_out[k]) if k is not None and not np.isnan(model_in[k]) else pooled
        out.append(float(prices[m].cost(t_in, t_out)))
    return np.array(out)


def money(x: float | None) -> str:
    """Dollars as the cost lines and reports print them: cents from $1 up; below, four significant
    digits (at least two decimals), so a per-cell price times a cell count checks against the total
    printed beside it ($0.0003507 x 600 = $0.2104)."""
    if x is None:
        return "n/a"
    if abs(x) >= 1:
        return f"${x:,.2f}"
    if x == 0:
        return "$0.00"
    text = f"{x:.{max(4, 3 - math.floor(math.log10(abs(x))))}f}".rstrip("0")
    return "$" + text + "0" * max(0, 2 - len(text.split(".")[1]))


class Meter:
    """The money side of a live run: expected cost per cell, measured spend, and the budget gate.

    Args:
      models: the candidates, in the selector's order.
      prices: one `Price` per candidate (see `parse_prices`).
      expected: expected dollars per cell, per candidate (see `expected_cost_per_cell`).
      budget_usd: stop asking before a batch that could take the spend past this (None: no limit).
      tokens: ``tokens(model, example_ids) -> (input, output)`` measured for evaluated cells (an
        `InspectScorer`'s ``tokens``); None prices cells at their expected cost (exact for a flat price).
    """

    def __init__(self, models: Sequence[str], prices: Mapping[str, Price], expected, budget_usd: float | None = None,
                 tokens: Callable | None = None):
        self.models, self.prices = list(models), dict(prices)
        self.expected = np.asarray(expected, dtype=float)
        require(budget_usd is None or budget_usd > 0, f"--budget-usd must be positive, got {budget_usd}")
        self.budget_usd, self._tokens = budget_usd, tokens
        self._counted: dict[str, set] = {m: set() for m in self.models}
        self._asked: dict[str, int] = {}
        self._told_usd = self._told_expected = self.input_tokens = self.output_tokens = 0.0
        self._told_usd_by = np.zeros(len(self.models))
        self._extra_by = np.zeros(len(self.models))
        self._told_cells = 0
        self.usd = self.expected_usd = 0.0
        self.cells = 0
        self.stopped = False      # the gate refused the last batch asked: the run ended for its money budget
        self.refused: tuple | None = None   # (model, dollars) of that batch

    def update(self, evaluated: Mapping[str, Sequence], asked: Mapping[str, int] | None = None) -> float:
        """Add the cells of ``evaluated`` (``{model: example ids told}``) not counted yet, and take ``asked``
        (``{model: cells sent to the scorer}``, returned or not: `pulse_jax.live.ledger.Ledger.asked_cells`) as
        the ledger of what was paid; the spend so far.

        Told cells cost what they measured (their tokens) or their expected cost; cells paid for and not
        told (in flight, or lost at a kill) cost their expected cost."""
        for k, m in enumerate(self.models):
            new = [e for e in evaluated.get(m, ()) if e not in self._counted[m]]
            if not new:
                continue
            self._counted[m].update(new)
            self._told_cells += len(new)
            self._told_expected += float(self.expected[k]) * len(new)
            if self._tokens is not None:
                t_in, t_out = self._tokens(m, new)
                self.input_tokens += t_in
                self.output_tokens += t_out
                p = self.prices[m]
                usd = p.per_call * len(new) + (t_in * p.input_per_million + t_out * p.output_per_million) / 1e6
            else:
                usd = float(self.expected[k]) * len(new)
            self._told_usd += usd
            self._told_usd_by[k] += usd
        if asked is not None:
            self._asked = dict(asked)
        extra = np.array([max(0, int(self._asked.get(m, 0)) - len(self._counted[m])) for m in self.models], float)
        self._extra_by = extra * self.expected
        self.cells = self._told_cells + int(extra.sum())
        self.usd = self._told_usd + float(extra @ self.expected)
        self.expected_usd = self._told_expected + float(extra @ self.expected)
        return self.usd

    def by_model(self) -> np.ndarray:
        """Each candidate's dollars so far (as `update` last counted them), in the candidates' order."""
        return self._told_usd_by + self._extra_by

    def fits(self, model: str, cells: int, evaluated: Mapping[str, Sequence],
             asked: Mapping[str, int] | None = None) -> bool:
        """Whether a batch of ``cells`` cells of ``model``, at that model's expected cost, keeps the spend
        (told cells, and every cell paid for and not yet returned, each at its own model's price) within
        the budget. A refusal is not final: the run waits for its batches in flight, asks again, and ends
        for its budget only when the batch still does not fit with nothing in flight (``stopped``)."""
        if self.budget_usd is None:
            return True
        need = float(self.expected[self.models.index(model)]) * int(cells)
        # A relative slack of 1e-9 absorbs the rounding of a sum of prices, never a whole cell.
        ok = self.update(evaluated, asked) + need <= self.budget_usd * (1 + 1e-9)
        self.stopped, self.refused = (not ok), (None if ok else (model, need))
        return ok

    def cost_line(self, budget_cells: int, first_look_cells: int) -> str:
        """What the run can spend, said before the first paid call."""
        dearest, mean = float(self.expected.max()), float(self.expected.mean())
        most = budget_cells * dearest if self.budget_usd is None else min(self.budget_usd, budget_cells * dearest)
        why = "the money budget" if self.budget_usd is not None and most == self.budget_usd else \
            f"{budget_cells:,} cells at the dearest model's {money(dearest)}"
        # "about": the token counts behind the estimate are expected ones; a real call may use more.
        return (f"cost: up to about {money(most)} ({why}); the first look ({first_look_cells:,} cells) "
                f"{money(first_look_cells * mean)}; {money(1000 * mean)} per 1,000 cells at the models' mean; "
                f"the whole budget {money(budget_cells * mean)} expected")

    def summary(self) -> dict:
        """The spend in cells, tokens and dollars; ``expected_usd``: what the same cells were expected to
        cost (the estimate behind the cost line)."""
        out = {"cells": self.cells, "usd": round(self.usd, 6), "expected_usd": round(self.expected_usd, 6),
               "budget_usd": self.budget_usd,
               "stopped_by_budget": self.stopped}
        if self._tokens is not None:
            out.update(input_tokens=int(self.input_tokens), output_tokens=int(self.output_tokens))
        return out

    def line(self) -> str:
        tokens = (f", {int(self.input_tokens):,} input + {int(self.output_tokens):,} output tokens"
                  if self._tokens is not None else "")
        tail = f" of {money(self.budget_usd)}" if self.budget_usd is not None else ""
        why = ""
        if self.stopped and self.refused is not None:
            model, need = self.refused
            why = (f" (stopped: the next batch, {model} at {money(need)}, does not fit in the "
                   f"{money(max(0.0, self.budget_usd - self.usd))} left)")
        return f"spent: {self.cells:,} cells{tokens}, {money(self.usd)}{tail}" + why
