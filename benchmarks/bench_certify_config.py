"""Which confidence-sequence configuration certifies the best model in the fewest cells (live example).

On the live example (40 x 1,000, delta = 0.05, the whole matrix allowed, stop when certified; one
compiled program per method and rule, the same seeds everywhere, so every comparison is paired) this
sweeps, for UCB-E and PULSE under LUCB and Top-Two (interval challenger):

* ``cs_horizon``: the bets' schedule, anytime (0) or tuned to ``t0`` draws per model;
* ``cs_simultaneous``: 1, every bound of every model at once; 0, the certification guarantee only
  (each upper bound at ``delta / (2 C)`` on its own; ``docs/confidence.md``).

and reports the median cells to certify, how often it certified, how often wrongly, and how often the
event behind each guarantee failed over the run (all bounds at once; the lower bounds and the best
model's upper bound). PULSE's saving is paired: the median over repetitions of ``1 - cells_PULSE /
cells_UCB-E`` with a bootstrap 95% interval, beside the ratio of the medians.

    python benchmarks/bench_certify_config.py --reps 200 --out docs/benchmarks/certify_config.json

Prints a table and writes ``--out`` (JSON) and the same path with ``.md``.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

import pulse_jax as pj


def paired_saving(cells_ucbe: np.ndarray, cells_pulse: np.ndarray, seed: int = 0, resamples: int = 2000) -> dict:
    """``1 - median(PULSE) / median(UCB-E)`` over repetitions, with a paired bootstrap 95% interval."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(cells_ucbe), (resamples, len(cells_ucbe)))
    boot = 1.0 - np.median(cells_pulse[idx], axis=1) / np.median(cells_ucbe[idx], axis=1)
    return {"saving": float(1.0 - np.median(cells_pulse) / np.median(cells_ucbe)),
            "ci95": [float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--horizons", default="0,100,300,500,800")
    parser.add_argument("--simultaneous", default="1,0")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    grid = {"cs_horizon": [float(h) for h in args.horizons.split(",")],
            "cs_simultaneous": [float(s) for s in args.simultaneous.split(",")]}
    bench = pj.make_benchmark(seed=0)
    m, n = bench.scores.shape
    V = pj.fit_example_embeddings(bench.train, rank=8)
    rows, cells = [], {}
    for rule_name, rule in (("LUCB", "lucb"), ("Top-Two (interval)", pj.top_two(challenger="interval"))):
        config = pj.BanditConfig(n_models=m, n_examples=n, budget=m * n, batch_size=16, refit_every=25, rule=rule,
                                 stop="certified")
        for method in ("ucbe", "pulse"):
            res = pj.sweep(bench.scores, config, method, grid, reps=args.reps, seed=0,
                           V=V if method == "pulse" else None, progress=False)
            for point, r in zip(res.points, res.results):
                cert = r.certification()
                key = (rule_name, point.cs_horizon, point.cs_simultaneous)
                cells[key + (method,)] = np.where(r.certified_spent >= 0, r.certified_spent, m * n).astype(float)
                rows.append({"rule": rule_name, "method": method, "cs_horizon": point.cs_horizon,
                             "cs_simultaneous": point.cs_simultaneous, "median_cells": cert["median_cells"],
                             "certified_fraction": cert["certified_fraction"], "errors": cert["errors"],
                             "all_bounds_failed": 1.0 - r.anytime_coverage(),
                             "certification_event_failed": 1.0 - r.certification_coverage()})
                print(rows[-1], flush=True)
    for row in rows:
        if row["method"] == "pulse":
            key = (row["rule"], row["cs_horizon"], row["cs_simultaneous"])
            row.update(paired_saving(cells[key + ("ucbe",)], cells[key + ("pulse",)]))
    text = table(rows)
    print(text)
    if args.out:
        out = Path(args.out)
        out.write_text(json.dumps({"reps": args.reps, "rows": rows}, indent=2))
        out.with_suffix(".md").write_text(
            f"{args.reps} paired repetitions per cell; every repetition certified: "
            f"{all(r['certified_fraction'] == 1.0 for r in rows)}; wrong certifications: "
            f"{sum(r['errors'] for r in rows)} in all "
            f"(`python benchmarks/bench_certify_config.py --reps {args.reps} --out {args.out}`)\n\n{text}\n")


def table(rows) -> str:
    lines = ["| rule | bounds | horizon t0 | UCB-E: median cells | PULSE: median cells | PULSE saves (paired 95% CI) |",
             "|---|---|---:|---:|---:|---:|"]
    for r in (r for r in rows if r["method"] == "pulse"):
        u = next(x for x in rows if x["method"] == "ucbe" and (x["rule"], x["cs_horizon"], x["cs_simultaneous"])
                 == (r["rule"], r["cs_horizon"], r["cs_simultaneous"]))
        bounds = "all at once" if r["cs_simultaneous"] == 1 else f"certification (s = {r['cs_simultaneous']:g})"
        horizon = "anytime" if r["cs_horizon"] == 0 else f"{r['cs_horizon']:g}"
        lines.append(f"| {r['rule']} | {bounds} | {horizon} | "
                     f"{u['median_cells']:,.0f} | {r['median_cells']:,.0f} | {100 * r['saving']:.0f}% "
                     f"[{100 * r['ci95'][0]:.0f}, {100 * r['ci95'][1]:.0f}] |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
