"""Cells to certify the best model on the live example (built-in benchmark, 40 x 1,000).

Runs UCB-E and PULSE under the paper's rule and LUCB with ``stop="certified"``
and prints the median cells (initialization included) with a bootstrap
interval, the fraction certified within the budget and how often the certified
model was wrong::

    python benchmarks/bench_certify.py --reps 200 --budget 40000 --out results/certify.json
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--budget", type=int, default=40_000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--refit-every", type=int, default=10)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--delta", type=float, default=0.05)
    p.add_argument("--out", default="results/certify.json")
    args = p.parse_args(argv)

    import pulse_jax as pj
    from pulse_jax import metrics

    bench = pj.make_benchmark(seed=0)
    m, n = bench.scores.shape
    V = np.asarray(pj.fit_example_embeddings(bench.train, rank=args.rank))
    rows = []
    for rule in ("ucbe", "lucb"):
        for method in ("ucbe", "pulse"):
            config = pj.BanditConfig(n_models=m, n_examples=n, budget=args.budget, batch_size=args.batch_size,
                                     refit_every=args.refit_every, rule=rule)
            res = pj.simulate(bench.scores, config, method, V=V, reps=args.reps, seed=0, stop="certified",
                              params=pj.BanditParams(delta=args.delta))
            cert = metrics.cells_to_certify(res)
            rows.append({"method": method, "rule": rule, **cert, "reps": args.reps, "budget": args.budget,
                         "seconds": res.seconds})
            print(f"{method:>5} rule={rule:<4} median {cert['median']:,.0f} cells [{cert['low']:,.0f}, "
                  f"{cert['high']:,.0f}], certified {cert['certified_fraction']:.0%}, wrong {cert['error_rate']:.3f}",
                  file=sys.stderr)
    from pathlib import Path

    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
