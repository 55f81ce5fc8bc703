"""Chunks at once on a CPU: a simulation's repetitions as one chunk (one core busy for most of a run)
against the default, one chunk per core launched from a thread of its own
(`pulse_jax.simulation.cpu_workers`), UCB-E and PULSE side by side in one process, on the
problem of ``accelerator_report.py --quick`` (250 x 3,008, rank 32, B = 64, 40,000 bandit cells, a
refit every 100 steps, 100 repetitions) unless told otherwise.

Each variant compiles first (its own program: one chunk of 100 against chunks of 100 / cores), then
runs ``--rounds`` times with another seed; the table gives the fastest run, the CPU seconds the
process spent in it (user + system) and their ratio, the cores kept busy::

    python benchmarks/speed/chunks_at_once.py --out docs/benchmarks/chunks_at_once.json

Prints a table and writes ``--out`` (JSON) with a Markdown table beside it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def measure(method: str, chunk: int | None, spec: dict, rounds: int) -> dict:
    import numpy as np

    import bench_scale
    from pulse_jax import engine
    from pulse_jax.simulation import cpu_workers, simulate

    scores, V = bench_scale.problem(spec)
    V = np.asarray(V, np.float32)
    m, n = spec["models"], spec["examples"]
    config = engine.BanditConfig(n_models=m, n_examples=n, budget=m * spec["batch"] + spec["bandit_budget"],
                                 batch_size=spec["batch"], refit_every=spec["refit_every"])
    simulate(scores, config, method, V=V, reps=spec["reps"], seed=0, chunk_size=chunk, progress=False)
    best = None
    for k in range(rounds):
        before = os.times()
        res = simulate(scores, config, method, V=V, reps=spec["reps"], seed=1 + k, chunk_size=chunk, progress=False)
        after = os.times()
        run = res.seconds - res.compile_seconds
        cpu = after.user + after.system - before.user - before.system
        if best is None or run < best["run_s"]:
            best = {"run_s": run, "cpu_s": cpu}
    label = "one chunk" if chunk else f"{cpu_workers()} chunks at once"
    return {"method": method, "variant": label, **best, "cores_busy": best["cpu_s"] / best["run_s"]}


def table(rows: list) -> str:
    lines = ["| method | chunks | run (s) | CPU (s) | cores busy | run against one chunk |",
             "|---|---|---:|---:|---:|---:|"]
    base = {r["method"]: r["run_s"] for r in rows if r["variant"] == "one chunk"}
    for r in rows:
        lines.append(f"| {r['method']} | {r['variant']} | {r['run_s']:.2f} | {r['cpu_s']:.2f} | {r['cores_busy']:.2f} | "
                     f"{r['run_s'] / base[r['method']]:.2f}x |")
    by = {(r["method"], r["variant"]): r["run_s"] for r in rows}
    for variant in dict.fromkeys(r["variant"] for r in rows):
        if ("ucbe", variant) in by and ("pulse", variant) in by:
            lines.append(f"\nPULSE / UCB-E, {variant}: {by[('pulse', variant)] / by[('ucbe', variant)]:.2f}x")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", type=int, default=250)
    p.add_argument("--examples", type=int, default=3008)
    p.add_argument("--rank", type=int, default=32)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--bandit-budget", type=int, default=40000)
    p.add_argument("--refit-every", type=int, default=100)
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default="results/chunks_at_once.json")
    args = p.parse_args(argv)
    os.environ.setdefault("JAX_ENABLE_COMPILATION_CACHE", "false")
    spec = {"models": args.models, "examples": args.examples, "rank": args.rank, "batch": args.batch,
            "bandit_budget": args.bandit_budget, "refit_every": args.refit_every, "reps": args.reps, "seed": 0}
    rows = []
    for method in ("ucbe", "pulse"):
        for chunk in (args.reps, None):
            rows.append(measure(method, chunk, spec, args.rounds))
            print(f"{method} {rows[-1]['variant']}: {rows[-1]['run_s']:.2f} s", file=sys.stderr, flush=True)
    text = table(rows)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"setting": spec, "rows": rows, "measured": time.strftime("%Y-%m-%d")}, indent=1))
    out.with_suffix(".md").write_text(f"# Chunks at once on a CPU\n\n`python benchmarks/speed/chunks_at_once.py "
                                      f"--out {args.out}`\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
