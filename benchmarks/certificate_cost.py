"""What the new certificates cost to compute: ``epsilon_good`` at epsilon 0 takes exactly the path of
exact-best certification (the same stop on the same cell), so the wall-time ratio of the two runs
is the rule's own overhead; ``tie_group`` at size 1 likewise. Same keys, compilation excluded (each
run is compiled first on two repetitions), two rounds, best of each.

    python benchmarks/certificate_cost.py --factors ../shared/data/openllm_v2_mmlu_pro_factors.npz \\
        --reps 100 --out docs/benchmarks/certificate_cost.json

The setting is ``bench_certify.py --setting paper``'s (1,000 candidates, LUCB, the paper's budget).
Prints a table and writes JSON.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_certify import setting  # noqa: E402


def main(argv=None) -> int:
    import pulse_jax as pj

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--setting", choices=("live", "paper"), default="paper")
    p.add_argument("--factors", default=None)
    p.add_argument("--models", type=int, default=1000)
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--method", default="ucbe")
    p.add_argument("--rule", default="lucb")
    p.add_argument("--refit-every", type=int, default=10)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--delta", type=float, default=0.05)
    p.add_argument("--out", default="results/certificate_cost.json")
    args = p.parse_args(argv)
    scores, V, kw, label = setting(args)
    m, n = scores.shape
    runs = {"certified": ("certified", {}), "epsilon_good, epsilon 0": ("epsilon_good", {"stop.epsilon": 0.0}),
            "tie_group, size 1": ("tie_group", {"stop.size": 1.0})}
    rows = {}
    for label_run, (stop, numbers) in runs.items():
        config = pj.BanditConfig(n_models=m, n_examples=n, rule=args.rule, stop=stop, **kw)
        side = V if args.method != "ucbe" else None
        pj.simulate(scores, config, args.method, V=side, reps=2, seed=0, params={"delta": args.delta, **numbers},
                    progress=False)   # compile
        best = np.inf
        for _ in range(2):
            t = time.time()
            res = pj.simulate(scores, config, args.method, V=side, reps=args.reps, seed=1,
                              params={"delta": args.delta, **numbers}, progress=False)
            best = min(best, time.time() - t)
        rows[label_run] = {"seconds": round(best, 2), "mean_cells": float(res.spent[:, -1].mean())}
        print(f"{label_run}: {best:.2f} s, {rows[label_run]['mean_cells']:,.0f} cells", flush=True)
    base = rows["certified"]["seconds"]
    for r in rows.values():
        r["ratio"] = round(r["seconds"] / base, 3)
    text = "\n".join(["| stopping rule | seconds | ratio to certified | mean cells |", "|---|---:|---:|---:|"]
                     + [f"| {k} | {r['seconds']} | {r['ratio']} | {r['mean_cells']:,.0f} |" for k, r in rows.items()])
    print(label)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"setting": label, "method": args.method, "reps": args.reps, "rows": rows}, indent=1))
    out.with_suffix(".md").write_text(label + "\n\n" + text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
