"""Two numbers a certified selection could tune, swept at ``select``'s levels: Top-Two's leader fraction
(``rule.leader_fraction``) and PULSE's lambda (``estimator.fixed_lambda``), cells to certify the best.

Paired repetitions (the same seeds and draws for every value) of ``select``'s configuration (B = 8,
Top-Two with the interval challenger, certification bounds, betting sequences, delta 0.05 with 95% of it
on the upper bounds, bets tuned to the running gap, the whole matrix allowed) on the built-in live
example and the two shipped real matrices, each value of a number one point of one compiled sweep:

* the leader fraction ``beta`` in {0.3, 0.4, 0.5, 0.6, 0.7, 0.8} for ``pulse_hedged`` and UCB-E (0.5 is
  ``select``'s);
* ``pulse_hedged``'s lambda in {0.25, 0.5, 0.75, 0.9, 1} (0.5 is the estimator's own): the proxies'
  range is ``1 + lambda``, so a larger lambda buys less variance with a wider range
  (docs/confidence.md).

Both are choices of the sampling and of the proxies made before each batch, so every value keeps
``P(a wrong claim) <= delta``; the table counts the wrong certificates all the same. Each row gives the
mean cells and their ratio to the default's, paired (mean of the per-repetition ratios, with its
standard error).

    python benchmarks/statistics/select_knobs.py --reps 100 --out docs/benchmarks/select_knobs.json

Prints a table and writes ``--out`` (JSON, each matrix kept as it finishes, so a rerun resumes) and
the same path with ``.md``.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402

#: ``(number, its values, its default, the methods it is swept for)``.
KNOBS = (("rule.leader_fraction", (0.3, 0.4, 0.5, 0.6, 0.7, 0.8), 0.5, ("pulse_hedged", "ucbe")),
         ("estimator.fixed_lambda", (0.25, 0.5, 0.75, 0.9, 1.0), 0.5, ("pulse_hedged",)))


def study(name: str, scores, V, reps: int, seed: int) -> dict:
    import pulse_jax as pj
    from pulse_jax import choices

    m, n = scores.shape
    start = time.perf_counter()
    rows = []
    for number, values, default, methods in KNOBS:
        for method in methods:
            plugins = pj.Plugins(method, pj.top_two(challenger="interval"), "certified")
            numbers = choices.claim_split({"delta": 0.05, "cs_simultaneous": 0.0}, plugins.stop, given=())
            config = pj.BanditConfig(n_models=m, n_examples=n, budget=m * n, batch_size=8, refit_every=1000,
                                     cs_grid=1000, record_steps=False,
                                     gap_horizon=choices.claim_gap_horizon(plugins.stop, numbers, None))
            swept = pj.sweep(scores, config, plugins, {number: list(values)}, reps=reps, seed=seed,
                             V=None if method == "ucbe" else V, base=numbers, progress=False)
            base = swept.results[values.index(default)].spent[:, -1].astype(float)
            for value, res in zip(values, swept.results):
                cells = res.spent[:, -1].astype(float)
                ratio = cells / base
                rows.append({"number": number, "method": method, "value": value, "default": value == default,
                             "mean_cells": float(cells.mean()), "se_cells": float(cells.std(ddof=1) / np.sqrt(reps)),
                             "vs_default": float(ratio.mean()), "paired_se": float(ratio.std(ddof=1) / np.sqrt(reps)),
                             **common.certified_counts(res.certified_model, scores)})
            print(f"{name} {method} {number}: " + ", ".join(f"{r['value']:g} {r['mean_cells']:,.0f}"
                                                            for r in rows[-len(values):]), file=sys.stderr, flush=True)
    return {"data": name, "models": m, "examples": n, "reps": reps, "seconds": round(time.perf_counter() - start, 1),
            "rows": rows, "floor": common.floor_cells(scores, 0.05, 8)}


def table(done: dict) -> str:
    lines = ["| data (m x n; information floor) | number | method | value | mean cells (SE) | cells / floor | "
             "vs the default (paired SE) | certified | wrong |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for entry in done.values():
        floor = entry["floor"]
        for r in entry["rows"]:
            value = f"**{r['value']:g}**" if r["default"] else f"{r['value']:g}"
            lines.append(f"| {entry['data']} ({entry['models']} x {entry['examples']:,}; {floor:,.0f}) | "
                         f"`{r['number']}` | {r['method']} | {value} | {common.cells_columns(r, floor)} | "
                         f"{r['vs_default']:.3f}x ({r['paired_se']:.3f}) | {common.certified_columns(r, entry['reps'])} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    return common.shipped_study(argv, __doc__, script="select_knobs", study=study, table=table,
                                title="Top-Two's leader fraction and PULSE's lambda at select's levels")

if __name__ == "__main__":
    sys.exit(main())
