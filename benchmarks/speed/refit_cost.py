"""Where a PULSE run's time goes on this machine: UCB-E, PULSE, and PULSE without periodic refits.

The demo's settings on the built-in benchmark (40 x 1,000, B = 16, refit every 25 steps, 6,400
bandit cells), 200 repetitions; each configuration is compiled once and timed on three more seeds
(the median is reported: single timings on a shared 2-core machine vary by 20%)::

    python benchmarks/speed/refit_cost.py --out docs/benchmarks/refit_cost.json
"""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402


def main(argv=None) -> int:
    p = common.parser(__doc__, reps=200, out="results/refit_cost.json")
    args = p.parse_args(argv)
    import pulse_jax as pj

    bench = pj.make_benchmark(seed=0)
    m, n = bench.scores.shape
    V = np.asarray(pj.fit_example_embeddings(bench.train, rank=8))
    base = pj.BanditConfig(n_models=m, n_examples=n, budget=m * 16 + 6400, batch_size=16, refit_every=25)
    rows = []
    for name, config, method in [("ucbe", base, "ucbe"), ("pulse", base, "pulse"),
                                 ("pulse, initial refit only", dataclasses.replace(base, refit_every=0), "pulse")]:
        first = pj.simulate(bench.scores, config, method, V=V, reps=args.reps, seed=0)
        times = [pj.simulate(bench.scores, config, method, V=V, reps=args.reps, seed=s).seconds for s in (1, 2, 3)]
        rows.append({"run": name, "compile_seconds": first.compile_seconds, "run_seconds": float(np.median(times)),
                     "run_seconds_each": times, "steps": config.n_steps, "reps": args.reps})
        print(f"{name:>26}: compile {first.compile_seconds:5.1f} s, {args.reps} repetitions in {np.median(times):5.2f} s "
              f"(median of {', '.join(f'{t:.2f}' for t in times)})", file=sys.stderr)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
