"""Where a live selection's own time goes per ask: compiled calls, the log's commits, and Python.

The README's live example (the stand-in's 40 candidates x 1,000 examples, ``select``'s configuration,
16 batches in flight) driven by `pulse_jax.live.run` with an instant scorer, so every second is the
selector's: once without a log and once with one (``--log``, as ``select`` writes it). Each run is
profiled (``cProfile``); its time is split by where it was spent:

* ``compiled calls``: the selector's compiled programs (status, ask, tell), timed around each call
  until its results are ready (dispatch included);
* ``log``: SQLite (statements and commits) and the log's own files;
* ``scorer threads``: handing batches to the worker threads and taking their results;
* ``Python``: the rest (the selector's and the runner's own bookkeeping).

A first run with the same configuration compiles the programs; the timed runs load them.

Then the README's ``select`` example as a user runs it (``pulse-jax select ... --batch-size 16
--refit-every 25 --train history.csv --log run.db``, the stand-in's scorer behind a 50 ms sleep per
call), timed from the process's start to its end at 1 and at 16 batches in flight, each after an
untimed run that fills the compilation cache (as a user's second selection finds it). Prints a
table and writes ``--out`` (JSON) and the same path with ``.md``::

    python benchmarks/speed/live_overhead.py --out docs/benchmarks/live_overhead.json
"""
from __future__ import annotations

import cProfile
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402

#: ``(part, predicate on a profiled function's (file, name))``, first match wins; the compiled calls are
#: timed apart (`_timed`), and what the profile gives no part is Python.
PARTS = (
    ("compiled calls", lambda f, n: False),
    ("log", lambda f, n: "sqlite3" in f or "sqlite3" in n or "/live/journal.py" in f or "/live/log_file.py" in f
     or "/live/ledger.py" in f or "/live/returned.py" in f or "fsync" in n),
    ("scorer threads", lambda f, n: "threading.py" in f or "queue.py" in f or "concurrent/futures" in f),
)


def _split(profile: cProfile.Profile, compiled_seconds: float, wall: float) -> dict:
    """Each part's seconds: the compiled calls as timed, the others' own time (``tottime``) from the
    profile, and Python the rest of the wall time (the profile cannot see inside a compiled call, whose
    time it gives its Python caller)."""
    stats = pstats.Stats(profile).stats
    out = {name: 0.0 for name, _ in PARTS}
    for (file, _, name), (_, _, own, _, _) in stats.items():
        part = next((p for p, match in PARTS if match(file, name)), None)
        if part is not None:
            out[part] += own
    out["compiled calls"] += compiled_seconds
    out["Python"] = max(wall - sum(out.values()), 0.0)
    return out


def _timed(selector) -> list:
    """Wrap ``selector``'s compiled status, ask and tell programs so each call is timed until its results
    are ready; returns the one-element list the seconds add up in."""
    import jax

    total, programs = [0.0], selector._programs

    def timed(fn):
        def call(*args, **kwargs):
            start = time.perf_counter()
            out = jax.block_until_ready(fn(*args, **kwargs))
            total[0] += time.perf_counter() - start
            return out
        return call

    selector._programs = programs._replace(status=timed(programs.status), ask=timed(programs.ask),
                                           tell=timed(programs.tell))
    return total


SLOW_SCORER = """import time
from pulse_jax import stand_in


def score(model, ids):
    time.sleep(0.05)
    return stand_in.score(model, ids)
"""


def readme_example(folder: Path, concurrency: int) -> dict:
    """Seconds of the README's ``select`` example, process start included, and the cells it evaluated."""
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(folder)}
    command = [sys.executable, "-m", "pulse_jax.cli", "select", "--models", "models.txt", "--examples", "1000",
               "--budget", "20000", "--batch-size", "16", "--refit-every", "25", "--evaluate", "slow:score",
               "--train", "history.csv", "--concurrency", str(concurrency), "--quiet"]
    for attempt in ("fill the cache", "timed"):
        log = folder / f"run_{concurrency}_{attempt.split()[0]}.db"
        start = time.perf_counter()
        done = subprocess.run(command + ["--log", str(log), "--report", str(log.with_suffix(""))], cwd=folder,
                              env=env, capture_output=True, text=True, timeout=900)
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"select failed: {done.stderr[-2000:]}")
    report = json.loads((log.with_suffix("") / "report.json").read_text())
    return {"concurrency": concurrency, "seconds": seconds, "cells": report.get("spent")}


def main(argv=None) -> int:
    p = common.parser(__doc__, out="results/live_overhead.json")
    p.add_argument("--concurrency", type=int, default=16)
    args = p.parse_args(argv)
    import pulse_jax as pj
    from pulse_jax import live, stand_in

    bench = stand_in.benchmark()
    V = np.asarray(pj.fit_example_embeddings(bench.train, rank=16))

    def selector(log=None):
        return live.Selector(bench.models, 1000, 40_000, V=V, log=log, concurrency=args.concurrency)

    live.run(stand_in.score, selector(), handle_signals=False)        # compiles the programs
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for label, log in (("no log", None), ("with a log", Path(folder) / "run.db")):
            chosen = selector(log)
            compiled_seconds = _timed(chosen)
            profile = cProfile.Profile()
            start = time.perf_counter()
            profile.enable()
            report = live.run(stand_in.score, chosen, handle_signals=False)
            profile.disable()
            seconds = time.perf_counter() - start
            asks = report.spent // 8
            parts = _split(profile, compiled_seconds[0], seconds)
            rows.append({"run": label, "seconds": seconds, "cells": int(report.spent), "asks": int(asks),
                         "ms_per_ask": 1000 * seconds / max(asks, 1),
                         "parts_ms_per_ask": {k: 1000 * v / max(asks, 1) for k, v in parts.items()}})
            print(f"{label}: {seconds:.2f} s, {asks} asks", file=sys.stderr, flush=True)
        import subprocess

        folder = Path(folder)
        (folder / "slow.py").write_text(SLOW_SCORER)
        for what in ("models", "train"):
            out_file = folder / ("models.txt" if what == "models" else "history.csv")
            args_ = [sys.executable, "-m", "pulse_jax.cli.stand_in", what] + ([] if what == "models" else [str(out_file)])
            made = subprocess.run(args_, capture_output=True, text=True, check=True)
            if what == "models":
                out_file.write_text(made.stdout)
        readme = [readme_example(folder, c) for c in (1, 16)]
        for r in readme:
            print(f"README example at {r['concurrency']} in flight: {r['seconds']:.1f} s", file=sys.stderr, flush=True)
    names = [name for name, _ in PARTS] + ["Python"]
    assert all(set(r["parts_ms_per_ask"]) == set(names) for r in rows)
    lines = [f"`select`'s configuration on the live example, {args.concurrency} batches in flight, instant scorer "
             "(ms per ask, profiled: the profile's own overhead is in Python):", "",
             "| run | seconds | asks | ms per ask | " + " | ".join(names) + " |",
             "|---|---:|---:|---:|" + "---:|" * len(names)]
    for r in rows:
        lines.append(f"| {r['run']} | {r['seconds']:.2f} | {r['asks']:,} | {r['ms_per_ask']:.2f} | "
                     + " | ".join(f"{r['parts_ms_per_ask'][n]:.2f}" for n in names) + " |")
    lines += ["", "The README's `select` example, 50 ms scorer, process start included:", "",
              "| batches in flight | seconds | cells |", "|---:|---:|---:|"]
    lines += [f"| {r['concurrency']} | {r['seconds']:.1f} | {r['cells']:,} |" for r in readme]
    lines.append(f"\n16 in flight finishes {readme[0]['seconds'] / readme[1]['seconds']:.1f}x sooner than 1.")
    text = "\n".join(lines)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"concurrency": args.concurrency, "rows": rows, "readme_example": readme}, indent=2))
    out.with_suffix(".md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
