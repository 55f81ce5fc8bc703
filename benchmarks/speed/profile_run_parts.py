"""Where one simulation's run time goes, from the profiler's per-operation events.

Each method runs in a fresh process: one run to compile (XLA dumps the optimized program's text),
then a second run with another seed under ``jax.profiler``. Every executed operation (a thunk of
XLA:CPU, a kernel on a GPU) is an event named after its HLO instruction; the instruction's stack
frame (in the dumped program) names the Python functions it came from, innermost first, and the
first rule below that matches puts its time in a part:

* ``refit: V-row gather`` / ``refit: contractions`` / ``refit: residual, sigmoid, scatter, Adam``:
  the operations of `pulse_jax.stats.factorization.refit_rows_on_blocks` (its gathers, its dots, the rest);
* ``dense sums (F, Phi)``: `pulse_jax.stats.factorization.prediction_row_sums` after each refit;
* ``init``: the rest of the kernel's ``init`` (initial draws, first batches, first sequences);
* ``step``: everything else (choose, draw, tell: estimator, sequences, log, records).

Times are the operations' own (loops and conditionals, whose events hold their bodies', are left
out), summed over threads, so they add up to more than the wall time where threads overlap::

    python benchmarks/speed/profile_run_parts.py --out docs/benchmarks/run_parts.json   # 250 x 3,008, 100 reps
    python benchmarks/speed/profile_run_parts.py --models 100 --examples 1000 --rank 16 --reps 16 \\
        --bandit-budget 8000 --refit-every 25 --out /tmp/parts.json                   # a quick look

Prints a table per method and writes ``--out`` (JSON) with a Markdown table beside it.
"""
from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402

HERE = Path(__file__).resolve().parent
PARTS = ("refit: V-row gather", "refit: contractions", "refit: residual, sigmoid, scatter, Adam",
         "dense sums (F, Phi)", "init", "step")
_CONTAINERS = ("while", "conditional", "cond", "call")
_DENSE = {"prediction_row_sums", "rows_sums", "one_block", "part_of", "_sum_and_sum_of_squares", "predict",
          "_logits"}


def _functions(text: str) -> dict:
    """``{id: (file, function, line)}`` of every stack frame in an optimized HLO module's text."""
    sections, current = collections.defaultdict(dict), None
    for raw in text.splitlines():
        if raw in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            current = raw
            continue
        if current is None:
            continue
        match = re.match(r"(\d+) (.*)$", raw)
        if not match:
            if current == "StackFrames":
                break
            continue
        sections[current][int(match.group(1))] = match.group(2)

    def field(body, name):
        return int(re.search(rf"{name}=(\d+)", body).group(1))

    frames = {}
    for k, body in sections["StackFrames"].items():
        loc = sections["FileLocations"][field(body, "file_location_id")]
        frames[k] = (sections["FileNames"][field(loc, "file_name_id")].strip('"'),
                     sections["FunctionNames"][field(loc, "function_name_id")].strip('"'),
                     field(body, "parent_frame_id"))
    return frames


def _stack(frames: dict, frame_id: int) -> list:
    """``[(file, function)]``, innermost first."""
    out, seen = [], set()
    while frame_id in frames and frame_id not in seen:
        seen.add(frame_id)
        file, function, parent = frames[frame_id]
        # optax's Adam runs only inside the refits; its frames are marked so `part_of` can say so
        name = ("optax:" if "optax" in Path(file).parts else "") + Path(file).name
        out.append((name, function.split(".<locals>.")[-1]))
        frame_id = parent
    return out


def _frames_of_instructions(text: str) -> dict:
    """``{instruction: stack frame id}``. An instruction the optimizer made without metadata (a dot split
    out of a fusion, a copy) takes the frame of its first operand that has one, else of the first
    instruction before it in its computation that has one."""
    own, operands, previous, last = {}, {}, {}, None
    for raw in text.splitlines():
        match = re.match(r"\s*(?:ROOT )?%([\w.\-]+) = \S+ [\w\-]+\((.*?)\)", raw)
        if not match:
            if raw.startswith(("%", "ENTRY")) or not raw.strip():
                last = None                      # a new computation
            continue
        name = match.group(1)
        operands[name] = re.findall(r"%([\w.\-]+)", match.group(2))
        previous[name] = last
        frame = re.search(r"stack_frame_id=(\d+)", raw)
        if frame:
            own[name] = int(frame.group(1))
        last = name

    def find(name, depth=0):
        if name in own or depth > 8:
            return own.get(name)
        for operand in operands.get(name, ()):
            frame = find(operand, depth + 1)
            if frame is not None:
                return frame
        return None

    out = {}
    for name in operands:
        frame, before = find(name), previous[name]
        while frame is None and before is not None:
            frame, before = own.get(before), previous[before]
        if frame is not None:
            out[name] = frame
    return out


def part_of(op: str, stack: list) -> str:
    """The part an operation named ``op`` belongs to, from its stack (innermost first)."""
    def refit_part():
        if "gather" in op:
            return "refit: V-row gather"
        if op.startswith("dot") or "dot" in op.split(".")[0].split("_"):
            return "refit: contractions"
        return "refit: residual, sigmoid, scatter, Adam"

    for file, function in stack:
        if file == "factorization.py" and function in _DENSE:
            return "dense sums (F, Phi)"
        if file in ("factorization.py", "refit_by_model.py"):
            return refit_part()
    # Inside the one-repetition-at-a-time loop XLA keeps only the outer frames: engine/refit.py's.
    if any(file == "refit.py" or file.startswith("optax:") for file, _ in stack):
        return refit_part()
    if any(function in ("init", "_init", "initial_draws") for _, function in stack):
        return "init"
    return "step"


def child(spec: dict) -> dict:
    """In a fresh process with ``XLA_FLAGS`` dumping to ``spec["dump"]``: compile, then a profiled run."""
    import jax
    import numpy as np

    from bench_scale import problem
    from pulse_jax import engine
    from pulse_jax.simulation import simulate

    scores, V = problem(spec)
    m = spec["models"]
    config = engine.BanditConfig(n_models=m, n_examples=spec["examples"],
                                 budget=m * spec["batch"] + spec["bandit_budget"], batch_size=spec["batch"],
                                 refit_every=spec["refit_every"])
    first = simulate(scores, config, spec["method"], V=np.asarray(V), reps=spec["reps"], seed=0, progress=False)
    trace = tempfile.mkdtemp(prefix="pulse-parts-")
    jax.profiler.start_trace(trace)
    t0 = time.perf_counter()
    simulate(scores, config, spec["method"], V=np.asarray(V), reps=spec["reps"], seed=1, progress=False)
    wall = time.perf_counter() - t0
    jax.profiler.stop_trace()
    texts = sorted(glob.glob(os.path.join(spec["dump"], "*jit_batched*after_optimizations.txt")))
    texts = [t for t in texts if "buffer-assignment" not in t and "memory-usage" not in t and "live-range" not in t]
    program = max(texts, key=os.path.getsize)
    text = Path(program).read_text()
    frames = _functions(text)
    where = _frames_of_instructions(text)
    data = jax.profiler.ProfileData.from_file(sorted(glob.glob(f"{trace}/**/*.xplane.pb", recursive=True))[-1])
    totals, by_op = collections.Counter(), collections.Counter()
    for plane in data.planes:
        for line in plane.lines:
            for event in line.events:
                stats = dict(event.stats)
                op = stats.get("hlo_op")
                if op is None or stats.get("hlo_module") != "jit_batched" or op.split(".")[0] in _CONTAINERS:
                    continue
                stack = _stack(frames, where.get(op, -1))
                totals[part_of(op, stack)] += event.duration_ns / 1e9
                by_op[(op, part_of(op, stack), " < ".join(f for _, f in stack[:4]))] += event.duration_ns / 1e9
    top = [{"op": op, "part": part, "stack": stack, "seconds": sec} for (op, part, stack), sec in by_op.most_common(spec["top"])]
    return {"method": spec["method"], "wall_run_s": wall, "compile_and_first_run_s": first.seconds,
            "parts_s": {p: totals.get(p, 0.0) for p in PARTS}, "top_operations": top}


def table(rows: list) -> str:
    head = "| part | " + " | ".join(f"{r['method']} (s)" for r in rows) + " | " + \
        " | ".join(f"{r['method']} (%)" for r in rows) + " |"
    lines = [head, "|---|" + "---:|" * (2 * len(rows))]
    for part in PARTS:
        secs = [r["parts_s"][part] for r in rows]
        shares = [100 * s / max(sum(r["parts_s"].values()), 1e-12) for s, r in zip(secs, rows)]
        lines.append(f"| {part} | " + " | ".join(f"{s:.2f}" for s in secs) + " | " +
                     " | ".join(f"{x:.0f}" for x in shares) + " |")
    own = " | ".join(f"{sum(r['parts_s'].values()):.2f}" for r in rows)
    lines.append(f"| operations' own time, all threads | {own} |" + " |" * len(rows))
    lines.append("| wall time of the profiled run | " + " | ".join(f"{r['wall_run_s']:.2f}" for r in rows) + " |"
                 + " |" * len(rows))
    return "\n".join(lines)


def main(argv=None) -> int:
    p = common.parser(__doc__, refit_every=100, out="results/run_parts.json")
    p.add_argument("--models", type=int, default=250)
    p.add_argument("--examples", type=int, default=3008)
    p.add_argument("--rank", type=int, default=32)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--bandit-budget", type=int, default=40_000)
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--methods", default="ucbe,pulse")
    p.add_argument("--top", type=int, default=12, help="how many of the costliest operations the JSON lists")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    rows = []
    for method in args.methods.split(","):
        with tempfile.TemporaryDirectory(prefix="pulse-dump-") as dump:
            spec = {"models": args.models, "examples": args.examples, "rank": args.rank, "batch": args.batch,
                    "bandit_budget": args.bandit_budget, "reps": args.reps, "refit_every": args.refit_every,
                    "method": method, "dump": dump, "top": args.top}
            env = {**os.environ, "PULSE_JAX_CACHE": "off", "JAX_ENABLE_COMPILATION_CACHE": "false",
                   "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={dump} --xla_dump_hlo_as_text",
                   "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
            proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], stdout=subprocess.PIPE,
                                  text=True, env=env)
            if proc.returncode != 0:
                print(f"failed: {method}", file=sys.stderr)
                return 1
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    setting = {k: getattr(args, k) for k in ("models", "examples", "rank", "batch", "bandit_budget", "reps",
                                             "refit_every")}
    out.write_text(json.dumps({"setting": setting, "rows": rows}, indent=1))
    out.with_suffix(".md").write_text(table(rows) + "\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
