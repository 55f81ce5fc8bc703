"""Summaries of simulations for people: a method comparison (text table, results directory)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pulse_jax.analysis import metrics, plotting, spending
from pulse_jax.fileio.provenance import clean_json
from pulse_jax.stopping.base import no_claim

if TYPE_CHECKING:   # annotations only: analysis reads results, simulate makes them
    from pulse_jax.analysis.metrics import SimulationResult


def report_budgets(config, points: int = 6) -> np.ndarray:
    """A few budgets from just after initialization to the full budget."""
    return np.unique(np.linspace(config.init_cells + config.bandit_budget / points, config.budget,
                                 points).round().astype(np.int64))


def comparison_table(results: dict[str, SimulationResult], targets=(0.9, 0.95)) -> str:
    """Accuracy@budget (+- SE) per method, then the budget to reach each target and the savings against
    the first method given (the baseline: ``ucbe`` in the CLI's default order)."""
    any_result = next(iter(results.values()))
    budgets = report_budgets(any_result.config)
    names = [plotting.LABELS.get(k, k) for k in results]
    lines = [f"{'budget (cells)':>16} | " + " | ".join(f"{n:>15}" for n in names)]
    lines.append("-" * len(lines[0]))
    curves = {k: r.accuracy_at_budget(budgets) for k, r in results.items()}
    for j, b in enumerate(budgets):
        cells = [f"{curves[k][0][j]:.3f} +- {curves[k][1][j]:.3f}" for k in results]
        lines.append(f"{b:>16,} | " + " | ".join(f"{c:>15}" for c in cells))
    for target in targets:
        found = {k: metrics.budget_to_target(r, target, n_boot=200) for k, r in results.items()}
        baseline = next(iter(results))
        base = found[baseline]["budget"]
        cells = []
        for k in results:
            b = found[k]["budget"]
            text = "not reached" if not np.isfinite(b) else f"{int(b):,}"
            if k != baseline and np.isfinite(b) and np.isfinite(base):
                text += f" ({-metrics.savings(b, base):+.0f}%)"      # the change in cells: -18% is 18% fewer
            cells.append(text)
        lines.append(f"{'to ' + format(target, '.0%') + ' acc.':>16} | " + " | ".join(f"{c:>15}" for c in cells))
    cells = []
    for r in results.values():
        cert = metrics.cells_to_certify(r, n_boot=200) if r.cs_low is not None and np.isfinite(r.cs_low).all() else None
        if cert is None:
            cells.append("no interval")
        elif np.isfinite(cert["median"]):
            cells.append(f"{cert['median']:,.0f} ({cert['certified_fraction']:.0%})")
        else:
            cells.append(f"{cert['certified_fraction']:.0%} certified")
    lines.append(f"{'certified best':>16} | " + " | ".join(f"{c:>15}" for c in cells))
    lines.append(f"{'':>16}   (-x%: x% fewer cells than {next(iter(results))} to the target; +x%: more)")
    claiming = {r.stop.name for r in results.values() if r.stop.claim is not no_claim}
    if claiming:   # what the stopping rules claimed: how often they stopped, how soon, how often wrongly
        found = {k: metrics.claims(r) if r.stop.claim is not no_claim else None for k, r in results.items()}
        stopped = ["no claim" if c is None else f"{c['median_cells']:,.0f} ({c['stopped_fraction']:.0%})"
                   if c["stopped_fraction"] else "0% stopped" for c in found.values()]
        wrong = ["" if c is None else f"{c['error_rate']:.1%} ({c['errors']})" for c in found.values()]
        lines.append(f"{'stopped':>16} | " + " | ".join(f"{c:>15}" for c in stopped))
        lines.append(f"{'false claims':>16} | " + " | ".join(f"{c:>15}" for c in wrong))
        lines.append(f"{'':>16}   (stopped: the {'/'.join(sorted(claiming))} rule's median cells when it fired (share "
                     "of repetitions); false claims: share of repetitions whose claim is false, at most delta)")
        if all(c is None or not c["stopped_fraction"] for c in found.values()):
            lines.append(f"{'':>16}   (no repetition stopped: the budget ran out first; a larger --budget, or "
                         "--bounds certification, lets the rule stop)")
    if any(r.cost is not None for r in results.values()):
        lines.append(f"{'money (median)':>16} | " + " | ".join(f"{_money(r):>15}" for r in results.values()))
        lines.append(f"{'':>16}   (what the cells paid for cost, in the units of --cost: when the rule stopped, "
                     "else at the end of the run)")
    return "\n".join(lines)


def _money(result: SimulationResult) -> str:
    stopped = result.stopped is not None and bool(np.any(result.stopped))
    value = spending.money_to_claim(result, n_boot=200)["median"] if stopped else float(np.median(result.money[:, -1]))
    return "beyond budget" if not np.isfinite(value) else f"{value:,.4g}"


def summary(results: dict[str, SimulationResult]) -> dict:
    any_result = next(iter(results.values()))
    cfg = any_result.config
    budgets = metrics.budget_grid(any_result, 50)
    out = {"config": {k: v for k, v in dataclasses.asdict(cfg).items() if not isinstance(v, (tuple, list, dict))},
           "init_cells": cfg.init_cells, "n_steps": cfg.n_steps,
           "best_model": any_result.best_model, "n_best": any_result.n_best,
           "best_models": any_result.best_models.tolist(),
           "best_model_name": any_result.model_names[any_result.best_model] if any_result.model_names else None,
           "methods": {}}
    out["params"] = {k: r.params.to_dict() for k, r in results.items()}   # every method's own numbers
    for k, r in results.items():
        acc, se = r.accuracy_at_budget(budgets)
        out["methods"][k] = {
            "reps": r.reps, "seed": r.seed, "seconds": round(r.seconds, 3),
            "compile_seconds": round(r.compile_seconds, 3),
            "budgets": budgets.tolist(), "accuracy": acc.tolist(), "accuracy_se": se.tolist(),
            "budget_to_90": metrics.budget_to_target(r, 0.9, n_boot=200),
            "budget_to_95": metrics.budget_to_target(r, 0.95, n_boot=200),
            "final_accuracy": float(r.correct()[:, -1].mean()),
            "final_coverage_min": float(np.nanmin(r.coverage())) if np.isfinite(r.radius).all() else None,
        }
        if r.stop.claim is not no_claim:
            out["methods"][k]["stop"] = {key: v for key, v in metrics.claims(r).items() if key != "cells"}
        if r.cost is not None:
            out["methods"][k]["money"] = {"cost_per_cell": r.cost.tolist(),
                                          "median_final": float(np.median(r.money[:, -1])),
                                          "to_claim": spending.money_to_claim(r, n_boot=200)}
        if r.cs_low is not None and np.isfinite(r.cs_low).all():
            out["methods"][k]["confidence_sequence"] = {
                "anytime_coverage": r.anytime_coverage(),
                "median_final_half_width": float(np.median((r.cs_high - r.cs_low) / 2)),
                "cells_to_certify": metrics.cells_to_certify(r, n_boot=200)}
    return out


def write_results(results: dict[str, SimulationResult], out_dir, title: str = "", inputs=()) -> dict[str, Path]:
    """Write ``summary.json``, ``<method>.npz``, ``accuracy.png`` (with costs also ``cost_accuracy.png``)
    and ``provenance.json`` (``inputs``: the files the scores and side information came from) into
    ``out_dir``; provenance lists every one, so ``--force`` replaces exactly them."""
    from pulse_jax.fileio import provenance

    from pulse_jax.fileio import files

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files.remove_previous_outputs(out_dir)
    first = next(iter(results.values()))
    paths = {"provenance": provenance.write(out_dir, provenance.collect(
        config=first.config, seed=first.seed, inputs=inputs, method=list(results),
        extra={"params": {k: r.params.to_dict() for k, r in results.items()},
               "configs": {k: provenance.describe_config(r.config) for k, r in results.items()},
               "plugins": {k: provenance.describe_plugins(r.plugins) for k, r in results.items()
                           if r.plugins is not None},
               "reps": {k: r.reps for k, r in results.items()}}),
        files=["summary.json", *(f"{k}.npz" for k in results), "accuracy.png"]
        + (["cost_accuracy.png"] if any(r.cost is not None for r in results.values()) else []))}
    paths["summary"] = files.write_atomically(out_dir / "summary.json", json.dumps(clean_json(summary(results)),
                                                                                      indent=2))
    for k, r in results.items():
        paths[k] = out_dir / f"{k}.npz"
        with files.atomic_open(paths[k], "wb") as handle:
            np.savez_compressed(handle, best=r.best, spent=r.spent, chosen=r.chosen, lam=r.lam,
                                estimates=r.estimates, radius=r.radius, n_obs=r.n_obs, n_pulls=r.n_pulls,
                                true_means=r.true_means,
                                cs_low=r.cs_low, cs_high=r.cs_high, certified_spent=r.certified_spent,
                                certified_model=r.certified_model,
                                **({} if r.stopped is None else {"stopped": r.stopped}),
                                **({} if r.claimed is None else {"claimed": r.claimed}),
                                models=np.array(r.model_names or [], dtype=str))
    paths["plot"] = plotting.accuracy_vs_budget(list(results.values()), out_dir / "accuracy.png", title=title)
    priced = [r for r in results.values() if r.cost is not None]
    if priced:   # the true means against what a cell costs, each model ringed by how often it was claimed
        r = priced[0]
        names = r.model_names or [f"model {i}" for i in range(len(r.true_means))]
        claimed = None if r.claimed is None else np.asarray(r.claimed, float).mean(0)
        paths["cost_plot"] = plotting.cost_accuracy(out_dir / "cost_accuracy.png", r.cost, r.true_means, names,
                                                    claimed=claimed, label="true mean", title=f"{r.method}: true means and cost; ringed: "
                                                    f"claimed by {r.stop.name}")
    return paths


