"""Money: what a simulation's repetitions paid, to reach a target accuracy and to certify.

A run given ``cost`` (`pulse_jax.simulate`) records ``money[r, k]``, what repetition ``r`` had paid
after step ``k`` (initialization included): the sum of the costs of the cells it observed. Without
costs every cell costs 1, so each function here counts cells. The intervals are bootstrap intervals
over repetitions, paired when two runs are compared (the same resampled repetitions of both; run
them with the same seed), as for cells (`pulse_jax.analysis.metrics`).
"""
from __future__ import annotations

import numpy as np

from pulse_jax.analysis.metrics import SimulationResult, reaching_with_interval, require_same_design
from pulse_jax.errors import require


def _steps(result: SimulationResult) -> None:
    require(result.config.record_steps, "this run kept only its summary (BanditConfig(record_steps=False)): there "
                                        "is no money per step; run with record_steps=True")


def best_at_money(result: SimulationResult, amounts) -> np.ndarray:
    """``(R, len(amounts))``: each repetition's best guess having paid at most each amount (-1: none yet)."""
    _steps(result)
    amounts = np.asarray(amounts, np.float64)
    out = np.empty((result.reps, len(amounts)), np.int64)
    for r in range(result.reps):
        k = np.searchsorted(result.money[r], amounts, side="right") - 1
        out[r] = np.where(k >= 0, result.best[r, np.maximum(k, 0)], -1)
    return out


def money_grid(result: SimulationResult, points: int = 200) -> np.ndarray:
    """Evenly spaced amounts from the cheapest initialization to the most any repetition paid."""
    return np.linspace(result.money[:, 0].min(), result.money[:, -1].max(), points)


def money_to_target(result: SimulationResult, target: float = 0.95, amounts=None, n_boot: int = 1000,
                    seed: int = 0, level: float = 0.95) -> dict:
    """The money from which the accuracy stays at or above ``target``, with a bootstrap interval over
    repetitions (``inf`` at the upper end: more than half the resamples stop short of it)."""
    amounts = money_grid(result) if amounts is None else np.asarray(amounts, np.float64)
    hits = result.is_best(best_at_money(result, amounts)).astype(np.float64)
    point, lo, hi, reached = reaching_with_interval(hits, amounts, target, n_boot, seed, level)
    return {"target": target, "money": point, "low": lo, "high": hi, "level": level, "reached_fraction": reached}


def money_when_certified(result: SimulationResult) -> np.ndarray:
    """``(R,)``: what each repetition had paid when a model was first certified best (``inf``: never).

    The money at the step whose cells reach ``certified_spent``; a run that kept only its summary
    knows it only where its stopping rule stopped it right there."""
    cells = np.asarray(result.certified_spent, np.int64)
    out = np.full(result.reps, np.inf)
    for r in np.flatnonzero(cells >= 0):
        if result.config.record_steps:
            out[r] = result.money[r, int(np.searchsorted(result.spent[r], cells[r], side="left"))]
        else:
            require(result.spent[r, -1] == cells[r], "this run kept only its summary and did not stop when it "
                                                     "certified: run with record_steps=True for the money then")
            out[r] = result.money[r, -1]
    return out


def money_when_stopped(result: SimulationResult) -> np.ndarray:
    """``(R,)``: what each repetition paid when its stopping rule fired (``inf``: it never did)."""
    stopped = np.zeros(result.reps, bool) if result.stopped is None else np.asarray(result.stopped, bool)
    return np.where(stopped, result.money[:, -1], np.inf)


def _median_interval(values: np.ndarray, n_boot: int, seed: int, level: float) -> dict:
    rng = np.random.default_rng(seed)
    boot = np.median(values[rng.integers(0, len(values), (n_boot, len(values)))], axis=1)
    alpha = (1 - level) / 2
    with np.errstate(invalid="ignore"):      # repetitions that never stopped are inf: inf - inf inside quantile
        lo, hi = np.quantile(boot, [alpha, 1 - alpha])
    finite = lambda x: float(x) if np.isfinite(x) else float("nan")   # noqa: E731
    return {"median": finite(np.median(values)), "low": finite(lo), "high": finite(hi),
            "reached_fraction": float(np.isfinite(values).mean())}


def money_to_certify(result: SimulationResult, n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> dict:
    """Median money until a model is certified best, with a bootstrap interval (a repetition that never
    certified counts as paying more than the budget)."""
    return _median_interval(money_when_certified(result), n_boot, seed, level)


def money_to_claim(result: SimulationResult, n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> dict:
    """Median money until the stopping rule fired (its claim: cheapest good-enough model, the front, ...),
    with a bootstrap interval."""
    return _median_interval(money_when_stopped(result), n_boot, seed, level)


def paired_money_savings(method: SimulationResult, baseline: SimulationResult, *, when: str = "stopped",
                         n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> dict:
    """``1 - median(money, method) / median(money, baseline)`` in percent with a paired bootstrap interval,
    the money counted when the stopping rule fired (``when="stopped"``) or at the first certification
    (``"certified"``). NaN where either median is beyond the budget."""
    require_same_design(method, baseline)
    require(when in ("stopped", "certified"), f"when must be 'stopped' or 'certified', got {when!r}")
    take = money_when_stopped if when == "stopped" else money_when_certified
    a, b = take(method), take(baseline)

    def saved(x, y):
        mx, my = np.median(x, axis=-1), np.median(y, axis=-1)
        with np.errstate(invalid="ignore"):
            return np.where(np.isfinite(mx) & np.isfinite(my) & (my > 0), 100.0 * (1.0 - mx / my), np.nan)

    resamples = np.random.default_rng(seed).integers(0, method.reps, (n_boot, method.reps))
    alpha = (1 - level) / 2
    lo, hi = np.quantile(saved(a[resamples], b[resamples]), [alpha, 1 - alpha])
    return {"when": when, "savings_pct": float(saved(a, b)), "low": float(lo), "high": float(hi), "level": level,
            "method_median": float(np.median(a)), "baseline_median": float(np.median(b))}
