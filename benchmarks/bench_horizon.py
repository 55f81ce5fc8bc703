"""Confidence-sequence bets tuned to a horizon: cells to certify on the live example.

The bets of the anytime sequences shrink like ``1 / sqrt(s log(1 + s))``; ``BanditParams.cs_horizon
= t0`` keeps them near ``1 / sqrt(t0)`` (valid for any ``t0``: the bets stay predictable). This sweeps
``t0`` for UCB-E and PULSE under LUCB and Top-Two (interval challenger) on the live example (40 x 1,000,
delta = 0.05, the whole matrix allowed, stop when certified; one compiled program per method and rule,
paired seeds), and reports the median cells to certify, how often, and how often wrongly.

    python benchmarks/bench_horizon.py --reps 200 --out docs/benchmarks/horizon.json

Prints a table and writes ``--out`` (JSON) and the same path with ``.md``.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pulse_jax as pj


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--horizons", default="0,100,200,300,500,800")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    horizons = [float(h) for h in args.horizons.split(",")]
    bench = pj.make_benchmark(seed=0)
    m, n = bench.scores.shape
    V = pj.fit_example_embeddings(bench.train, rank=8)
    rows = []
    for rule_name, rule in (("LUCB", "lucb"), ("Top-Two (interval)", pj.top_two(challenger="interval"))):
        config = pj.BanditConfig(n_models=m, n_examples=n, budget=m * n, batch_size=16, refit_every=25, rule=rule,
                                 stop="certified")
        for method in ("ucbe", "pulse"):
            res = pj.sweep(bench.scores, config, method, {"cs_horizon": horizons}, reps=args.reps, seed=0,
                           V=V if method == "pulse" else None, progress=False)
            for k, r in enumerate(res.results):
                cert = r.certification()
                rows.append({"rule": rule_name, "method": method, "cs_horizon": horizons[k],
                             "median_cells": cert["median_cells"], "certified_fraction": cert["certified_fraction"],
                             "errors": cert["errors"], "anytime_coverage": r.anytime_coverage()})
                print(rows[-1])
    lines = ["| rule | horizon t0 | UCB-E: median cells | PULSE: median cells | PULSE saves |",
             "|---|---:|---:|---:|---:|"]
    for rule_name in dict.fromkeys(r["rule"] for r in rows):
        for h in horizons:
            pick = {r["method"]: r for r in rows if r["rule"] == rule_name and r["cs_horizon"] == h}
            u, p = pick["ucbe"]["median_cells"], pick["pulse"]["median_cells"]
            lines.append(f"| {rule_name} | {'anytime' if h == 0 else f'{h:g}'} | {u:,.0f} | {p:,.0f} | "
                         f"{100 * (1 - p / u):.0f}% |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        out = Path(args.out)
        out.write_text(json.dumps({"reps": args.reps, "rows": rows}, indent=2))
        out.with_suffix(".md").write_text(f"{args.reps} paired repetitions per cell; every repetition certified, "
                                          f"wrong certifications: {sum(r['errors'] for r in rows)} in all "
                                          f"(`python benchmarks/bench_horizon.py --reps {args.reps} --out {args.out}`)"
                                          f"\n\n{text}\n")


if __name__ == "__main__":
    main()
