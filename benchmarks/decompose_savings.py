"""Where the cells go when certifying the best model, and what better predictions or lambda would save.

On the live example (the built-in benchmark, 40 x 1,000, delta = 0.05, the whole matrix allowed,
stop when certified, the same seeds for every row), per configuration: the median cells to certify,
and how they split between the two best models (which must be told apart) and the other 38 (which
must only be excluded). Rows:

* UCB-E and PULSE, under LUCB and under Top-Two with the interval challenger;
* PULSE with lambda fixed at 1 (no adaptive shrinkage);
* PULSE with *in-sample* predictions: example embeddings fitted on the train models *and* the
  candidates' full score matrix (predictions no honest run can have: a ceiling for what better
  predictions could give).

Beside them, the fixed-time oracle of ``benchmarks/oracle_variance.py --live`` (known variances,
perfect allocation, Bernstein's bound: no anytime-valid sequence can need fewer cells).

    python benchmarks/decompose_savings.py --reps 200 --out docs/benchmarks/decompose_live.json

Prints a table and writes ``--out`` (JSON) and the same path with ``.md``.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

import pulse_jax as pj
from pulse_jax.params import BanditParams

ORACLE = Path(__file__).resolve().parents[1] / "docs" / "benchmarks" / "intervals" / "oracle_live_example.json"


def split_cells(res) -> dict:
    """Median cells to certify and the median share that went to the two best models."""
    cert = res.certification()
    order = np.argsort(-res.true_means)
    top2 = res.n_obs[:, order[:2]].sum(axis=1)
    total = res.n_obs.sum(axis=1)
    return {"certified_fraction": cert["certified_fraction"], "errors": cert["errors"],
            "median_cells": cert["median_cells"], "median_top2_cells": float(np.median(top2)),
            "median_other_cells": float(np.median(total - top2)),
            "median_top2_share": float(np.median(top2 / total))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    bench = pj.make_benchmark(seed=0)
    m, n = bench.scores.shape
    V = pj.fit_example_embeddings(bench.train, rank=8)
    V_in_sample = pj.fit_example_embeddings(np.vstack([bench.train, bench.scores]), rank=8)
    rules = {"LUCB": "lucb", "Top-Two (interval)": pj.top_two(challenger="interval")}
    rows = []
    for rule_name, rule in rules.items():
        config = pj.BanditConfig(n_models=m, n_examples=n, budget=m * n, batch_size=16, refit_every=25, rule=rule,
                                 stop="certified")
        runs = {"UCB-E": ("ucbe", None, None), "PULSE": ("pulse", V, None),
                "PULSE, lambda = 1": ("pulse", V, 1.0), "PULSE, in-sample predictions": ("pulse", V_in_sample, None)}
        for name, (method, embeddings, lam) in runs.items():
            params = BanditParams(fixed_lambda=lam) if lam is not None else None
            res = pj.simulate(bench.scores, config, method, V=embeddings, reps=args.reps, seed=0, params=params,
                              progress=False)
            rows.append({"rule": rule_name, "configuration": name, **split_cells(res)})
            print(rows[-1])
    oracle = json.loads(ORACLE.read_text()) if ORACLE.is_file() else None
    base = {r["rule"]: r["median_cells"] for r in rows if r["configuration"] == "UCB-E"}
    lines = ["| rule | configuration | median cells to certify | saves vs UCB-E | to the two best | to the other 38 |",
             "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        saved = 100 * (1 - r["median_cells"] / base[r["rule"]])
        lines.append(f"| {r['rule']} | {r['configuration']} | {r['median_cells']:,.0f} | "
                     f"{'' if r['configuration'] == 'UCB-E' else f'{saved:.0f}%'} | {r['median_top2_cells']:,.0f} | "
                     f"{r['median_other_cells']:,.0f} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        out = Path(args.out)
        out.write_text(json.dumps({"reps": args.reps, "rows": rows, "fixed_time_oracle": oracle}, indent=2))
        out.with_suffix(".md").write_text(f"{args.reps} paired repetitions per row "
                                          f"(`python benchmarks/decompose_savings.py --reps {args.reps} "
                                          f"--out {args.out}`)\n\n{text}\n")


if __name__ == "__main__":
    main()
