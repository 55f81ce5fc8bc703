"""Time UCB-E, PULSE and Naive-Pooling over a grid of problem sizes.

Each (configuration, method) runs in a fresh child process, so its peak
memory (max RSS) is its own and compilation is never served from a warm
in-process cache. Compilation (ahead of time) and the run are timed apart;
the persistent XLA cache is disabled. ``--rounds K`` runs the compiled program K times in the
child and reports the fastest (the machine's speed varies between runs; a ratio of two methods
is steadier from their fastest runs). Reports repetitions per second and cells
per second (cells evaluated in the simulated bandit, initialization included).

    python benchmarks/speed/bench_scale.py --quick          # a small grid, about a minute
    python benchmarks/speed/bench_scale.py --out results/bench_scale.json
    python benchmarks/speed/bench_scale.py --factors ../shared/data/openllm_v2_mmlu_pro_factors.npz \\
        --models 1000 --examples 12032 --rank 100 --reps 500 --bandit-budget 400000 \\
        --refit-every 1000 --methods ucbe                 # the paper's full scale
    python benchmarks/speed/bench_scale.py ... --banditeval     # add the banditeval package, when installed

``--factors`` draws the candidates from a factor file as the paper's
experiments do (``pulse_jax.fileio.data.paper_scale_problem``).
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402


def problem(spec: dict):
    """The benchmark's score matrix and example embeddings (deterministic in ``spec``)."""
    import numpy as np

    m, n, r = spec["models"], spec["examples"], spec["rank"]
    if spec.get("factors"):
        # The paper's setting: candidates drawn from the factor file; V is the file's own example
        # factors (the shape of a stage-0 fit; the cost does not depend on its values).
        from pulse_jax.fileio.data import load_factors, paper_scale_problem

        _, cand, _ = paper_scale_problem(spec["factors"], seed=0, n_candidates=m)
        scores = cand.scores[:, :n]
        V = load_factors(spec["factors"])[1][:n, :r]
        if V.shape[1] < r:   # e.g. the paper's rank 100 on a rank-64 file: pad with small random columns
            pad = np.random.default_rng(0).normal(0, 0.1, (V.shape[0], r - V.shape[1]))
            V = np.concatenate([V, pad.astype(np.float32)], axis=1)
    else:
        rng = np.random.default_rng(0)
        U, V = rng.normal(0, 1, (m, r)) / np.sqrt(r), rng.normal(0, 1, (n, r))
        scores = (rng.random((m, n)) < 1 / (1 + np.exp(-(U @ V.T)))).astype(np.float32)
    return np.asarray(scores, np.float32), np.asarray(V, np.float32)


BANDITEVAL = ("banditeval-ucbe", "banditeval-ucbe-lrf")


def banditeval_child(spec: dict) -> dict:
    """Time the ``banditeval`` package (PyTorch, one run at a time) on the same matrix and budget.

    Its UCB-E recomputes means over the whole (m, n) observation matrix every
    step. Its low-rank variant ("ucbe-lrf", default settings) samples random
    cells until 5% of the matrix is observed, then fits an ensemble
    factorization every step; here the matrix is pre-filled to 5% at random
    and the post-warm-up steps are timed. Both time the first
    ``--banditeval-steps`` steps and extrapolate to the run's step count
    (``extrapolated`` in the output says so); for the low-rank variant the
    warm-up steps are not counted, only the steps after it. The low-rank variant holds an
    ensemble of 64 dense (m, n) matrices: at 1,000 x 12,032 it grew past
    19 GB here and was stopped, so time it on smaller matrices.
    """
    import torch
    from banditeval import bandits

    torch.manual_seed(0)
    scores, _ = problem(spec)
    m, n, B = spec["models"], spec["examples"], spec["batch"]
    total_steps = -(-(m * B + spec["bandit_budget"]) // B)
    timed_steps = min(total_steps, spec["banditeval_steps"])
    truth = torch.from_numpy(scores)
    observed = torch.full((m, n), float("nan"))
    lrf = spec["method"] == "banditeval-ucbe-lrf"
    if lrf:
        warm = torch.rand(m, n) < 0.05
        observed[warm] = truth[warm]
        step = bandits.upper_confidence_bound_exploration_low_rank_factorization
    else:
        step = bandits.upper_confidence_bound_exploration
    t0 = time.perf_counter()
    for _ in range(timed_steps):
        batch = step(observed, batch_size=B)
        if batch is None:
            break
        observed[batch[0], batch[1]] = truth[batch[0], batch[1]]
    per_step = (time.perf_counter() - t0) / timed_steps
    # ucbe-lrf spends its first 5% of the matrix on cheap random warm-up steps (not counted);
    # only the steps after them fit the factorization.
    costly_steps = max(0, -(-(m * B + spec["bandit_budget"] - int(0.05 * m * n)) // B)) if lrf else total_steps
    run_s = per_step * costly_steps
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {**spec, "steps": costly_steps, "timed_steps": timed_steps, "extrapolated": timed_steps < costly_steps,
            "seconds_per_step": per_step, "compile_s": 0.0, "run_s": run_s, "reps_per_s": 1 / run_s,
            "cells_per_s": (m * B + spec["bandit_budget"]) / run_s, "peak_rss_mib": peak_mib,
            "backend": f"torch {torch.__version__} cpu", "devices": 1}


def child(spec: dict) -> dict:
    """Run one measurement (in this process) and return its numbers."""
    if spec["method"] in BANDITEVAL:
        return banditeval_child({**spec, "reps": 1})
    import os

    os.environ.setdefault("JAX_ENABLE_COMPILATION_CACHE", "false")
    import jax
    import numpy as np

    from pulse_jax import engine
    from pulse_jax.stats.confidence import BETTING_GRID
    from pulse_jax.simulation import simulate

    m, n = spec["models"], spec["examples"]
    scores, V = problem(spec)
    method, _, family = spec["method"].partition("+")    # "<method>+betting": betting confidence sequences
    config = engine.BanditConfig(n_models=m, n_examples=n, budget=m * spec["batch"] + spec["bandit_budget"],
                                 batch_size=spec["batch"], refit_every=spec["refit_every"],
                                 refit_epochs=spec.get("refit_epochs", 10),
                                 carry_refit_state=spec.get("carry_refit_state", False),
                                 cs_grid=BETTING_GRID if family == "betting" else 0)
    def once(progress):
        return simulate(scores, config, method, V=np.asarray(V, np.float32), reps=spec["reps"], seed=0,
                        chunk_size=spec.get("chunk"), progress=progress)

    res = once(True)
    compile_s, runs = res.compile_seconds, [res.seconds - res.compile_seconds]
    for _ in range(spec.get("rounds", 1) - 1):      # the same program again: nothing is traced or compiled
        again = once(False)
        runs.append(again.seconds - again.compile_seconds)
    run_s = min(runs)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    stats = jax.devices()[0].memory_stats() if jax.default_backend() != "cpu" else None
    device_mib = stats["peak_bytes_in_use"] / 2**20 if stats and "peak_bytes_in_use" in stats else None
    cells = spec["reps"] * config.budget
    return {**spec, "steps": config.n_steps, "compile_s": compile_s, "run_s": run_s, "run_s_each": runs,
            "reps_per_s": spec["reps"] / run_s, "cells_per_s": cells / run_s, "peak_rss_mib": peak_mib,
            "peak_device_mib": device_mib, "backend": jax.default_backend(), "devices": len(jax.devices())}


def write(out: str, rows: list, final: bool = False) -> None:
    """JSON and Markdown of the rows so far (rewritten after every measurement)."""
    machine = {"python": platform.python_version(), "machine": platform.machine(), "processor": platform.processor(),
               "cpus": __import__("os").cpu_count()}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": machine, "rows": rows}, indent=2))
    table = ["| method | models | examples | rank | B | bandit cells | reps | compile (s) | run (s) | reps/s | "
             "cells/s | peak RSS (MiB) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        note = " (extrapolated)" if row.get("extrapolated") else ""
        table.append(f"| {row['method']}{note} | {row['models']} | {row['examples']} | {row['rank']} | {row['batch']} | "
                     f"{row['bandit_budget']:,} | {row['reps']} | {row['compile_s']:.1f} | {row['run_s']:.2f} | "
                     f"{row['reps_per_s']:.2f} | {row['cells_per_s']:,.0f} | {row['peak_rss_mib']:.0f} |")
    out.with_suffix(".md").write_text("\n".join(table) + "\n")
    if final:
        print("\n".join(table))


def main(argv=None) -> int:
    p = common.parser(__doc__, refit_every=100, out="results/bench_scale.json")
    p.add_argument("--models", default="100,400")
    p.add_argument("--examples", default="2000")
    p.add_argument("--rank", default="32")
    p.add_argument("--batch", default="64")
    p.add_argument("--bandit-budget", default="40000")
    p.add_argument("--reps", default="32")
    p.add_argument("--methods", default="ucbe,pulse,naive",
                   help="comma-separated; a method name followed by +betting runs betting confidence sequences")
    p.add_argument("--factors", help="draw the candidates from this factor file (e.g. "
                   "../shared/data/openllm_v2_mmlu_pro_factors.npz) instead of a synthetic matrix")
    p.add_argument("--banditeval", action="store_true",
                   help="also time the banditeval package (UCB-E and its low-rank variant) when it is installed")
    p.add_argument("--banditeval-steps", type=int, default=50,
                   help="banditeval steps to time before extrapolating to the whole run")
    p.add_argument("--refit-epochs", type=int, default=10, help="Adam epochs of each periodic refit (the paper's 10)")
    p.add_argument("--carry-refit-state", action="store_true",
                   help="the periodic refits continue one Adam run (BanditConfig.carry_refit_state)")
    p.add_argument("--chunk", type=int, help="repetitions per compiled batch (default: from the memory budget)")
    p.add_argument("--rounds", type=int, default=1, help="runs of the compiled program per measurement; the "
                   "fastest is reported (run_s; every one in run_s_each)")
    p.add_argument("--quick", action="store_true", help="small grid: 50 and 100 models x 1,000 examples")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    if args.quick:
        args.models, args.examples, args.rank, args.bandit_budget, args.reps = "50,100", "1000", "16", "8000", "16"

    def ints(text):
        return [int(x) for x in text.split(",")]

    import importlib.util

    methods = args.methods.split(",") + (list(BANDITEVAL) if args.banditeval else [])
    if any(m in BANDITEVAL for m in methods) and importlib.util.find_spec("banditeval") is None:
        print("banditeval is not installed (pip install torch==2.13.0 banditeval); skipping it", file=sys.stderr)
        methods = [m for m in methods if m not in BANDITEVAL]
    grid = itertools.product(ints(args.models), ints(args.examples), ints(args.rank), ints(args.batch),
                             ints(args.bandit_budget), ints(args.reps), methods)
    rows = []
    for m, n, r, b, budget, reps, method in grid:
        spec = {"models": m, "examples": n, "rank": r, "batch": b, "bandit_budget": budget, "reps": reps,
                "refit_every": args.refit_every, "refit_epochs": args.refit_epochs, "carry_refit_state": args.carry_refit_state, "method": method, "factors": args.factors, "chunk": args.chunk, "rounds": args.rounds,
                "banditeval_steps": args.banditeval_steps}
        proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], stdout=subprocess.PIPE,
                              text=True)   # the child's progress goes straight to stderr
        if proc.returncode != 0:
            print(f"failed: {spec}", file=sys.stderr)
            return 1
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append(row)
        write(args.out, rows)
        if row.get("extrapolated"):
            print(f"  ({method}: {row['timed_steps']} of {row['steps']} steps timed, "
                  f"{row['seconds_per_step'] * 1000:.1f} ms each; run time extrapolated)", file=sys.stderr)
        print(f"{method:>6} m={m:<5} n={n:<6} r={r:<4} B={b:<3} budget={budget:<7} reps={reps:<4} "
              f"compile {row['compile_s']:6.1f} s  run {row['run_s']:7.2f} s  {row['reps_per_s']:8.2f} reps/s  "
              f"{row['cells_per_s']:12,.0f} cells/s  peak {row['peak_rss_mib']:7.0f} MiB", file=sys.stderr)
    write(args.out, rows, final=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
