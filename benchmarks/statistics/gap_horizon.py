"""Bets tuned to each model's running gap (``BanditConfig.gap_horizon``) and the cells to certify the best:
`select`'s configuration at two scales ``c`` against the anytime bets (`select`'s default) and every bet at
its cap (`VARIANTS`), paired
repetitions on the built-in live example, the two shipped real matrices and a synthetic matrix with a
large population and moderate gaps (8 models x 8,000 examples, means 0.70, 0.68, 0.66, 0.62, ..., 0.45;
UCB-E, no side information), where always betting hard is the wrong choice.

The horizon is read from the draws before each batch, so the sequences stay valid for every ``c``
(docs/confidence.md, "Horizons from the data"); ``c`` is static (each value compiles its own program).

    python benchmarks/statistics/gap_horizon.py --reps 100 --out docs/benchmarks/gap_horizon.json

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

#: ``(label, BanditConfig.gap_horizon, BanditParams.cs_horizon)``: the anytime bets (`select`'s default), the
#: gap horizon at two scales, and every bet at its cap of 1/2 (a fixed horizon of one batch).
VARIANTS = (("anytime", 0.0, 0.0), ("gap 0.5", 0.5, 0.0), ("gap 1", 1.0, 0.0), ("every bet at its cap", 0.0, 8.0))


def _config(m: int, n: int, gap: float):
    import pulse_jax as pj

    return pj.BanditConfig(n_models=m, n_examples=n, budget=m * n, batch_size=8, refit_every=1000,
                           cs_grid=1000, record_steps=False, gap_horizon=gap)


def study(name: str, scores, V, method: str, reps: int, seed: int) -> dict:
    import pulse_jax as pj

    m, n = scores.shape
    start = time.perf_counter()
    rows, base = [], None
    for label, gap, fixed in VARIANTS:
        res = pj.simulate(scores, _config(m, n, gap), pj.Plugins(method, "top_two_interval", "certified"), V=V, reps=reps, seed=seed,
                          params=pj.BanditParams(cs_simultaneous=0.0, cs_horizon=fixed), progress=False)
        cells = res.spent[:, -1].astype(float)
        base = cells if base is None else base
        diff = 1 - cells / base
        certified = res.certified_model
        rows.append({"variant": label, "gap_horizon": gap, "cs_horizon": fixed, "mean_cells": float(cells.mean()),
                     "se_cells": float(cells.std(ddof=1) / np.sqrt(reps)),
                     "fewer_than_anytime_pct": float(100 * (1 - cells.mean() / base.mean())),
                     "paired_se_pct": float(100 * diff.std(ddof=1) / np.sqrt(reps)),
                     **common.certified_counts(certified, scores)})
        print(f"{name} {label}: {cells.mean():,.0f} cells", file=sys.stderr, flush=True)
    return {"data": name, "method": method, "models": m, "examples": n, "reps": reps,
            "seconds": round(time.perf_counter() - start, 1), "rows": rows,
            "floor": common.floor_cells(scores, 0.05, 8)}


def table(done: dict) -> str:
    lines = ["| data (m x n; method; information floor) | bets | mean cells (SE) | cells / floor | "
             "fewer than anytime bets (paired SE) | certified | wrong |", "|---|---:|---:|---:|---:|---:|---:|"]
    for entry in done.values():
        floor = entry["floor"]
        for r in entry["rows"]:
            lines.append(f"| {entry['data']} ({entry['models']} x {entry['examples']:,}; {entry['method']}; "
                         f"{floor:,.0f}) | {r['variant']} | {common.cells_columns(r, floor)} | "
                         f"{r['fewer_than_anytime_pct']:+.1f}% ({r['paired_se_pct']:.1f}) | "
                         f"{common.certified_columns(r, entry['reps'])} |")
    return "\n".join(lines)


def _synthetic():
    rng = np.random.default_rng(0)
    means = np.array([0.70, 0.68, 0.66, 0.62, 0.60, 0.55, 0.50, 0.45])
    return (rng.random((len(means), 8000)) < means[:, None]).astype(np.float32), None


def main(argv=None) -> int:
    p = common.parser(__doc__, reps=100, seed=0, rank=16, out="results/gap_horizon.json")
    args = p.parse_args(argv)
    problems = {name: (make, "pulse_hedged") for name, make in common.shipped_problems(args.rank).items()}
    problems["wide population, moderate gaps"] = (_synthetic, "ucbe")

    def run(name, made):
        make, method = made
        scores, V = make()
        return study(name, scores, V, method, args.reps, args.seed)

    done = common.study_each(problems, args.out, "Bets tuned to the running gap",
                             f"python benchmarks/statistics/gap_horizon.py --reps {args.reps} --out {args.out}", run, table)
    print(table(done))
    return 0


if __name__ == "__main__":
    sys.exit(main())
