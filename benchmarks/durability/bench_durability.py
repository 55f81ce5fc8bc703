"""Reliability of the live log: one writer, full disks, kill -9, and what a commit costs.

Every scenario runs the real command line (``python -m pulse_jax.cli select``) with a scorer that
appends each cell it is asked for to ``calls.txt`` -- the cells *paid for* -- so "paid twice" is
counted, not inferred:

1. **Two runs on one log.** A second ``select`` on the running log through a symbolic link, a hard
   link made while the first runs, and a folder reached by another path (a symlinked folder, and a
   bind mount when the machine allows one). Counted: cells paid twice (target 0), second refused.
2. **Full disk.** The log on a small tmpfs (mounted in a private mount namespace, ``unshare -rm``; the
   scenario is skipped, and says so, where that is not allowed) that a filler file fills after a few
   batches; *transient*: the filler is removed 0.2 s later, *permanent*: only after the run has
   ended; concurrency 1, 4, 16 and 64, on a 2 MiB tmpfs. Then the same command resumes with space.
   Counted: cells paid twice (target 0), the resumed report equal to an uninterrupted run's, the exit
   codes.
3. **kill -9** at ``--kills`` random moments (target >= 30), each resumed to the end. Counted:
   resumes whose report equals the uninterrupted run's (target: all), cells paid twice (at most the
   batches in flight).
4. **Commit cost.** One batch of 64 scores committed to the database (``synchronous=FULL``, fsync
   included), beside the cost of appending the same record to a JSONL file with ``fsync`` (the
   format of earlier versions); median and 90th percentile over ``--commits`` batches (target < 5 ms).

    python benchmarks/durability/bench_durability.py --out docs/benchmarks/durability.json

Prints a table and writes ``--out`` (JSON) and the same path with ``.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402

SCORER = """import os, time
from pulse_jax import stand_in
DELAY = float(os.environ.get("SCORER_DELAY", "0.02"))
def score(model, ids):
    time.sleep(DELAY)
    with open(os.environ["CALLS"], "a") as f:
        f.write("".join(f"{model},{i}\\n" for i in ids)); f.flush()
    return stand_in.score(model, ids)
"""
BUDGET, BATCH = 800, 16
#: The full-disk scenario: concurrencies tried, and the size of the tmpfs the log lives on.
FULL_DISK_CONCURRENCY, FULL_DISK_SIZE = (1, 4, 16, 64), "2m"


def _prepare(folder: Path) -> None:
    from pulse_jax import stand_in

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "durscore.py").write_text(SCORER)
    (folder / "models.txt").write_text("\n".join(stand_in.models()[:6]) + "\n")


def _command(folder: Path, log, concurrency: int = 1) -> list[str]:
    return [sys.executable, "-m", "pulse_jax.cli", "select", "--models", str(folder / "models.txt"), "--examples",
            "1000", "--budget", str(BUDGET), "--batch-size", str(BATCH), "--method", "ucbe", "--evaluate",
            "durscore:score", "--stop", "budget", "--quiet", "--concurrency", str(concurrency), "--log", str(log),
            "--report", str(_report_dir(folder, log))]


def _env(folder: Path, calls: Path, delay: float = 0.02) -> dict:
    return dict(os.environ, PYTHONPATH=str(folder), CALLS=str(calls), SCORER_DELAY=str(delay))


def _batches(log: Path) -> int:
    from pulse_jax.live import journal

    try:
        return len(journal.snapshot(log)[1])
    except Exception:  # noqa: BLE001 -- not created yet
        return 0


def _batches_recovered(log: Path) -> int:
    """Batches in a log that a kill may have left mid-commit: opened for writing, so SQLite rolls the
    unfinished transaction back first (a read-only look cannot)."""
    from pulse_jax.live import journal

    j = journal.Journal(log)
    try:
        header, records = j.open()
        return len(list(records))
    finally:
        j.close()


def _paid_twice(calls: Path) -> int:
    lines = calls.read_text().splitlines() if calls.exists() else []
    return len(lines) - len(set(lines))


def _report_dir(folder: Path, log) -> Path:
    """One report folder per log (a folder holding another log's report is kept by ``select``)."""
    return folder / f"report_{Path(log).parent.name}_{Path(log).name}"


def _report(folder: Path, log) -> dict:
    return json.loads((_report_dir(folder, log) / "report.json").read_text())


def _clean(folder: Path, concurrency: int) -> dict:
    calls = folder / f"clean{concurrency}.txt"
    log = folder / f"clean{concurrency}.db"
    subprocess.run(_command(folder, log, concurrency), env=_env(folder, calls, 0.0), check=True,
                   capture_output=True)
    return _report(folder, log)


def _same(a: dict, b: dict) -> bool:
    return a["evaluated"] == b["evaluated"] and a["ranking"] == b["ranking"]


# --------------------------------------------------------------------------------------------- 1

def two_runs(root: Path) -> list[dict]:
    rows = []
    for spelling in ("symlink", "hard link", "folder symlink", "bind mount"):
        folder = root / f"two_{spelling.replace(' ', '_')}"
        _prepare(folder)
        calls, log = folder / "calls.txt", folder / "run.db"
        first = subprocess.Popen(_command(folder, log), env=_env(folder, calls, 0.05), stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)
        while _batches(log) < 3 and first.poll() is None:
            time.sleep(0.05)
        if spelling == "symlink":
            other = folder / "link.db"
            other.symlink_to(log)
            second_cmd = _command(folder, other)
        elif spelling == "hard link":
            other = folder / "hard.db"
            os.link(log, other)
            second_cmd = _command(folder, other)
        elif spelling == "folder symlink":
            (root / "elsewhere").mkdir(exist_ok=True)
            alias = root / "elsewhere" / "alias"
            alias.symlink_to(folder)
            second_cmd = _command(folder, alias / "run.db")
        else:
            mount = root / "mnt"
            mount.mkdir(exist_ok=True)
            script = (f"mount --bind {folder} {mount} && exec " +
                      " ".join(f"'{a}'" for a in _command(folder, mount / "run.db")))
            second_cmd = ["unshare", "-rm", "sh", "-c", script]
        second = subprocess.run(second_cmd, env=_env(folder, calls, 0.05), capture_output=True, text=True)
        first_err = first.communicate()[1]
        if spelling == "bind mount" and "mount" in second.stderr and "pulse-jax" not in second.stderr:
            rows.append({"spelling": spelling, "skipped": f"no bind mount here: {second.stderr.strip()[:120]}"})
            continue
        rows.append({"spelling": spelling, "first_exit": first.returncode, "second_exit": second.returncode,
                     "second_refused": second.returncode == 2 and "is in use by process" in second.stderr,
                     "message": second.stderr.strip().splitlines()[-1] if second.stderr.strip() else "",
                     "paid_twice": _paid_twice(calls), "cells_paid": len(calls.read_text().splitlines()),
                     "first_error": first_err.strip()[-200:]})
    return rows


# --------------------------------------------------------------------------------------------- 2

def full_disk(root: Path, inside: bool = False) -> list[dict]:
    """Run in a private mount namespace (re-executes this script under ``unshare -rm``)."""
    if not inside:
        out = root / "full_disk.json"
        proc = subprocess.run(["unshare", "-rm", sys.executable, __file__, "--inside-full-disk", str(root)],
                              capture_output=True, text=True)
        if proc.returncode != 0 or not out.exists():
            return [{"skipped": f"no private tmpfs here (unshare -rm): {proc.stderr.strip()[-300:]}"}]
        return json.loads(out.read_text())
    rows = []
    for concurrency in FULL_DISK_CONCURRENCY:
        folder = root / f"disk{concurrency}"
        _prepare(folder)
        clean = _clean(folder, concurrency)
        for lasting in ("transient", "permanent"):
            disk = root / f"tmpfs_{concurrency}_{lasting}"
            disk.mkdir()
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FULL_DISK_SIZE}", "tmpfs", str(disk)], check=True)
            calls, log = folder / f"calls_{lasting}.txt", disk / "run.db"
            proc = subprocess.Popen(_command(folder, log, concurrency), env=_env(folder, calls, 0.02),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            while _batches(log) < 6 and proc.poll() is None:
                time.sleep(0.01)
            filler = disk / "filler"
            try:
                with open(filler, "wb") as handle:
                    while True:
                        handle.write(b"\0" * 4096)
                        handle.flush()
            except OSError:
                pass
            if lasting == "transient":
                time.sleep(0.2)
                filler.unlink()
            err = proc.communicate()[1]
            first_exit = proc.returncode
            filler.unlink(missing_ok=True)
            told_at_stop = _batches(log)
            resumed = subprocess.run(_command(folder, log, concurrency), env=_env(folder, calls, 0.02),
                                     capture_output=True, text=True)
            rows.append({"concurrency": concurrency, "disk_full": lasting, "first_exit": first_exit,
                         "message": err.strip().splitlines()[-1] if err.strip() else "",
                         "batches_logged_at_stop": told_at_stop, "resume_exit": resumed.returncode,
                         "paid_twice": _paid_twice(calls),
                         "resumed_equals_clean": resumed.returncode == 0 and _same(_report(folder, log), clean)})
            subprocess.run(["umount", str(disk)], check=False)
    (root / "full_disk.json").write_text(json.dumps(rows))
    return rows


# --------------------------------------------------------------------------------------------- 3

def kills(root: Path, count: int, seed: int) -> dict:
    folder = root / "kill"
    _prepare(folder)
    clean = _clean(folder, 1)
    rng = random.Random(seed)
    exact, repaid, told = 0, [], []
    for k in range(count):
        calls, log = folder / f"calls{k}.txt", folder / f"run{k}.db"
        proc = subprocess.Popen(_command(folder, log), env=_env(folder, calls, 0.01), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        target = rng.randrange(1, 50)         # a random batch of the 50 (startup, then mid-run)
        while _batches(log) < target and proc.poll() is None:
            time.sleep(0.002)
        time.sleep(rng.random() * 0.02)       # anywhere within the batch that follows
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        told.append(_batches_recovered(log))
        done = subprocess.run(_command(folder, log), env=_env(folder, calls, 0.0), capture_output=True, text=True)
        exact += done.returncode == 0 and _same(_report(folder, log), clean)
        repaid.append(_paid_twice(calls))
        print(f"  kill {k + 1}/{count}: {told[-1]} batches logged at the kill, resume "
              f"{'exact' if done.returncode == 0 else 'FAILED ' + done.stderr[-200:]}, {repaid[-1]} cells paid twice",
              file=sys.stderr, flush=True)
    return {"kills": count, "resumes_exact": exact, "max_paid_twice": max(repaid), "batch_size": BATCH,
            "batches_logged_at_kill": told}


# --------------------------------------------------------------------------------------------- 4

def commit_cost(root: Path, commits: int) -> dict:
    import numpy as np

    from pulse_jax.live import journal

    rng = np.random.default_rng(0)
    records = [{"type": "tell", "ticket": t, "step": t, "asks_issued": t + 1, "model": "org/model-7",
                "examples": [int(x) for x in rng.choice(10_000, 64, replace=False)],
                "scores": [float(np.float32(x)) for x in rng.random(64)]} for t in range(commits)]
    j = journal.Journal(root / "cost.db")
    j.append({"type": "header", "models": ["org/model-7"]})
    db = []
    for record in records:
        start = time.perf_counter()
        j.append(record)
        db.append(time.perf_counter() - start)
    j.close()
    jsonl, previous = [], ""
    with open(root / "cost.jsonl", "a", encoding="utf-8") as handle:
        for record in records:
            start = time.perf_counter()
            previous = journal.checksum(record, previous)
            handle.write(json.dumps({**record, "crc": previous}) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
            jsonl.append(time.perf_counter() - start)

    def summary(times):
        times = sorted(times)
        return {"median_ms": 1e3 * times[len(times) // 2], "p90_ms": 1e3 * times[int(0.9 * len(times))]}

    return {"commits": commits, "scores_per_batch": 64, "database": summary(db), "jsonl_fsync": summary(jsonl),
            "where": str(root)}


# --------------------------------------------------------------------------------------------- main

def _markdown(result: dict) -> str:
    again = "".join(f" `{c}` re-measured {name}." for name, c in result.get("commands", {}).items())
    lines = ["# Durability of the live log", "", f"`{result['command']}` on {result['machine']}.{again}", "",
             "## Two runs on one log", "", "| path of the second run | second refused | cells paid twice | message |",
             "|---|---|---:|---|"]
    for row in result["two_runs"]:
        if "skipped" in row:
            lines.append(f"| {row['spelling']} | skipped: {row['skipped']} | | |")
        else:
            lines.append(f"| {row['spelling']} | {row['second_refused']} | {row['paid_twice']} | "
                         f"{row['message'].replace('|', '/')} |")
    lines += ["", f"## Full disk ({FULL_DISK_SIZE} tmpfs)", "", "| concurrency | disk full | first exit | batches logged | "
              "cells paid twice | resumed = uninterrupted |", "|---:|---|---:|---:|---:|---|"]
    for row in result["full_disk"]:
        if "skipped" in row:
            lines.append(f"| skipped: {row['skipped']} | | | | | |")
        else:
            lines.append(f"| {row['concurrency']} | {row['disk_full']} | {row['first_exit']} | "
                         f"{row['batches_logged_at_stop']} | {row['paid_twice']} | {row['resumed_equals_clean']} |")
    k = result["kills"]
    lines += ["", "## kill -9", "", f"{k['kills']} kills at random batches: {k['resumes_exact']} resumes equal the "
              f"uninterrupted run; at most {k['max_paid_twice']} cells paid twice (one batch in flight is "
              f"{k['batch_size']}).", "", "## Commit cost of one batch of 64 scores (fsync included)", "",
              "| log | median ms | p90 ms |", "|---|---:|---:|"]
    c = result["commit_cost"]
    lines += [f"| SQLite database | {c['database']['median_ms']:.2f} | {c['database']['p90_ms']:.2f} |",
              f"| JSONL append + fsync (earlier format) | {c['jsonl_fsync']['median_ms']:.2f} | "
              f"{c['jsonl_fsync']['p90_ms']:.2f} |", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = common.parser(__doc__, seed=0, out=None)
    parser.add_argument("--kills", type=int, default=30)
    parser.add_argument("--commits", type=int, default=500)
    parser.add_argument("--only", default=None, choices=["commit_cost", "two_runs", "full_disk", "kills"],
                        help="run one scenario and replace its part of an existing --out file")
    parser.add_argument("--inside-full-disk", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inside_full_disk:
        full_disk(Path(args.inside_full_disk), inside=True)
        return 0
    root = Path(tempfile.mkdtemp(prefix="pulse-durability-"))
    command = "python benchmarks/durability/bench_durability.py " + " ".join(argv or sys.argv[1:])
    result = {"command": command,
              "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"}
    if args.only:
        if not (args.out and Path(args.out).is_file()):
            parser.error("--only replaces a part of an existing --out file; give --out")
        result = json.loads(Path(args.out).read_text())
        result.setdefault("commands", {})[args.only] = command
    scenarios = {"commit_cost": lambda: commit_cost(root, args.commits), "two_runs": lambda: two_runs(root),
                 "full_disk": lambda: full_disk(root), "kills": lambda: kills(root, args.kills, args.seed)}
    try:
        for name, scenario in scenarios.items():
            if args.only in (None, name):
                print(f"{name} ...", file=sys.stderr, flush=True)
                result[name] = scenario()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    text = _markdown(result)
    print(text)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
        Path(args.out).with_suffix(".md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
