"""Hyperparameter sweeps as one compiled program: every (parameter point, repetition) pair at once.

`pulse_jax.BanditParams` are traced, so the points of a sweep are just
another ``vmap`` axis: ``sweep`` stacks (point, repetition) pairs and runs
them through the same cached executable as `pulse_jax.simulate`,
chunked by memory and sharded over devices. Repetition ``r`` uses the same key
at every point (common random numbers), so differences between points are
paired, and each point equals ``simulate(..., params=point, seed=seed)``.
"""
from __future__ import annotations

import csv
import dataclasses
import itertools
import json
import math
from pathlib import Path
from typing import Callable, Mapping, Sequence

import jax
import numpy as np

from pulse_jax import engine
from pulse_jax.fileio.jsonable import plain_number
from pulse_jax.analysis import metrics
from pulse_jax.engine import BanditConfig
from pulse_jax.errors import PulseInputError, require
from pulse_jax.engine.params import BanditParams, RunParams, as_number
from pulse_jax.stats.seeds import check_seed
from pulse_jax.simulation import SimulationResult, check_cost, execute, is_count, prepare_run, result_from, start_rows


@dataclasses.dataclass
class SweepResult:
    """One `SimulationResult` per sweep point, and the tidy table of them."""

    method: str
    config: BanditConfig
    axes: tuple[str, ...]              # the parameters that were swept
    points: list[RunParams]
    results: list[SimulationResult]
    baseline: int                      # index of the point that savings are measured against
    seconds: float                     # wall time, compilation included
    compile_seconds: float
    baseline_reason: str = "given"     # why that point: given, the defaults, or the best point

    def values(self, k: int) -> dict:
        """The swept parameters' values at point ``k``."""
        return {a: plain_number(self.points[k].value(a)) for a in self.axes}

    def table(self, targets=(0.9, 0.95), n_boot: int = 1000) -> list[dict]:
        """One row per point: Accuracy@budget (SE), budget to each target with a bootstrap interval,
        savings vs the baseline point, and certification when the method has confidence sequences."""
        found = [{t: metrics.budget_to_target(r, t, n_boot=n_boot) for t in targets} for r in self.results]
        rows = []
        for k, r in enumerate(self.results):
            acc, se = r.accuracy_at_budget([r.config.budget])
            row = {"point": k, **self.values(k), "baseline": k == self.baseline, "reps": r.reps,
                   "accuracy": float(acc[0]), "accuracy_se": float(se[0])}
            for t in targets:
                b, base = found[k][t], found[self.baseline][t]["budget"]
                tag = f"{t * 100:g}"
                row[f"budget_to_{tag}"] = plain_number(b["budget"])
                row[f"budget_to_{tag}_low"] = plain_number(b["low"])
                row[f"budget_to_{tag}_high"] = plain_number(b["high"])
                row[f"savings_{tag}_pct"] = plain_number(metrics.savings(b["budget"], base))
            if r.cs_low is not None and np.isfinite(r.cs_low).all():
                cert = r.certification()
                row["certified_fraction"] = cert["certified_fraction"]
                row["median_cells_to_certify"] = plain_number(cert["median_cells"])
            rows.append(row)
        return rows

    def write(self, out_dir, targets=(0.9, 0.95), *, n_boot: int = 1000, figure: bool = True,
              figure_target: float | None = None, rows: list[dict] | None = None, inputs=()) -> dict:
        """``sweep.json``, ``sweep.csv``, ``sweep.png`` (budget to ``figure_target``, default the
        highest target, over the grid) and ``provenance.json`` (``inputs``: the files the data came from)
        in ``out_dir``; ``rows`` reuses a `table` already computed."""
        from pulse_jax.fileio import files, provenance

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        files.remove_previous_outputs(out)
        record = provenance.write(out, provenance.collect(
            config=self.config, plugins=self.results[0].plugins, params=self.points[self.baseline],
            seed=self.results[0].seed, inputs=inputs, extra={"reps": self.results[0].reps, "axes": list(self.axes),
                                       "points": [p.to_dict() for p in self.points]}),
            files=["sweep.json", "sweep.csv", *(["sweep.png"] if figure else [])])
        rows = self.table(targets, n_boot) if rows is None else rows
        summary = {"method": self.method, "axes": list(self.axes), "baseline": self.baseline,
                   "config": {k: v for k, v in dataclasses.asdict(self.config).items()
                              if not isinstance(v, (tuple, list, dict))},
                   "reps": self.results[0].reps, "seed": self.results[0].seed,
                   "points": [p.to_dict() for p in self.points], "seconds": round(self.seconds, 3),
                   "compile_seconds": round(self.compile_seconds, 3), "table": rows}
        paths = {"json": out / "sweep.json", "csv": out / "sweep.csv", "provenance": record}
        files.write_atomically(paths["json"], json.dumps(summary, indent=2))
        with files.atomic_open(paths["csv"], "w", newline="", encoding="utf-8") as handle:
            fields = list(dict.fromkeys(k for row in rows for k in row))
            writer = csv.DictWriter(handle, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
        if figure:
            from pulse_jax.analysis import plotting

            paths["figure"] = plotting.sweep_figure(self, rows, out / "sweep.png",
                                                    target=figure_target or max(targets))
        return paths

    def format_table(self, rows=None, target: float = 0.95) -> str:
        """The table as fixed-width text (the CLI prints it). The last column is the change in cells to the
        target against the baseline point, with the sign `pulse_jax.analysis.results.comparison_table`
        uses: -x% is x% fewer cells (the rows' ``savings_*_pct`` are the same numbers, positive = fewer)."""
        rows = rows if rows is not None else self.table((0.9, target))
        tag = f"{target * 100:g}"
        head = " | ".join(f"{a:>13}" for a in self.axes)
        lines = [f"{head} | {'accuracy@budget':>16} | {'to ' + tag + '% (95% CI)':>28} | {'cells':>8}"]
        lines.append("-" * len(lines[0]))
        for row in rows:
            values = " | ".join(f"{metrics.grid_value_text(row[a]):>13}" for a in self.axes)
            b = row[f"budget_to_{tag}"]
            reach = "not reached" if b is None else (
                f"{b:,.0f} [{_cells(row[f'budget_to_{tag}_low'])}, {_cells(row[f'budget_to_{tag}_high'])}]")
            save = "baseline" if row["baseline"] else ("n/a" if row[f"savings_{tag}_pct"] is None
                                                       else f"{-row[f'savings_{tag}_pct']:+.0f}%")
            lines.append(f"{values} | {row['accuracy']:>8.3f} +- {row['accuracy_se']:.3f} | {reach:>28} | {save:>8}")
        lines.append(f"(cells: -x% is x% fewer cells than the baseline point to {tag}% accuracy; +x%: more)")
        return "\n".join(lines)




def _cells(x):
    return "> budget" if x is None else f"{x:,.0f}"


def grid_points(grid, base=None, plugins=None) -> tuple[tuple[str, ...], list[RunParams]]:
    """``(axes, points)`` from a grid: a mapping ``{name: values}`` (their Cartesian product, in the
    order given), a sequence of mappings (an explicit list) or a sequence of ``RunParams`` /
    ``BanditParams``. A name is a number's path (``engine.delta``, ``rule.exploration``,
    ``estimator.fixed_lambda``, ``stop.epsilon``) or its field name alone where that is unambiguous.
    Unswept numbers take ``base`` (anything `pulse_jax.engine.params.run_params` takes; default: the
    defaults). ``plugins`` is the run's ``(estimator, rule, stop)`` (default: the paper's PULSE with
    the UCB-E index rule and a fixed budget). Every point is checked against the plug-ins' declared
    ranges; one-line errors name the number."""
    if plugins is None:
        from pulse_jax import estimators, rules, stopping

        plugins = (estimators.pulse(), rules.ucb_index_rule(), stopping.spend_budget())
    base = engine.resolve_params(base, plugins, "base")
    require(grid is not None, "grid: pass {parameter: [values, ...]} or a list of points")
    if isinstance(grid, Mapping):
        require(len(grid) > 0, "grid: no parameter given")
        axes, lists = [], []
        for name, values in grid.items():
            base.path_of(str(name), "grid")
            values = [values] if np.isscalar(values) else list(values)
            require(len(values) > 0, f"grid: parameter {name!r} has no values")
            lists.append([as_number(name, v, f"grid {name}") for v in values])
            axes.append(str(name))
        points = [engine.resolve_params(base.replace(dict(zip(axes, combo))), plugins, f"grid point {k}")
                  for k, combo in enumerate(itertools.product(*lists))]
        return tuple(axes), points
    require(isinstance(grid, Sequence) and len(grid) > 0, "grid: an empty list of points")
    points, axes = [], []
    for k, item in enumerate(grid):
        where = f"grid point {k}"
        if isinstance(item, (RunParams, BanditParams)):
            points.append(engine.resolve_params(item, plugins, where))
            continue
        require(isinstance(item, Mapping), f"{where}: expected a dict or RunParams, got {type(item).__name__}")
        values = {str(name): v for name, v in item.items()}
        for name in values:
            base.path_of(name, where)
        axes += [a for a in values if a not in axes]
        points.append(engine.resolve_params(base.replace(values), plugins, where))
    if not axes:   # RunParams points: the numbers that differ
        axes = [a for a in points[0].paths() if len({str(plain_number(p.value(a))) for p in points}) > 1]
    return tuple(axes), points


def _baseline_index(baseline, axes, points) -> int | None:
    """The index ``baseline`` names (None: chosen after the run, by `_paper_or_best`)."""
    if baseline is None:
        return None
    if isinstance(baseline, (int, np.integer)) and not isinstance(baseline, bool):
        require(0 <= baseline < len(points), f"baseline: point {baseline} does not exist ({len(points)} points)")
        return int(baseline)
    require(isinstance(baseline, Mapping), f"baseline: a point index or a dict of values, got {baseline!r}")
    want = {}
    for name, value in baseline.items():
        points[0].path_of(str(name), "baseline")
        want[str(name)] = as_number(name, value, "baseline")
    for k, p in enumerate(points):
        if all(_same(p.value(name), v) for name, v in want.items()):
            return k
    raise PulseInputError(f"baseline: no sweep point has {', '.join(f'{k}={v:g}' for k, v in want.items())}")


def _paper_or_best(axes, points, results, plugins) -> tuple[int, str]:
    """The default baseline: the point with every swept number at its default (the engine's and the
    plug-ins' declared defaults; for the built-in plug-ins, the paper's values) when the grid has it;
    otherwise the point with the highest accuracy averaged over the run (area under its accuracy
    curve), the first of ties."""
    defaults = engine.resolve_params(None, plugins, "the defaults")
    for k, point in enumerate(points):
        if all(_same(point.value(a), defaults.value(a)) for a in axes):
            return k, "every swept number at its default"
    return (int(np.argmax([r.correct().mean() for r in results])),
            "the most accurate point over the run (the grid lacks the defaults)")


def _same(a, b) -> bool:
    a, b = float(a), float(b)
    return (math.isnan(a) and math.isnan(b)) or a == b


def sweep(scores, config: BanditConfig, plugins="pulse", grid=None, reps: int = 100, seed: int = 0, *,
          V=None, base: BanditParams | None = None, baseline=None, chunk_size: int | None = None,
          progress: bool | Callable[[int, int, float], None] | None = None, devices=None,
          model_names=None, row_prior=None, cost=None) -> SweepResult:
    """Run every point of ``grid`` x ``reps`` repetitions as one compiled program.

    Args:
      scores: the candidates' score matrix, as in `pulse_jax.simulate`.
      config: the run's shape and plug-ins (`pulse_jax.BanditConfig`).
      plugins: a `pulse_jax.Plugins`, or an estimator or its name (as `pulse_jax.simulate` takes).
      V: example embeddings (methods that use predictions).
      grid: ``{"rule.exploration": [0.25, 1, 4], "refit_lr": [0.03, 0.1]}`` (Cartesian
        product), or a list of dicts / ``RunParams`` (explicit points).
        Sweepable: every number of the run, by its path or (unambiguous) field name: the engine's
        (`pulse_jax.BanditParams`) and each plug-in's (``rule.exploration``, ``rule.leader_fraction``,
        ``estimator.fixed_lambda`` -- NaN is the paper's adaptive lambda --, ``stop.epsilon``, ...).
      base: values of the parameters not in the grid (default: the paper's): a dict
        ``{name: value}``, a ``RunParams`` or a ``BanditParams``.
      baseline: the point savings are measured against: an index or a dict of
        values (default: every swept number at its default when the grid has it, else the
        point with the highest accuracy averaged over the run).
      progress: a progress bar over all (point, repetition) pairs: True, False,
        or None (the default) for one only when a person is watching.
      reps: repetitions per point.
      seed: the seed; repetition ``r`` uses the same key at every point.
      chunk_size: repetitions per compiled call, as in `pulse_jax.simulate`.
      devices: the devices to spread repetitions over, as in `pulse_jax.simulate`.
      model_names: the candidates' names, for the results.
      row_prior: as in `pulse_jax.simulate` (needs ``refit_prior > 0`` at some point of the grid).
      cost: as in `pulse_jax.simulate`.

    Point ``k`` equals ``simulate(scores, config, plugins, params=points[k],
    V=V, reps=reps, seed=seed)``: repetition ``r`` uses the same key at every
    point, so comparisons between points are paired.
    """
    config, plugins, scores, V = prepare_run(scores, config, plugins, V)
    estimator = plugins.estimator
    axes, points = grid_points(grid, base, plugins)
    for k, point in enumerate(points):
        engine.check_levels(config, plugins, point, f"grid point {k}")
    check_seed(seed)
    require(is_count(reps), f"reps must be a positive integer, got {reps!r}")
    reps = int(reps)
    baseline = _baseline_index(baseline, axes, points)
    P = len(points)
    rep_index = np.tile(np.arange(reps), P)
    stacked = jax.tree_util.tree_map(lambda *vs: np.repeat(np.asarray(vs, np.float32), reps), *points)
    start = start_rows(None, row_prior, config, estimator, V, stacked)._replace(
        cost=check_cost(cost, scores, stop=plugins.stop))
    out, seconds, compile_seconds = execute(scores, config, plugins, V, rep_index, stacked, seed=seed,
                                            chunk_size=chunk_size, progress=progress, devices=devices, start=start)
    results = []
    for k, point in enumerate(points):
        part = _take(out, slice(k * reps, (k + 1) * reps))
        results.append(result_from(part, plugins, config, point, seed, scores, seconds=seconds,
                                   compile_seconds=compile_seconds, model_names=model_names, cost=start.cost))
    reason = "given"
    if baseline is None:
        baseline, reason = _paper_or_best(axes, points, results, plugins)
    return SweepResult(estimator.name, config, axes, points, results, baseline, seconds, compile_seconds, reason)


def _take(tree, index):
    return jax.tree_util.tree_map(lambda a: a[index], tree)
