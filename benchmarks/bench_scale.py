"""Time UCB-E, PULSE and Naive-Pooling over a grid of problem sizes.

Each (configuration, method) runs in a fresh child process, so its peak
memory (max RSS) is its own and compilation is never served from a warm
in-process cache. Compilation (ahead of time) and the run are timed apart;
the persistent XLA cache is disabled. Reports repetitions per second and cells
per second (cells evaluated in the simulated bandit, initialization included).

    python benchmarks/bench_scale.py --quick          # a small grid, about a minute
    python benchmarks/bench_scale.py --out results/bench_scale.json
    python benchmarks/bench_scale.py --models 1000 --examples 12032 --rank 100 --reps 500 \\
        --bandit-budget 400000 --refit-every 1000      # the paper's full scale (long on a CPU)
"""
from __future__ import annotations

import argparse
import itertools
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path


def child(spec: dict) -> dict:
    """Run one measurement (in this process) and return its numbers."""
    import os

    os.environ.setdefault("JAX_ENABLE_COMPILATION_CACHE", "false")
    import jax
    import numpy as np

    from pulse_jax import bandit
    from pulse_jax.simulate import rep_keys

    rng = np.random.default_rng(0)
    m, n, r = spec["models"], spec["examples"], spec["rank"]
    U, V = rng.normal(0, 1, (m, r)) / np.sqrt(r), rng.normal(0, 1, (n, r))
    scores = (rng.random((m, n)) < 1 / (1 + np.exp(-(U @ V.T)))).astype(np.float32)
    config = bandit.BanditConfig(n_models=m, n_examples=n, budget=m * spec["batch"] + spec["bandit_budget"],
                                 batch_size=spec["batch"], refit_every=spec["refit_every"])
    run = jax.jit(jax.vmap(bandit.make_run(config, spec["method"]), in_axes=(0, None, None)))
    keys = rep_keys(0, 0, spec["reps"])
    args = (keys, jax.numpy.asarray(scores), jax.numpy.asarray(V, dtype=np.float32))
    t0 = time.perf_counter()
    compiled = run.lower(*args).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    run_s = time.perf_counter() - t0
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    cells = spec["reps"] * config.budget
    return {**spec, "steps": config.n_steps, "compile_s": compile_s, "run_s": run_s,
            "reps_per_s": spec["reps"] / run_s, "cells_per_s": cells / run_s, "peak_rss_mib": peak_mib,
            "backend": jax.default_backend(), "devices": len(jax.devices())}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="100,400")
    p.add_argument("--examples", default="2000")
    p.add_argument("--rank", default="32")
    p.add_argument("--batch", default="64")
    p.add_argument("--bandit-budget", default="40000")
    p.add_argument("--reps", default="32")
    p.add_argument("--refit-every", type=int, default=100)
    p.add_argument("--methods", default="ucbe,pulse,naive")
    p.add_argument("--quick", action="store_true", help="small grid: 50 and 100 models x 1,000 examples")
    p.add_argument("--out", default="results/bench_scale.json")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    if args.quick:
        args.models, args.examples, args.rank, args.bandit_budget, args.reps = "50,100", "1000", "16", "8000", "16"

    def ints(text):
        return [int(x) for x in text.split(",")]

    grid = itertools.product(ints(args.models), ints(args.examples), ints(args.rank), ints(args.batch),
                             ints(args.bandit_budget), ints(args.reps), args.methods.split(","))
    rows = []
    for m, n, r, b, budget, reps, method in grid:
        spec = {"models": m, "examples": n, "rank": r, "batch": b, "bandit_budget": budget, "reps": reps,
                "refit_every": args.refit_every, "method": method}
        proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"failed: {spec}\n{proc.stderr[-2000:]}", file=sys.stderr)
            return 1
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"{method:>6} m={m:<5} n={n:<6} r={r:<4} B={b:<3} budget={budget:<7} reps={reps:<4} "
              f"compile {row['compile_s']:6.1f} s  run {row['run_s']:7.2f} s  {row['reps_per_s']:8.2f} reps/s  "
              f"{row['cells_per_s']:12,.0f} cells/s  peak {row['peak_rss_mib']:7.0f} MiB", file=sys.stderr)
    machine = {"python": platform.python_version(), "machine": platform.machine(), "processor": platform.processor(),
               "cpus": __import__("os").cpu_count()}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": machine, "rows": rows}, indent=2))
    table = ["| method | models | examples | rank | B | bandit cells | reps | compile (s) | run (s) | reps/s | "
             "cells/s | peak RSS (MiB) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        table.append(f"| {row['method']} | {row['models']} | {row['examples']} | {row['rank']} | {row['batch']} | "
                     f"{row['bandit_budget']:,} | {row['reps']} | {row['compile_s']:.1f} | {row['run_s']:.2f} | "
                     f"{row['reps_per_s']:.2f} | {row['cells_per_s']:,.0f} | {row['peak_rss_mib']:.0f} |")
    out.with_suffix(".md").write_text("\n".join(table) + "\n")
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
