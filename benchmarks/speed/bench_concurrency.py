"""Cells and wall time against batches in flight: simulated, live with a 50 ms scorer, inside Inspect,
and the failures that must cost nothing (invalid answers, a failing model).

Parts (``--parts``, default all; each is kept in ``--out`` as it finishes, so a rerun resumes):

* ``sim``: ``select``'s configuration (``pulse_hedged``, Top-Two with the interval challenger,
  certification bounds, betting sequences on 1,000 grid means, batch 8, stop when certified, budget =
  every cell), ``--reps`` paired repetitions at c = 1, 4, 16, 64, on the built-in live example (40 x
  1,000, embeddings from ``stand_in``'s history at rank 16), on its 24 x 300 slice (the kill benchmark's
  selection) and on a 200 x 1,300 leaderboard drawn from
  the MMLU-Pro factor file (candidates from its second half, embeddings from 400 of its first half):
  mean cells, their ratio to c = 1 (targets 1.03, 1.10, 1.25) and wrong certificates.
* ``live``: the live example through `pulse_jax.live.run` with a scorer that sleeps 50 ms, then
  returns ``stand_in.score``: cells and wall time at c = 1, 4, 16 (the default) and 64, each selector
  planned for its own c (its programs compiled by an untimed first run).
* ``inspect``: ``select_best`` on the toy task (8 models x 400 samples, a mock model with 50 ms
  latency): the default concurrency against one batch in flight, samples and wall time.
* ``invalid``: ``select --concurrency C`` whose scorer answers NaN at a random call (20 points at
  c = 4 and 16), then resumed with a good scorer: cells returned twice, exit codes (no abort).
* ``failing``: inside Inspect, one model's API fails at a random call (10 trials): seconds from the
  failure to the eval's end, and a rerun with the model fixed: samples evaluated twice.

    python benchmarks/speed/bench_concurrency.py --out docs/benchmarks/concurrency.json
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: E402

LEVELS = (1, 4, 16, 64)
TESTS = common.ROOT / "tests"


def select_config(m: int, n: int, c: int):
    import pulse_jax as pj

    return pj.BanditConfig(n_models=m, n_examples=n, budget=m * n, batch_size=8, refit_every=1000,
                           cs_grid=1000, concurrency=c, record_steps=False)


def problems():
    """``name -> (scores, V)``: the live example, and the factor leaderboard when its file is present."""
    import pulse_jax as pj
    from pulse_jax import stand_in
    from pulse_jax.fileio import data

    bench = stand_in.benchmark()
    out = {"live example 40 x 1000": (bench.scores, np.asarray(pj.fit_example_embeddings(bench.train, rank=16))),
           # the kill benchmark's selection: small enough that 64 batches in flight are a large share of it
           "live slice 24 x 300": (bench.scores[:24, :300],
                                   np.asarray(pj.fit_example_embeddings(bench.train[:, :300], rank=16)))}
    if common.FACTORS.is_file():
        half = data.load_factors(common.FACTORS)[0].shape[0]
        train, cand, _ = data.paper_scale_problem(common.FACTORS, seed=0, n_candidates=half - half // 2)
        cols = np.sort(np.random.default_rng(0).choice(cand.scores.shape[1], 1300, replace=False))
        out["leaderboard 200 x 1300"] = (cand.scores[:200, cols],
                                         np.asarray(pj.fit_example_embeddings(train.scores[:400, cols], rank=16)))
    else:
        print(f"skipping the leaderboard: {common.FACTORS} is absent", file=sys.stderr)
    return out


def part_sim(reps: int, done: dict, save) -> None:
    import pulse_jax as pj

    for name, (scores, V) in problems().items():
        m, n = scores.shape
        best = int(np.argmax(scores.mean(1)))
        for c in LEVELS:
            key = f"{name} | c={c}"
            if key in done:
                continue
            start = time.perf_counter()
            res = pj.simulate(scores, select_config(m, n, c), pj.Plugins("pulse_hedged", "top_two_interval", "certified"), V=V, reps=reps, seed=0,
                              params={"cs_simultaneous": 0.0}, progress=False)
            cells = res.spent[:, -1]
            certified = res.certified_model
            done[key] = {"problem": name, "concurrency": c, "reps": reps, "mean_cells": float(cells.mean()),
                         "se_cells": float(cells.std(ddof=1) / np.sqrt(reps)),
                         "certified": int((certified >= 0).sum()),
                         "wrong_certificates": int(((certified >= 0) & (certified != best)).sum()),
                         "seconds": round(time.perf_counter() - start, 1)}
            save()
            print(f"{key}: {done[key]['mean_cells']:,.0f} cells", file=sys.stderr)


class _Slow:
    """``stand_in.score`` after ``latency`` seconds; counts the cells it is asked."""

    def __init__(self, latency: float):
        from pulse_jax import stand_in

        self.latency, self.score, self.cells = latency, stand_in.score, 0

    def __call__(self, model, ids):
        time.sleep(self.latency)
        self.cells += len(ids)
        return self.score(model, ids)


def part_live(done: dict, save) -> None:
    import pulse_jax as pj
    from pulse_jax import live, stand_in

    bench = stand_in.benchmark()
    V = np.asarray(pj.fit_example_embeddings(bench.train, rank=16))
    for c in LEVELS:
        key = f"live | c={c}"
        if key in done:
            continue
        def selector():
            return live.Selector(bench.models, 1000, 40_000, method="pulse_hedged", batch_size=8, refit_every=1000,
                                 V=V, rule="top_two_interval", cs_grid=1000, stop="certified", gap_horizon=0.0,
                                 params={"cs_simultaneous": 0.0, "delta": 0.05, "cs_upper_share": 0.5},
                                 concurrency=c)

        # Each concurrency is its own configuration (its holds are planned for it): a first run with an
        # instant scorer compiles its programs, so the timed run measures the selection, not XLA.
        live.run(_Slow(0.0), selector(), handle_signals=False)
        scorer = _Slow(0.05)
        start = time.perf_counter()
        report = live.run(scorer, selector(), handle_signals=False)
        done[key] = {"concurrency": c, "cells_paid": scorer.cells, "spent": report.spent,
                     "after_stop": report.after_stop, "seconds": round(time.perf_counter() - start, 1),
                     "certified": report.leader if report.separated else None}
        save()
        print(f"{key}: {scorer.cells:,} cells in {done[key]['seconds']} s", file=sys.stderr)


def _inspect_eval(folder: Path, task_args: dict, env: dict) -> tuple[dict, float, list]:
    """One ``inspect_ai.eval`` of the toy task under ``select_best`` in a subprocess."""
    models = [f"toy/m{s}" for s in (85, 72, 66, 60, 54, 48, 42, 36)]
    code = ("import inspect_toy, inspect_ai, json\n"
            f"logs = inspect_ai.eval({str(TESTS / 'inspect_toy.py')!r} + '@selected', model={models!r}, "
            f"task_args={task_args!r}, log_dir={str(folder / 'logs')!r}, display='none')\n"
            "print(json.dumps([[l.status, l.error.message if l.error else None] for l in logs]))\n")
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], cwd=folder, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr[-3000:]
    calls = (folder / "calls.txt").read_text().splitlines() if (folder / "calls.txt").is_file() else []
    return {"statuses": json.loads(proc.stdout.splitlines()[-1])}, seconds, calls


def _toy_env(folder: Path, **extra) -> dict:
    return {**os.environ, "INSPECT_TOY_CALLS": str(folder / "calls.txt"),
            "PYTHONPATH": os.pathsep.join([str(TESTS), str(common.ROOT)]), **extra}


def part_inspect(done: dict, save) -> None:
    """At 50 ms a call the eval is bound by Inspect's own work per sample on 2 cores, so the model
    calls' latency is measured at 500 ms too."""
    for latency in (0.05, 0.5):
        for label, concurrency in (("one batch in flight", 1), ("default", 0)):
            key = f"inspect | {label}, {latency * 1000:.0f} ms"
            if key in done:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                folder = Path(tmp)
                args = {"log": str(folder / "run.db"), "n": 400, "batch_size": 8, "concurrency": concurrency}
                env = _toy_env(folder, INSPECT_TOY_LATENCY=str(latency), INSPECT_TOY_TIMES=str(folder / "times.txt"))
                out, seconds, calls = _inspect_eval(folder, args, env)
                report = json.loads((folder / "run_report" / "report.json").read_text())
                times = [float(x) for x in (folder / "times.txt").read_text().split()]
            # The evaluation: from the first model call's start (its end less the latency) to the last's
            # end; the process start, imports and compilation (the same for both) are apart.
            done[key] = {"latency": latency, "samples": len(calls), "distinct": len(set(calls)),
                         "seconds": round(seconds, 1), "evaluation_seconds": round(max(times) - min(times) + latency, 2),
                         "leader": report["leader"], "separated": report["separated"]}
            save()
            print(f"{key}: {len(calls)} samples in {seconds:.1f} s", file=sys.stderr)


BAD_SCORER = textwrap.dedent("""
    import os, threading, time
    from pulse_jax import stand_in
    CALLS, LOCK = [0], threading.Lock()
    def score(model, ids):
        with LOCK:                          # the calls run in threads: number each one once
            CALLS[0] += 1
            number = CALLS[0]
        time.sleep(0.002)
        if number == int(os.environ.get("BAD_CALL", "0")):
            return [float("nan")] * len(ids)
        with open(os.environ["CELLS"], "a") as fh:
            fh.write("".join(f"{model},{i}\\n" for i in ids))
        return stand_in.score(model, ids)
""")


def part_invalid(done: dict, save, points: int = 20) -> None:
    rng = np.random.default_rng(0)
    for c in (4, 16):
        key = f"invalid | c={c}"
        if key in done:
            continue
        twice = aborts = 0
        codes = []
        for call in rng.integers(10, 400, points):
            with tempfile.TemporaryDirectory() as tmp:
                folder = Path(tmp)
                (folder / "bad_scorer.py").write_text(BAD_SCORER)
                (folder / "models.txt").write_text("\n".join(__import__("pulse_jax.stand_in").stand_in.models()))
                env = {**os.environ, "PYTHONPATH": str(folder), "CELLS": str(folder / "cells.txt")}
                command = [sys.executable, "-m", "pulse_jax.cli", "select", "--models", "models.txt", "--examples",
                           "1000", "--budget", "40000", "--evaluate", "bad_scorer:score", "--method", "ucbe",
                           "--log", "run.db", "--concurrency", str(c), "--quiet"]
                first = subprocess.run(command, cwd=folder, env={**env, "BAD_CALL": str(call)}, capture_output=True,
                                       text=True)
                second = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
                cells = (folder / "cells.txt").read_text().splitlines()
            twice += len(cells) - len(set(cells))
            aborts += int(first.returncode < 0 or "terminate called" in first.stderr)
            codes.append([first.returncode, second.returncode])
        done[key] = {"concurrency": c, "points": points, "returned_cells_paid_twice": twice, "aborts": aborts,
                     "exit_codes": codes}
        save()
        print(f"{key}: {twice} cells paid twice, {aborts} aborts", file=sys.stderr)


def part_failing(done: dict, save, trials: int = 10) -> None:
    if "failing" in done:
        return
    rng = np.random.default_rng(1)
    rows = []
    for at in rng.integers(2, 40, trials):
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            args = {"log": str(folder / "run.db"), "n": 400, "batch_size": 8, "concurrency": 0}
            out, seconds, first = _inspect_eval(folder, args, _toy_env(folder, INSPECT_TOY_FAIL=f"m60:{at}"))
            failed = [s for s, _ in out["statuses"]].count("error")
            out2, seconds2, calls = _inspect_eval(folder, args, _toy_env(folder))
            report = json.loads((folder / "run_report" / "report.json").read_text())
        rows.append({"fails_at_call": int(at), "first_eval_seconds": round(seconds, 1), "errored_logs": failed,
                     "rerun_statuses": [s for s, _ in out2["statuses"]], "evaluated_twice": len(calls) - len(set(calls)),
                     "rerun_separated": report["separated"]})
        print(f"failing at call {at}: {seconds:.1f} s, {rows[-1]['evaluated_twice']} twice", file=sys.stderr)
    done["failing"] = rows
    save()


def table(done: dict) -> str:
    lines = ["| problem | c | mean cells (SE) | vs c = 1 | certified | wrong |", "|---|---:|---:|---:|---:|---:|"]
    for key, row in done.items():
        if "problem" in row:
            base = done.get(f"{row['problem']} | c=1", row)["mean_cells"]
            lines.append(f"| {row['problem']} | {row['concurrency']} | {row['mean_cells']:,.0f} ({row['se_cells']:.0f}) "
                         f"| {row['mean_cells'] / base:.3f}x | {row['certified']}/{row['reps']} | "
                         f"{row['wrong_certificates']} |")
    live_rows = [r for k, r in done.items() if k.startswith("live |")]
    if live_rows:
        base = next((r for r in live_rows if r["concurrency"] == 1), live_rows[0])
        lines += ["", "| live, 50 ms scorer: c | cells paid | vs c = 1 | after the stop | seconds | sooner |",
                  "|---:|---:|---:|---:|---:|---:|"]
        for r in live_rows:
            lines.append(f"| {r['concurrency']} | {r['cells_paid']:,} | {r['cells_paid'] / base['cells_paid']:.3f}x | "
                         f"{r['after_stop']:,} | {r['seconds']} | {base['seconds'] / r['seconds']:.1f}x |")
    insp = [(k, r) for k, r in done.items() if k.startswith("inspect |")]
    if insp:
        lines += ["", "| inside Inspect, 8 x 400, model latency | samples | evaluation s (first to last call) | "
                      "wall s (process start, imports, compilation included) |", "|---|---:|---:|---:|"]
        lines += [f"| {k.split('| ')[1]} | {r['samples']:,} | {r.get('evaluation_seconds', 'n/a')} | {r['seconds']} |"
                  for k, r in insp]
    for c in (4, 16):
        r = done.get(f"invalid | c={c}")
        if r:
            lines.append(f"\nInvalid answers at c = {c}, {r['points']} random points: {r['returned_cells_paid_twice']} "
                         f"returned cells paid twice, {r['aborts']} aborts.")
    if "failing" in done:
        rows = done["failing"]
        lines.append(f"\nOne model failing inside Inspect, {len(rows)} trials: first eval ended in at most "
                     f"{max(r['first_eval_seconds'] for r in rows)} s (start and compilation included); reruns "
                     f"certified in {sum(r['rerun_separated'] for r in rows)} of {len(rows)}; samples evaluated twice: "
                     f"at most {max(r['evaluated_twice'] for r in rows)}.")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = common.parser(__doc__, reps=50, out="results/bench_concurrency.json")
    p.add_argument("--parts", default="sim,live,inspect,invalid,failing")
    args = p.parse_args(argv)
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    done = json.loads(path.read_text()) if path.is_file() else {}

    def save():
        path.write_text(json.dumps(done, indent=2))
        path.with_suffix(".md").write_text(table(done) + "\n")

    parts = {"sim": lambda: part_sim(args.reps, done, save), "live": lambda: part_live(done, save),
             "inspect": lambda: part_inspect(done, save), "invalid": lambda: part_invalid(done, save),
             "failing": lambda: part_failing(done, save)}
    for name in args.parts.split(","):
        parts[name]()
    print(table(done))
    return 0


if __name__ == "__main__":
    sys.exit(main())
