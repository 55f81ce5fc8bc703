"""Selection inside Inspect (`pulse_jax.harnesses.inspect_select.select_best`) on an offline toy task, 8 models x 400 samples.

For each seed: ``inspect_ai.eval`` of the task under the manager, and ``pulse-jax select --inspect-task``
on the same task, models, seed and options; the samples each evaluates (the toy model's call log) and the
model each certifies. Once: the same eval without the manager (every sample of every model), whose wall
time per sample is the mock-model sample the manager's own time per sample is compared with. The
manager's time (its callbacks, waits left out) is split as it reports it: the Inspect side (decisions,
scores, commits, tokens), the selector's asks and tells (the selection's own compute, which ``select
--inspect-task`` spends too) and the start (sample orders, the selector's start and compilation).

    python benchmarks/harnesses/bench_inspect_native.py --out docs/benchmarks/inspect_native.json
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: E402

TESTS = common.ROOT / "tests"
MODELS = [f"toy/m{s}" for s in (85, 72, 66, 60, 54, 48, 42, 36)]
SAMPLES = 400


def _env(calls: Path) -> dict:
    return {**os.environ, "INSPECT_TOY_CALLS": str(calls),
            "PYTHONPATH": os.pathsep.join([str(TESTS), str(common.ROOT)])}


def run_eval(folder: Path, task: str, task_args: dict) -> dict:
    """One ``inspect_ai.eval`` in a subprocess: calls made, wall seconds, the manager's metadata."""
    calls = folder / "calls.txt"
    code = ("import inspect_toy, inspect_ai, json, sys\n"
            f"logs = inspect_ai.eval({str(TESTS / 'inspect_toy.py')!r} + '@{task}', model={MODELS!r}, "
            f"task_args={task_args!r}, log_dir={str(folder / 'logs')!r}, display='none')\n"
            "bad = [l.error.message for l in logs if l.status != 'success']\n"
            "assert not bad, bad\n"
            "es = logs[0].results.early_stopping\n"
            "print(json.dumps(es.metadata if es else {}))\n")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], cwd=folder, env=_env(calls), capture_output=True, text=True)
    seconds = time.perf_counter() - start
    assert done.returncode == 0, done.stderr[-3000:]
    lines = calls.read_text().splitlines()
    assert len(lines) == len(set(lines)), "a sample was evaluated twice"
    return {"calls": len(lines), "seconds": round(seconds, 2), "metadata": json.loads(done.stdout.splitlines()[-1])}


def run_select(folder: Path, seed: int, batch_size: int) -> dict:
    calls = folder / "calls.txt"
    (folder / "models.txt").write_text("\n".join(MODELS) + "\n")
    command = [sys.executable, "-m", "pulse_jax.cli", "select", "--models", "models.txt", "--inspect-task",
               str(TESTS / "inspect_toy.py") + "@questions_400", "--budget", str(len(MODELS) * SAMPLES),
               "--batch-size", str(batch_size), "--method", "ucbe", "--seed", str(seed), "--refit-every", "0",
               "--log", "select.db", "--quiet"]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=folder, env=_env(calls), capture_output=True, text=True)
    seconds = time.perf_counter() - start
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((folder / "select_report" / "report.json").read_text())
    lines = calls.read_text().splitlines()
    assert len(lines) == len(set(lines)) == report["spent"]
    return {"calls": len(lines), "seconds": round(seconds, 2), "leader": report["leader"],
            "certified": bool(report["separated"])}


def main() -> None:
    p = common.parser(__doc__, out=str(common.RESULTS / "inspect_native.json"))
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=8)
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for seed in range(args.seeds):
            folder = tmp / f"manager{seed}"
            folder.mkdir()
            managed = run_eval(folder, "selected", dict(log=str(folder / "run.db"), n=SAMPLES, method="ucbe",
                                                        batch_size=args.batch_size, seed=seed))
            folder = tmp / f"select{seed}"
            folder.mkdir()
            selected = run_select(folder, seed, args.batch_size)
            meta = managed["metadata"]
            rows.append({"seed": seed, "manager_samples": managed["calls"], "select_samples": selected["calls"],
                         "ratio": round(managed["calls"] / selected["calls"], 4),
                         "manager_certified": meta["leader"] if meta["separated"] else None,
                         "select_certified": selected["leader"] if selected["certified"] else None,
                         "manager_seconds": meta["seconds"]["manager"], "selector_seconds": meta["seconds"]["selector"],
                         "start_seconds": meta["seconds"]["start"], "manager_eval_seconds": managed["seconds"],
                         "select_seconds": selected["seconds"]})
            print(rows[-1], flush=True)
        folder = tmp / "plain"
        folder.mkdir()
        plain = run_eval(folder, "questions_400", {})
    per_sample = plain["seconds"] / plain["calls"]
    samples = sum(r["manager_samples"] for r in rows)
    manager = sum(r["manager_seconds"] for r in rows) / samples
    selector = sum(r["selector_seconds"] for r in rows) / samples
    out = {"models": MODELS, "samples": SAMPLES, "batch_size": args.batch_size, "runs": rows,
           "without_manager": {"samples": plain["calls"], "seconds": plain["seconds"],
                               "ms_per_sample": round(1000 * per_sample, 3)},
           "manager_ms_per_sample": round(1000 * manager, 3),
           "manager_share_of_a_sample": round(manager / per_sample, 4),
           "selector_ms_per_sample": round(1000 * selector, 3),
           "start_seconds": [r["start_seconds"] for r in rows]}
    print(f"{'seed':>4} {'manager':>8} {'select':>7} {'ratio':>6}  certified (manager / select)")
    for r in rows:
        print(f"{r['seed']:>4} {r['manager_samples']:>8} {r['select_samples']:>7} {r['ratio']:>6.3f}  "
              f"{r['manager_certified']} / {r['select_certified']}")
    starts = ", ".join(f"{r['start_seconds']:.1f}" for r in rows)
    print(f"without the manager: {plain['calls']} samples, {1000 * per_sample:.2f} ms per sample (wall)")
    print(f"the manager (Inspect side: decisions, scores, commits, tokens): {1000 * manager:.3f} ms per evaluated "
          f"sample, {manager / per_sample:.1%} of a sample; the selector's asks and tells (select pays them too): "
          f"{1000 * selector:.3f} ms per sample; starting: {starts} s")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
