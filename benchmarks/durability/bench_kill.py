"""What a live selection pays for across ``kill -9``, and what a money budget buys, at any concurrency.

Every trial runs the real command line (``python -m pulse_jax.cli select``) on a 24 x 300 slice of the
built-in benchmark with a *recording* scorer: it appends ``paid,model,example`` for every cell before
it evaluates it and ``returned,model,example`` once its scores are on their way back, so what was paid
for and what had returned are counted, not inferred. Each call takes a random 20-80 ms, so batches
return out of the order they were asked in.

1. **kill -9** (``--kills`` random moments at each concurrency, default 10 at 16 and at 64), each
   resumed to the end. Counted per trial: cells paid twice, cells paid and not yet returned at the
   kill (target: paid twice <= that, in every trial), and whether the resumed report equals the
   uninterrupted run's (target: always).
2. **Money** (``--price <6th model>=0.05 --price '*=0.01'``, budgets $5 and $15): the spend at one batch in
   flight, 16 and 64 (target: >= 0.9x one batch at a time, never over the budget), ``report.json``'s
   spend against the recorded payments (target: equal), and ``--kills`` kill -9 trials at 16 with a
   resume (target: the spend over both runs never over the budget, the report's spend equal to the
   payments).

3. **A backup copied over the running log** (``--kills`` trials at 16 in flight): the log is copied
   aside at a random moment and, later, written back over the running log in place (what ``cp
   backup.db run.db`` does). Counted per trial: whether the run noticed (a nonzero exit whose last
   line names the replaced log, and ``run.db.kept`` beside it), the lines it printed about it, and,
   after ``run.db.kept`` is put back and the run resumed, the cells paid twice and whether the report
   equals the uninterrupted run's (targets: detected in every trial, one line, nothing lost).

4. **Inside Inspect** (``--inspect-kills`` trials, default 10): ``inspect_ai.eval`` of 6 mock models
   (``tests/inspect_toy.py``, 400 samples, each call 20 ms) under ``select_best`` at its default
   concurrency, killed with ``kill -9`` at a random moment while samples are being generated and scored
   (a random 0-300 ms after a random count of calls has returned), then the same eval is run again.
   Counted per trial: samples that Inspect's scorer had scored before the kill and that are generated
   again (target: 0; a sample generated but not yet scored may be), whether every log of the rerun
   succeeded and the rerun certified (target: always).

    python benchmarks/durability/bench_kill.py --out docs/benchmarks/kill.json
    python benchmarks/durability/bench_kill.py --only backups --out docs/benchmarks/kill.json   # adds to it
    python benchmarks/durability/bench_kill.py --only inspect --out docs/benchmarks/kill.json

Prints a table and writes ``--out`` (JSON) and the same path with ``.md``.
"""
from __future__ import annotations

import collections
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

SCORER = """import os, random, time
from pulse_jax import stand_in
_FD = os.open(os.environ["LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
def _note(kind, model, ids):
    os.write(_FD, "".join(f"{kind},{model},{i}\\n" for i in ids).encode())
def score(model, ids):
    _note("paid", model, ids)
    time.sleep(random.uniform(0.02, 0.08))
    out = stand_in.score(model, ids)
    _note("returned", model, ids)
    return out
"""
MODELS, EXAMPLES, BATCH = 24, 300, 16


def prepare(folder: Path) -> list[str]:
    """The scorer module and the candidates' file in ``folder``; the candidates."""
    from pulse_jax import stand_in

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "recscore.py").write_text(SCORER)
    models = list(stand_in.models()[:MODELS])
    (folder / "models.txt").write_text("\n".join(models) + "\n")
    return models


def command(folder: Path, log: Path, concurrency: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pulse_jax.cli", "select", "--models", str(folder / "models.txt"), "--examples",
            str(EXAMPLES), "--budget", str(MODELS * EXAMPLES), "--batch-size", str(BATCH), "--evaluate",
            "recscore:score", "--quiet", "--concurrency", str(concurrency), "--log", str(log),
            "--report", str(log.with_suffix("")) + "_report", *extra]


def env(folder: Path, ledger: Path) -> dict:
    return dict(os.environ, PYTHONPATH=str(folder), LEDGER=str(ledger))


def ledger_counts(ledger: Path) -> tuple[collections.Counter, collections.Counter]:
    """``(paid, returned)``: how many times each ``(model, example)`` was paid for and came back."""
    paid, returned = collections.Counter(), collections.Counter()
    if ledger.exists():
        for line in ledger.read_text().splitlines():
            if line.count(",") != 2:
                continue        # a line being written while a running trial reads the ledger
            kind, model, example = line.split(",")
            (paid if kind == "paid" else returned)[(model, example)] += 1
    return paid, returned


def logged_cells(log: Path) -> set:
    """The ``(model, example)`` cells a killed run's log holds, told or paid (opened for writing, so SQLite
    rolls a commit cut by the kill back first)."""
    from pulse_jax.live import journal

    j = journal.Journal(log)
    try:
        _, records = j.open()
        return {(r["model"], str(e)) for _, r in records
                for e, x in zip(r["examples"], r["scores"]) if x is not None}
    finally:
        j.close()


def report(log: Path) -> dict:
    return json.loads((Path(str(log.with_suffix("")) + "_report") / "report.json").read_text())


def same(a: dict, b: dict) -> bool:
    return a["evaluated"] == b["evaluated"] and a["ranking"] == b["ranking"] and a["leader"] == b["leader"]


def clean(folder: Path, concurrency: int, *extra: str, name: str = "clean") -> tuple[dict, Path]:
    ledger, log = folder / f"{name}{concurrency}.txt", folder / f"{name}{concurrency}.db"
    subprocess.run(command(folder, log, concurrency, *extra), env=env(folder, ledger), check=True,
                   capture_output=True)
    return report(log), ledger


def kill_trial(folder: Path, name: str, concurrency: int, rng: random.Random, *extra: str) -> dict:
    """Run, kill -9 after a random number of returned cells, resume to the end; what was paid for."""
    ledger, log = folder / f"{name}.txt", folder / f"{name}.db"
    proc = subprocess.Popen(command(folder, log, concurrency, *extra), env=env(folder, ledger),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    target = rng.randrange(BATCH * MODELS, 3000)      # after the first look, anywhere in the run
    while proc.poll() is None:
        if ledger.exists() and ledger.stat().st_size > target * 12:
            _, returned = ledger_counts(ledger)
            if sum(returned.values()) >= target:
                break
        time.sleep(0.005)
    time.sleep(rng.uniform(0, 0.05))                 # anywhere in the calls that follow
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    paid, returned = ledger_counts(ledger)
    out_at_kill = sum((paid - returned).values())
    in_log = logged_cells(log)
    # Returned to the runner but not yet committed when the kill came: the moment between a scorer's
    # return and its commit (a commit without waiting for the disk), which no log can close.
    committing = sum(n for cell, n in (returned - collections.Counter(in_log)).items())
    done = subprocess.run(command(folder, log, concurrency, *extra), env=env(folder, ledger), capture_output=True,
                          text=True)
    paid_after, _ = ledger_counts(ledger)
    return {"returned_at_kill": sum(returned.values()), "out_at_kill": out_at_kill, "committing_at_kill": committing,
            "paid_twice": sum(paid_after.values()) - len(paid_after), "exit": done.returncode,
            "stderr": done.stderr[-300:] if done.returncode else "", "log": log, "ledger": ledger}


def kills(root: Path, count: int, concurrencies, seed: int) -> list[dict]:
    folder = root / "kill"
    prepare(folder)
    rows = []
    for concurrency in concurrencies:
        reference, _ = clean(folder, concurrency)
        rng = random.Random(seed + concurrency)
        trials = []
        for k in range(count):
            trial = kill_trial(folder, f"kill{concurrency}_{k}", concurrency, rng)
            trial["exact"] = trial["exit"] == 0 and same(report(trial["log"]), reference)
            trials.append({key: v for key, v in trial.items() if key not in ("log", "ledger")})
            print(f"  c={concurrency} kill {k + 1}/{count}: {trial['returned_at_kill']} returned, "
                  f"{trial['out_at_kill']} out at the kill, {trial['paid_twice']} paid twice, "
                  f"{'exact' if trial['exact'] else 'NOT EXACT ' + trial['stderr']}", file=sys.stderr, flush=True)
        rows.append({"concurrency": concurrency, "trials": trials,
                     "within": sum(t["paid_twice"] <= t["out_at_kill"] for t in trials),
                     "within_committing": sum(t["paid_twice"] <= t["out_at_kill"] + t["committing_at_kill"]
                                              for t in trials),
                     "committing": sum(t["committing_at_kill"] for t in trials),
                     "exact": sum(t["exact"] for t in trials),
                     "paid_twice": sum(t["paid_twice"] for t in trials),
                     "out_at_kill": sum(t["out_at_kill"] for t in trials)})
    return rows


def _copy_over(source: Path, target: Path) -> None:
    """What ``cp source target`` does to a file that exists: truncate it and write into the same inode."""
    with open(source, "rb") as src, open(target, "r+b") as dst:
        dst.truncate(0)
        shutil.copyfileobj(src, dst)


def _returned_reach(proc, ledger: Path, count: int) -> bool:
    """Wait until ``count`` cells have returned (False: the run ended first)."""
    while proc.poll() is None:
        if ledger.exists() and sum(ledger_counts(ledger)[1].values()) >= count:
            return True
        time.sleep(0.01)
    return False


def backups(root: Path, count: int, seed: int) -> list[dict]:
    folder = root / "backup"
    prepare(folder)
    reference, _ = clean(folder, 16)
    rng, rows = random.Random(seed + 1), []
    for k in range(count):
        ledger, log = folder / f"backup{k}.txt", folder / f"backup{k}.db"
        proc = subprocess.Popen(command(folder, log, 16), env=env(folder, ledger), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        # Both moments inside the uninterrupted run's spend, so the copy lands on a running log.
        first = rng.randrange(BATCH * MODELS, reference["spent"] // 2)
        _returned_reach(proc, ledger, first)
        shutil.copyfile(log, folder / "backup.db")        # the backup, taken while the run writes
        running = _returned_reach(proc, ledger, first + rng.randrange(BATCH, reference["spent"] // 3))
        _copy_over(folder / "backup.db", log)
        running = running and proc.poll() is None       # still running once the copy is in place
        paid_at_copy = sum(ledger_counts(ledger)[0].values())
        err = proc.communicate(timeout=600)[1]
        lines = [line for line in err.splitlines() if "replaced" in line]
        kept = Path(str(log) + ".kept")
        detected = proc.returncode != 0 and bool(lines) and kept.is_file()
        if kept.is_file():
            kept.replace(log)
        done = subprocess.run(command(folder, log, 16), env=env(folder, ledger), capture_output=True, text=True)
        paid, returned = ledger_counts(ledger)
        rows.append({"detected": detected, "running_at_copy": running, "lines": len(lines), "exit": proc.returncode,
                     "paid_at_copy": paid_at_copy,
                     "paid_twice": sum(paid.values()) - len(paid), "message": lines[-1][:300] if lines else err[-300:],
                     "exact": done.returncode == 0 and same(report(log), reference)})
        print(f"  backup {k + 1}/{count}: {'' if running else 'copied after the run ended, '}"
              f"{'detected' if detected else 'NOT DETECTED'} ({len(lines)} line(s)), "
              f"{rows[-1]['paid_twice']} paid twice, {'exact' if rows[-1]['exact'] else 'NOT EXACT'}",
              file=sys.stderr, flush=True)
    return rows


def _usd(paid: collections.Counter, dear: str) -> float:
    return round(sum(n * (0.05 if model == dear else 0.01) for (model, _), n in paid.items()), 6)


def money(root: Path, count: int, concurrencies, seed: int) -> dict:
    folder = root / "money"
    models = prepare(folder)
    dear = models[5]
    rows = []
    for budget in (5, 15):
        extra = ("--price", f"{dear}=0.05", "--price", "*=0.01", "--budget-usd", str(budget), "--stop", "budget")
        for concurrency in concurrencies:
            rep, ledger = clean(folder, concurrency, *extra, name=f"usd{budget}_")
            paid = _usd(ledger_counts(ledger)[0], dear)
            rows.append({"budget_usd": budget, "concurrency": concurrency, "paid_usd": paid,
                         "report_usd": rep["spend"]["usd"], "cells": rep["spend"]["cells"],
                         "line": rep.get("spend_line", "")})
            print(f"  ${budget} c={concurrency}: paid ${paid}, report ${rep['spend']['usd']}", file=sys.stderr,
                  flush=True)
    rng = random.Random(seed)
    extra = ("--price", f"{dear}=0.05", "--price", "*=0.01", "--budget-usd", "5", "--stop", "budget")
    kill_rows = []
    for k in range(count):
        trial = kill_trial(folder, f"usdkill{k}", 16, rng, *extra)
        rep = report(trial["log"]) if trial["exit"] == 0 else {"spend": {"usd": None}}
        paid = _usd(ledger_counts(trial["ledger"])[0], dear)
        kill_rows.append({"paid_usd": paid, "report_usd": rep["spend"]["usd"], "exit": trial["exit"],
                          "paid_twice": trial["paid_twice"], "out_at_kill": trial["out_at_kill"]})
        print(f"  $5 c=16 kill {k + 1}/{count}: paid ${paid}, report ${rep['spend']['usd']}", file=sys.stderr,
              flush=True)
    return {"runs": rows, "kills": kill_rows}


TOY_MODELS = [f"toy/m{s}" for s in (85, 72, 66, 60, 54, 48)]


def _inspect_eval(folder: Path, hang_after: int | None = None, latency: float = 0.0) -> subprocess.Popen:
    """``inspect_ai.eval`` of the toy task under ``select_best`` (its default concurrency) in a subprocess."""
    tests = common.ROOT / "tests"
    code = ("import inspect_toy, inspect_ai, json\n"
            f"logs = inspect_ai.eval({str(tests / 'inspect_toy.py')!r} + '@selected', model={TOY_MODELS!r}, "
            f"task_args={{'log': {str(folder / 'run.db')!r}, 'n': 400, 'batch_size': 8, 'concurrency': 0}}, "
            f"log_dir={str(folder / 'logs')!r}, "
            "display='none')\n"
            "print(json.dumps([l.status for l in logs]))\n")
    environment = {**os.environ, "INSPECT_TOY_CALLS": str(folder / "calls.txt"),
                   "INSPECT_TOY_SCORED": str(folder / "scored.txt"), "INSPECT_TOY_SCORED_AT": str(folder / "scored_at.txt"),
                   "PYTHONPATH": os.pathsep.join([str(tests), str(common.ROOT)])}
    if hang_after is not None:
        environment["INSPECT_TOY_HANG_AFTER"] = str(hang_after)
    if latency:
        environment["INSPECT_TOY_LATENCY"] = str(latency)
    return subprocess.Popen([sys.executable, "-c", code], cwd=folder, env=environment, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _calls(folder: Path, name: str = "calls.txt") -> list[str]:
    path = folder / name
    return path.read_text().splitlines() if path.is_file() else []


def inspect_kills(root: Path, count: int, seed: int) -> list[dict]:
    """kill -9 inside ``inspect eval`` at random moments while samples are generated and scored, then the
    same eval again."""
    rng, rows = random.Random(seed), []
    for k in range(count):
        folder = root / f"inspect{k}"
        folder.mkdir()
        at = rng.randint(20, 300)     # Inspect runs a task in its file's folder: every path is absolute
        proc = _inspect_eval(folder, latency=0.02)
        deadline = time.time() + 300
        while len(_calls(folder)) < at and proc.poll() is None and time.time() < deadline:
            time.sleep(0.005)
        delay = rng.uniform(0.0, 0.3)
        time.sleep(delay)           # calls keep returning and samples keep being scored meanwhile
        running = proc.poll() is None
        proc.send_signal(signal.SIGKILL)
        killed_at = time.time()
        proc.wait()
        before, scored = _calls(folder), set(_calls(folder, "scored.txt"))
        scored_at = {line.split(",", 1)[1]: float(line.split(",", 1)[0]) for line in _calls(folder, "scored_at.txt")}
        rerun = _inspect_eval(folder, None)
        out, _ = rerun.communicate(timeout=900)
        after = set(_calls(folder)[len(before):])
        report_path = folder / "run_report" / "report.json"
        rep = json.loads(report_path.read_text()) if report_path.is_file() else {}
        statuses = json.loads(out.strip().splitlines()[-1]) if rerun.returncode == 0 else []
        rows.append({"killed_after": at, "delay_ms": round(1000 * delay), "running_at_kill": running, "generated_before_kill": len(before),
                     "scored_before_kill": len(scored), "scored_generated_again": len(scored & after),
                     # how long before the kill each of those was scored (the window a kill can still hit)
                     "again_scored_ms_before_kill": sorted(round(1000 * (killed_at - scored_at[s]), 1)
                                                           for s in scored & after if s in scored_at),
                     "generated_again": len(set(before) & after), "rerun_exit": rerun.returncode,
                     "rerun_statuses": statuses, "certified": bool(rep.get("separated")),
                     "leader": rep.get("leader")})
        print(f"  inspect kill {k + 1}/{count} after {at} calls + {rows[-1]['delay_ms']} ms: "
              f"{rows[-1]['scored_generated_again']} scored samples generated again "
              f"{rows[-1]['again_scored_ms_before_kill']} ms before the kill ({rows[-1]['generated_again']} "
              "of all generated), "
              f"rerun {statuses}, certified {rows[-1]['certified']}", file=sys.stderr, flush=True)
    return rows


def markdown(result: dict) -> str:
    lines = ["# kill -9 and money budgets at any concurrency", "", f"`{result['command']}` ({result['machine']})", ""]
    if "kills" in result:
        lines += ["## kill -9", "", "*Out*: cells paid for whose calls had not returned at the kill. *Committing*: "
                  "cells whose call had returned but whose commit had not finished (the moment between a return "
                  "and its commit).", "",
                  "| concurrency | trials | paid twice <= out | paid twice <= out + committing | resumed report "
                  "exact | cells paid twice | cells out | cells committing |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in result["kills"]:
            lines.append(f"| {r['concurrency']} | {len(r['trials'])} | {r['within']} | {r['within_committing']} | "
                         f"{r['exact']} | {r['paid_twice']:,} | {r['out_at_kill']:,} | {r['committing']:,} |")
    if "money" in result:
        lines += ["", "## Money budgets", "", "| budget | concurrency | paid (recorded) | report.json | cells |",
                  "|---:|---:|---:|---:|---:|"]
        for r in result["money"]["runs"]:
            lines.append(f"| ${r['budget_usd']} | {r['concurrency']} | ${r['paid_usd']:.2f} | ${r['report_usd']:.2f} | "
                         f"{r['cells']:,} |")
        kills_ = result["money"]["kills"]
        if kills_:
            over = sum(1 for r in kills_ if r["paid_usd"] > 5 + 1e-9)
            equal = sum(1 for r in kills_ if r["report_usd"] is not None and abs(r["report_usd"] - r["paid_usd"]) < 1e-6)
            lines += ["", f"$5 at concurrency 16, {len(kills_)} kill -9 trials each resumed: paid "
                          f"${min(r['paid_usd'] for r in kills_):.2f}-${max(r['paid_usd'] for r in kills_):.2f}, "
                          f"{over} over the budget, report equal to the payments in {equal}."]
    if "backups" in result:
        rows = result["backups"]
        lines += ["", "## A backup copied over the running log", "",
                  f"{len(rows)} trials at 16 in flight, the copy landing on a running log in "
                  f"{sum(r['running_at_copy'] for r in rows)}: detected (nonzero exit, a line naming the replaced log, "
                  f"`run.db.kept` beside it) in {sum(r['detected'] for r in rows)}; lines about it per run: "
                  f"{min(r['lines'] for r in rows)}-{max(r['lines'] for r in rows)}; after `run.db.kept` was put "
                  f"back and the run resumed, cells paid twice {min(r['paid_twice'] for r in rows)}-"
                  f"{max(r['paid_twice'] for r in rows)} per trial and the report equal to the uninterrupted run's in "
                  f"{sum(r['exact'] for r in rows)}.", "", f"The line: `{rows[0]['message']}`"]
    if "inspect" in result:
        rows = result["inspect"]
        lines += ["", "## Inside Inspect: kill -9, then the same eval again", "",
                  "*Generated*: the model call returned; *scored*: Inspect's scorer had scored the sample. Only a "
                  "sample generated and not yet scored at the kill may be generated again.", "",
                  "| killed (calls + ms) | generated before the kill | scored before the kill | scored, generated "
                  "again | generated, generated again | rerun logs | certified |",
                  "|---:|---:|---:|---:|---:|---|---|"]
        for r in rows:
            ok = "all success" if r["rerun_statuses"] and set(r["rerun_statuses"]) == {"success"} else \
                (", ".join(r["rerun_statuses"]) or f"exit {r['rerun_exit']}")
            lines.append(f"| {r['killed_after']} + {r.get('delay_ms', 1000)} | {r['generated_before_kill']} | {r['scored_before_kill']} | "
                         f"{r['scored_generated_again']} | {r['generated_again']} | {ok} | "
                         f"{'yes' if r['certified'] else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = common.parser(__doc__, seed=0, out=None)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--concurrency", default="16,64", help="comma-separated concurrencies for the kills")
    parser.add_argument("--only", default=None, choices=["kills", "money", "backups", "inspect"])
    parser.add_argument("--inspect-kills", type=int, default=10)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="pulse-kill-"))
    result = {"command": "python benchmarks/durability/bench_kill.py " + " ".join(argv or sys.argv[1:]),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"}
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    try:
        if args.only in (None, "kills"):
            result["kills"] = kills(root, args.kills, concurrencies, args.seed)
        if args.only in (None, "money"):
            result["money"] = money(root, args.kills, [1, *concurrencies], args.seed)
        if args.only in (None, "backups"):
            result["backups"] = backups(root, args.kills, args.seed)
        if args.only in (None, "inspect"):
            result["inspect"] = inspect_kills(root, args.inspect_kills, args.seed)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.only and args.out and Path(args.out).is_file():      # one section run again: the others are kept
        old = json.loads(Path(args.out).read_text())
        result = {**old, **result, "command": old["command"] + "`, then `" + result["command"]}
    text = markdown(result)
    print(text)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
        Path(args.out).with_suffix(".md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
