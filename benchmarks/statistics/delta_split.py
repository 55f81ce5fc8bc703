"""How delta is split between the lower and the upper bounds, and the cells to certify: `select`'s
configuration at several ``cs_upper_share`` values (the share of delta the upper bounds get), paired
repetitions on the built-in live example and the two shipped real matrices.

A best-model claim rests on every lower bound and one model's upper bound (docs/confidence.md), so
any split keeps ``P(a wrong claim) <= delta``; the upper bounds decide the exclusions, where most
cells go. ``cs_upper_share`` is traced: one compiled program per data set serves every value.

    python benchmarks/statistics/delta_split.py --reps 200 --out docs/benchmarks/delta_split.json

Prints a table and writes ``--out`` (JSON, each data set kept as it finishes, so a rerun resumes) and
the same path with ``.md``.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402

SHARES = (0.5, 0.8, 0.95)


def _config(m: int, n: int):
    import pulse_jax as pj

    return pj.BanditConfig(n_models=m, n_examples=n, budget=m * n, batch_size=8, refit_every=1000,
                           cs_grid=1000, record_steps=False)


def study(name: str, scores, V, reps: int, seed: int) -> dict:
    import pulse_jax as pj

    m, n = scores.shape
    start = time.perf_counter()
    result = pj.sweep(scores, _config(m, n), pj.Plugins("pulse_hedged", "top_two_interval", "certified"),
                      {"cs_upper_share": list(SHARES)}, reps=reps, seed=seed,
                      V=V, base=pj.BanditParams(cs_simultaneous=0.0), progress=False)
    rows, base = [], None
    for share, res in zip(SHARES, result.results):
        cells = res.spent[:, -1].astype(float)
        certified = res.certified_model
        base = cells if base is None else base
        diff = 1 - cells / base
        rows.append({"upper_share": share, "mean_cells": float(cells.mean()),
                     "se_cells": float(cells.std(ddof=1) / np.sqrt(reps)),
                     "fewer_than_half_half_pct": float(100 * (1 - cells.mean() / base.mean())),
                     "paired_se_pct": float(100 * diff.std(ddof=1) / np.sqrt(reps)),
                     **common.certified_counts(certified, scores)})
    return {"data": name, "models": m, "examples": n, "reps": reps, "seconds": round(time.perf_counter() - start, 1),
            "rows": rows, "floor": common.floor_cells(scores, 0.05, _config(m, n).batch_size)}


def table(done: dict) -> str:
    lines = ["| data (m x n; information floor) | upper share | mean cells (SE) | cells / floor | fewer than 1/2 "
             "(paired SE) | certified | wrong |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for entry in done.values():
        floor = entry.get("floor")
        for r in entry["rows"]:
            ratio = f"{r['mean_cells'] / floor:.2f}x" if floor else ""
            lines.append(f"| {entry['data']} ({entry['models']} x {entry['examples']:,}; {floor or 0:,.0f}) | "
                         f"{r['upper_share']:g} | {r['mean_cells']:,.0f} ({r['se_cells']:,.0f}) | {ratio} | "
                         f"{r['fewer_than_half_half_pct']:+.1f}% ({r['paired_se_pct']:.1f}) | "
                         f"{r['certified']}/{entry['reps']} | {r['wrong']} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    return common.shipped_study(argv, __doc__, script="delta_split", study=study, table=table, reps=200,
                                title="Splitting delta between the bounds")


if __name__ == "__main__":
    sys.exit(main())
