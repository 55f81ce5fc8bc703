"""A 24-point PULSE sweep as one program vs 24 separate ``simulate`` calls (target: 10x faster).

The sweep: 4 exploration values x 3 refit learning rates x 2 lambda settings
(the paper's adaptive lambda and lambda fixed at 1), 200 repetitions per point,
on the built-in benchmark with the demo's settings (40 x 1,000, B = 16, refit
every 25 steps, 6,400 bandit cells). Three ways, same machine, same process:

* ``sweep``: ``pulse_jax.sweep`` -- every (point, repetition) pair in one compiled program;
* ``separate_cold``: 24 ``simulate`` calls, every JAX and pulse-jax cache cleared
  before each, as if each point were a static configuration (one compilation
  per point);
* ``separate_warm``: 24 ``simulate`` calls that reuse one executable (what a
  loop over ``BanditParams`` costs: one compilation, 24 dispatches).

    python benchmarks/speed/bench_sweep.py --out docs/benchmarks/sweep.json

Prints a table and writes ``--out`` (JSON) and the same path with ``.md``. Checks
that every sweep point equals its separate run (same seed, same draws).
"""
from __future__ import annotations

import itertools
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402


def main(argv=None) -> int:
    p = common.parser(__doc__, reps=200, out="results/bench_sweep.json")
    p.add_argument("--exploration", default="0.25,0.5,1,2")
    p.add_argument("--refit-lr", default="0.03,0.1,0.3")
    p.add_argument("--fixed-lambda", default="nan,1")
    args = p.parse_args(argv)
    # Cold means cold: no program from the persistent cache of an earlier call or process.
    os.environ["PULSE_JAX_CACHE"] = "off"
    os.environ["JAX_ENABLE_COMPILATION_CACHE"] = "false"

    import jax

    import pulse_jax as pj
    import importlib

    simulate_module = importlib.import_module("pulse_jax.simulation")   # the module (pj.simulate is the function)

    floats = lambda text: [float(x) for x in text.split(",")]   # noqa: E731
    grid = {"exploration": floats(args.exploration), "refit_lr": floats(args.refit_lr),
            "fixed_lambda": floats(args.fixed_lambda)}
    points = [dict(zip(grid, combo)) for combo in itertools.product(*grid.values())]
    bench = pj.make_benchmark(seed=0)
    m, n = bench.scores.shape
    V = np.asarray(pj.fit_example_embeddings(bench.train, rank=8))
    config = pj.BanditConfig(n_models=m, n_examples=n, budget=m * 16 + 6400, batch_size=16, refit_every=25)

    def clear():
        simulate_module.compiled_runner.cache_clear()
        jax.clear_caches()

    rows = {}
    clear()
    start = time.perf_counter()
    baseline = {"exploration": 1.0, "refit_lr": 0.1, "fixed_lambda": float("nan")}   # the paper's setting
    swept = pj.sweep(bench.scores, config, "pulse", grid, reps=args.reps, seed=0, V=V,
                     baseline=baseline if all(v in grid[k] or (k == "fixed_lambda" and any(np.isnan(grid[k])))
                                              for k, v in baseline.items()) else None)
    rows["sweep"] = {"seconds": time.perf_counter() - start, "compile_seconds": swept.compile_seconds,
                     "compilations": 1}
    print(f"sweep: {len(points)} points x {args.reps} reps in {rows['sweep']['seconds']:.1f} s "
          f"(compilation {swept.compile_seconds:.1f} s)", file=sys.stderr)

    for mode in ("separate_warm", "separate_cold"):
        clear()
        total = compile_total = 0.0
        same_reps = max_diff = 0
        for k, values in enumerate(points):
            if mode == "separate_cold":
                clear()
            start = time.perf_counter()
            res = pj.simulate(bench.scores, config, "pulse", V=V, reps=args.reps, seed=0,
                              params=dict(values))
            total += time.perf_counter() - start
            compile_total += res.compile_seconds
            # Same keys, so the same draws; a different vmap batch can round float32 sums differently,
            # which flips a choice only between near-tied indices. Count repetitions whose whole
            # sequence of choices is identical, and the largest estimate difference among those.
            identical = (res.chosen == swept.results[k].chosen).all(axis=1)
            same_reps += int(identical.sum())
            if identical.any():
                max_diff = max(max_diff, float(np.abs(res.estimates - swept.results[k].estimates)[identical].max()))
            print(f"  {mode} point {k + 1}/{len(points)}: {res.seconds:.1f} s (compilation {res.compile_seconds:.1f} s)",
                  file=sys.stderr)
        rows[mode] = {"seconds": total, "compile_seconds": compile_total,
                      "compilations": len(points) if mode == "separate_cold" else 1,
                      "identical_choice_reps": f"{same_reps}/{len(points) * args.reps}",
                      "max_estimate_difference_when_identical": max_diff}

    speedup = rows["separate_cold"]["seconds"] / rows["sweep"]["seconds"]
    out = {"points": len(points), "reps_per_point": args.reps, "grid": grid, "problem": bench.description,
           "config": {"budget": config.budget, "batch_size": 16, "refit_every": 25},
           "rows": rows, "speedup_vs_separate_cold": speedup,
           "speedup_vs_separate_warm": rows["separate_warm"]["seconds"] / rows["sweep"]["seconds"],
           "machine": {"backend": jax.default_backend(), "devices": [str(d) for d in jax.devices()],
                       "jax": jax.__version__, "python": platform.python_version(), "cpu": platform.processor()},
           "table": swept.table(n_boot=500)}
    lines = [f"{len(points)}-point PULSE sweep, {args.reps} repetitions per point, built-in benchmark "
             f"({jax.default_backend()}, JAX {jax.__version__})", "",
             "| how | compilations | compile s | total s | speedup of the sweep |", "|---|---:|---:|---:|---:|"]
    for name, row in rows.items():
        lines.append(f"| {name} | {row['compilations']} | {row['compile_seconds']:.1f} | {row['seconds']:.1f} | "
                     f"{row['seconds'] / rows['sweep']['seconds']:.1f}x |")
    lines += ["", "Repetitions with the same choices at every step as the sweep: "
              + ", ".join(f"{k} {rows[k]['identical_choice_reps']}" for k in ("separate_warm", "separate_cold")),
              "", swept.format_table(out["table"], target=0.9)]
    common.write_results(args.out, out, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
