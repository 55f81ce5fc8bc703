"""Failures a live selection meets, counted: transient scorer errors, failures that outlast their
retries, a tampered log, bad input to every command.

Every scenario runs in this process on the stand-in benchmark (40 models x 1,000 examples and its
200-model history), with the live defaults' estimator and a scorer that records every cell whose
scores it *returned*: a cell returned twice was paid for twice (failed attempts are counted apart).

1. **Transient failures.** The scorer fails ``--failure-rate`` of its calls at random; the run uses
   the default retries (3, exponential backoff with jitter; ``--retry-wait`` scales the waits).
   Target at concurrency 1, 4 and 16: every run finishes, 0 returned cells paid twice, the report
   equal to a run without failures.
2. **Failures that outlast their retries**, at ``--points`` random calls each, concurrency 1, 4 and
   16: a scorer error on every attempt of one batch, a ``KeyboardInterrupt`` raised inside the
   scorer, a full disk that stays full (the log's reserve takes the batches in flight), and a full
   disk when the reserve did not fit. Each run is resumed without the failure. Target: returned
   cells paid twice at most those of batches still running at the failure (the runner waits for
   them, so 0), 0 cells lost, every resume's report equal to an uninterrupted run's.
3. **Tampering** (>= 60 cases) on a finished log: edits with and without a recomputed chain, rows
   deleted in the middle and at the tail, triggers, views, dropped and added tables, truncation at
   20 offsets, empty and foreign files, JSONL exports cut at a line break. Counted: refused in one
   line, tracebacks (target 0), silent restarts (target 0), and edits accepted -- only those with a
   recomputed chain and valid values, which checksums cannot catch (they are not signatures).
4. **Bad input** (>= 300 inputs) to every command and every `select_best` keyword: counted as
   refused (one line, or argparse's usage error), tracebacks (target 0) and accepted (target 0).

    python benchmarks/durability/bench_failures.py --out docs/benchmarks/failures.json

Prints a table per scenario and writes ``--out`` (JSON) and the same path with ``.md``.
"""
from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import platform
import random
import re
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from pulse_jax import stand_in
from pulse_jax.errors import PulseInputError
from pulse_jax.live import EvaluationError, Interrupted, LogWriteError, Selector, journal, legacy_jsonl, run

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402

BATCH, REFIT_EVERY, METHOD = 16, 25, "pulse_hedged"


class Scorer:
    """The stand-in's scores; ``fail`` decides, per call, whether it raises (and what)."""

    def __init__(self, fail=None, seed=0):
        self.fail, self.rng = fail, random.Random(seed)
        self.lock = threading.Lock()
        self.calls, self.failed, self.returned, self.running = 0, 0, [], 0

    def __call__(self, model, ids):
        with self.lock:
            self.calls += 1
            number, self.running = self.calls, self.running + 1
            error = self.fail(number, model, ids, self.rng) if self.fail else None
        try:
            time.sleep(0.001 + 0.004 * self.rng.random())     # calls come back out of order
            if error is not None:
                with self.lock:
                    self.failed += 1
                raise error
            scores = stand_in.score(model, ids)
            with self.lock:
                self.returned.extend((model, i) for i in ids)
            return scores
        finally:
            with self.lock:
                self.running -= 1


def _selector(log, budget, train, concurrency):
    return Selector(stand_in.models(), 1000, budget, method=METHOD, batch_size=BATCH, refit_every=REFIT_EVERY,
                    train=train, log=log, stop="budget", seed=0, rule="ucbe", cs_grid=0, bounds="all",
                    concurrency=concurrency)


def _same(a, b) -> bool:
    return a.evaluated == b.evaluated and np.allclose(a.estimates, b.estimates, atol=1e-6, equal_nan=True)


def transient(root: Path, budget: int, rate: float, wait: float, train) -> list[dict]:
    rows = []
    for concurrency in (1, 4, 16):
        clean_sel = _selector(root / f"clean{concurrency}.db", budget, train, concurrency)
        clean = run(Scorer(), clean_sel, handle_signals=False)
        clean_sel.close()
        scorer = Scorer(lambda k, m, ids, rng: ConnectionError("503") if rng.random() < rate else None, seed=concurrency)
        sel = _selector(root / f"transient{concurrency}.db", budget, train, concurrency)
        start = time.perf_counter()
        try:
            report, finished = run(scorer, sel, retry_wait=wait, handle_signals=False), True
        except EvaluationError:
            report, finished = None, False
        sel.close()
        rows.append({"concurrency": concurrency, "calls": scorer.calls, "failed_calls": scorer.failed,
                     "finished": finished, "paid_twice": len(scorer.returned) - len(set(scorer.returned)),
                     "report_equal": bool(finished and _same(report, clean)),
                     "reported_failures": report.failed_attempts if report else None,
                     "seconds": round(time.perf_counter() - start, 2)})
    return rows


def _full_disk(from_write: int, reserve_fits: bool):
    """Patch the log: from the ``from_write``-th batch committed on, commits fail as on a full disk until
    the reserve is freed (its pages take the rest); without a reserve (it did not fit), at once."""
    original, keep = journal.Journal._commit, journal.Journal.keep_reserve
    state = {"writes": 0, "freed": False}

    def commit(self, *statements):
        sql = statements[0][0]
        if sql.startswith(("INSERT INTO told", "INSERT OR REPLACE INTO paid")):
            state["writes"] += 1
            if state["writes"] >= from_write and not state["freed"]:
                raise journal.LogFull(errno.ENOSPC, "No space left on device")
        if sql == "DELETE FROM reserve":
            state["freed"] = True
        return original(self, *statements)

    journal.Journal._commit = commit
    if not reserve_fits:
        journal.Journal.keep_reserve = lambda self: False

    def undo():
        journal.Journal._commit, journal.Journal.keep_reserve = original, keep

    return undo


def outlasting(root: Path, budget: int, points: int, train, seed: int) -> list[dict]:
    rng = random.Random(seed)
    calls_per_run = len(stand_in.models()) + (budget - len(stand_in.models()) * BATCH) // BATCH
    rows = []
    for concurrency in (1, 4, 16):
        clean_sel = _selector(root / f"base{concurrency}.db", budget, train, concurrency)
        clean = run(Scorer(), clean_sel, handle_signals=False)
        clean_sel.close()
        for kind in ("scorer error", "KeyboardInterrupt", "full disk", "full disk, no reserve"):
            twice = lost = bad_resumes = running_total = asked_again = 0
            for trial in range(points):
                point = rng.randint(2, calls_per_run - 2)
                log = root / f"{kind.replace(' ', '_').replace(',', '')}_{concurrency}_{trial}.db"
                seen = {}

                def fail(k, model, ids, r, point=point, seen=seen):
                    if kind == "scorer error" and (k == point or seen.get("ticket") == (model, tuple(ids))):
                        seen["ticket"] = (model, tuple(ids))
                        return RuntimeError("500 Internal Server Error")
                    if kind == "KeyboardInterrupt" and k == point:
                        return KeyboardInterrupt()
                    return None

                scorer = Scorer(fail, seed=trial)
                undo = _full_disk(point, kind != "full disk, no reserve") if kind.startswith("full") else (lambda: None)
                sel = _selector(log, budget, train, concurrency)
                try:
                    run(scorer, sel, retry_wait=0.001, handle_signals=False)
                except (EvaluationError, Interrupted, LogWriteError) as err:
                    said = re.search(r"([\d,]+) (?:cells )?(?:in flight could not be saved and )?will be asked again",
                                     str(err))
                    asked_again += int(said.group(1).replace(",", "")) if said else 0
                finally:
                    undo()
                    sel.close()
                running_total += scorer.running
                scorer.fail = None                  # the failure is over: resume
                resumed = _selector(log, budget, train, concurrency)
                report = run(scorer, resumed, handle_signals=False)
                resumed.close()
                twice += len(scorer.returned) - len(set(scorer.returned))
                lost += report.spent != budget
                bad_resumes += not _same(report, clean)
            rows.append({"concurrency": concurrency, "failure": kind, "points": points, "paid_twice": twice,
                         "running_at_failure": running_total, "said_asked_again": asked_again, "lost_runs": lost,
                         "resumes_differing": bad_resumes})
    return rows


# --------------------------------------------------------------------------------------------- tampering

def _finished_log(folder: Path, train) -> tuple[Path, object]:
    log = folder / "base.db"
    sel = _selector(log, len(stand_in.models()) * BATCH + 40 * BATCH, train, 16)
    report = run(Scorer(), sel, handle_signals=False)
    sel.close()
    return log, report


def _sql(path, *statements):
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for sql in statements:
            conn.execute(sql)
    finally:
        conn.close()


def _rechain(path, edit):
    """Apply ``edit(seq, record)`` to told rows and recompute the whole chain and tally (a forger's edit)."""
    conn = sqlite3.connect(path, isolation_level=None)
    previous = conn.execute("SELECT crc FROM run").fetchone()[0]
    rows = conn.execute("SELECT seq, ticket, step, asks_issued, model, examples, scores FROM told ORDER BY seq").fetchall()
    for seq, ticket, step, asks, model, examples, scores in rows:
        record = {"type": "tell", "ticket": ticket, "step": step, "asks_issued": asks, "model": model,
                  "examples": json.loads(examples), "scores": json.loads(scores)}
        edit(seq, record)
        previous = journal.checksum(record, previous)
        conn.execute("UPDATE told SET scores = ?, crc = ? WHERE seq = ?", (json.dumps(record["scores"]), previous, seq))
    conn.execute("UPDATE meta SET value = ? WHERE key = 'told_tail'", (previous,))
    conn.close()


def _tamper_cases(base: Path) -> list[tuple[str, object]]:
    size = base.stat().st_size
    rows = sqlite3.connect(base).execute("SELECT count(*) FROM told").fetchone()[0]
    cases = []
    for seq in (1, 5, rows // 2, rows - 1, rows):
        cases.append((f"score edited in told row {seq}",
                      lambda p, s=seq: _sql(p, f"UPDATE told SET scores = replace(scores, '0.0', '1.0') WHERE seq = {s}")))
    for seq in (3, rows // 2, rows):
        cases.append((f"score edited in row {seq}, chain recomputed (valid values)",
                      lambda p, s=seq: _rechain(p, lambda k, r: r["scores"].__setitem__(0, 1.0 - r["scores"][0])
                                                if k == s else None)))
        cases.append((f"score set to 5 in row {seq}, chain recomputed",
                      lambda p, s=seq: _rechain(p, lambda k, r: r["scores"].__setitem__(0, 5.0) if k == s else None)))
    for seq in (2, rows // 2, rows - 2):
        cases.append((f"row {seq} deleted (middle)", lambda p, s=seq: _sql(p, f"DELETE FROM told WHERE seq = {s}")))
    for cut in (1, 2, 5):
        cases.append((f"last {cut} row(s) deleted", lambda p, c=cut: _sql(p, f"DELETE FROM told WHERE seq > {rows - c}")))
    cases.append(("a row duplicated at the end", lambda p: _sql(
        p, "INSERT INTO told(ticket, step, asks_issued, model, examples, scores, crc) SELECT ticket + 100000, step, "
           "asks_issued, model, examples, scores, crc FROM told WHERE seq = 3")))
    for name, sql in (
            ("AFTER INSERT trigger deleting new rows", "CREATE TRIGGER t AFTER INSERT ON told BEGIN DELETE FROM told "
                                                       "WHERE seq = new.seq; END"),
            ("BEFORE INSERT trigger", "CREATE TRIGGER t BEFORE INSERT ON told BEGIN SELECT 1; END"),
            ("trigger on paid", "CREATE TRIGGER t AFTER INSERT ON paid BEGIN DELETE FROM paid; END"),
            ("AFTER DELETE trigger", "CREATE TRIGGER t AFTER DELETE ON paid BEGIN SELECT 1; END"),
            ("a view", "CREATE VIEW v AS SELECT * FROM told"), ("a temp-like view", "CREATE VIEW told2 AS SELECT 1"),
            ("an extra table", "CREATE TABLE extra(x)"), ("an extra index", "CREATE INDEX i ON told(model)"),
            ("a column added to told", "ALTER TABLE told ADD COLUMN x"),
            ("meta: version edited", "UPDATE meta SET value = '3' WHERE key = 'version'"),
            ("meta: format edited", "UPDATE meta SET value = 'x' WHERE key = 'format'"),
            ("meta: tally edited", "UPDATE meta SET value = '1' WHERE key = 'told_rows'"),
            ("run configuration edited", "UPDATE run SET config = replace(config, '\"seed\":0', '\"seed\":1')"),
            ("user_version changed", "PRAGMA user_version = 9"), ("application_id changed", "PRAGMA application_id = 7"),
            ("a forged paid row without its checksum", "INSERT INTO paid SELECT ticket + 100000, step, asks_issued, "
                                                       "model, examples, scores, crc FROM told WHERE seq = 2")):
        cases.append((name, lambda p, q=sql: _sql(p, q)))
    for table in ("meta", "run", "told", "paid", "holder", "reserve"):
        cases.append((f"table {table} dropped", lambda p, t=table: _sql(p, f"DROP TABLE {t}")))
    for k in range(20):
        offset = int(size * (k + 0.5) / 20)
        cases.append((f"truncated at byte {offset:,}", lambda p, o=offset: os.truncate(p, o)))
    cases += [("an empty file", lambda p: p.write_bytes(b"")),
              ("random bytes", lambda p: p.write_bytes(np.random.default_rng(0).bytes(4096))),
              ("a text file", lambda p: p.write_text("model,score\na,1\n")),
              ("a JSON file", lambda p: p.write_text('{"type": "nothing"}\n')),
              ("a foreign SQLite database", lambda p: (p.unlink(), _sql(p, "CREATE TABLE t(x)"))),
              ("a foreign WAL database", lambda p: (p.unlink(), _sql(p, "PRAGMA journal_mode = WAL",
                                                                      "CREATE TABLE t(x)")))]
    return cases


def _jsonl_cases(base: Path) -> list[tuple[str, object]]:
    header, records = journal.snapshot(base)
    text = legacy_jsonl.as_jsonl(header, records)
    lines = text.splitlines(keepends=True)

    def write(p, content):
        p.unlink()
        p.with_suffix(".jsonl").write_text(content)

    cases = [(f"JSONL export cut at line break {k}", lambda p, k=k: write(p, "".join(lines[:k])))
             for k in (2, len(lines) // 2, len(lines) - 1)]
    cases.append(("JSONL line edited", lambda p: write(p, "".join(lines[:3]) + lines[3].replace("0.0", "1.0", 1)
                                                        + "".join(lines[4:]))))
    cases.append(("JSONL trailer count edited", lambda p: write(p, "".join(lines[:-1]) + lines[-1].replace(
        '"rows": ', '"rows": 1'))))
    return cases


def tampering(root: Path, train) -> dict:
    base, report = _finished_log(root / "tamper", train) if (root / "tamper").mkdir() is None else (None, None)
    cases = _tamper_cases(base) + _jsonl_cases(base)
    rows = []
    for k, (name, edit) in enumerate(cases):
        copy = root / "tamper" / f"case{k}.db"
        shutil.copy(base, copy)
        shutil.copy(base.with_name(base.name + ".embeddings.npy"), copy.with_name(copy.name + ".embeddings.npy"))
        edit(copy)
        target = copy if copy.exists() else copy.with_suffix(".jsonl")
        outcome, line = _open_tampered(target, report, train)
        rows.append({"case": name, "outcome": outcome, "message": line[:160]})
    counts = {o: sum(r["outcome"] == o for r in rows) for o in
              ("refused", "harmless", "accepted: recomputed chain", "changed, undetected", "silent restart", "traceback")}
    return {"cases": len(rows), **counts, "rows": rows}


def _open_tampered(path: Path, report, train) -> tuple[str, str]:
    try:
        sel = _selector(path, report.budget, train, 16)
    except PulseInputError as err:
        line = str(err)
        return ("refused" if "\n" not in line else "traceback"), line
    except Exception as err:  # noqa: BLE001 -- counted
        return "traceback", f"{type(err).__name__}: {err}"
    try:
        if sel.spent == 0:
            return "silent restart", "the log was read as empty"
        if sel.spent == report.spent and np.allclose(sel.result().estimates, report.estimates, atol=1e-6):
            return "harmless", "replayed to the same state"
        return "accepted: recomputed chain", "an edit with a recomputed chain and valid values"
    finally:
        sel.close()


# --------------------------------------------------------------------------------------------- bad input

BAD_NUMBERS = ["-1", "nan", "inf", "-inf", "1e400", "abc", "99999999999999999999", ""]
BAD_COUNTS = BAD_NUMBERS + ["0", "1.5"]
BAD_PROBABILITIES = BAD_NUMBERS + ["0", "1", "2"]


def _bad_inputs(folder: Path) -> list[tuple[str, list[str]]]:
    """(name, argv) of inputs every one of which must be refused."""
    (folder / "empty.csv").write_text("")
    (folder / "binary.csv").write_bytes(bytes(range(256)) * 4)
    (folder / "one.csv").write_text("model,e1,e2\na,1,0\n")
    (folder / "bad.csv").write_text("model,e1,e2\na,1,0\nb,2,0\n")
    (folder / "ok.csv").write_text("model," + ",".join(f"e{j}" for j in range(30)) + "\n" + "".join(
        f"m{i}," + ",".join(str((i * j) % 2) for j in range(30)) + "\n" for i in range(4)))
    (folder / "models.txt").write_text("a\nb\n")
    (folder / "dup.txt").write_text("a\na\n")
    (folder / "empty.txt").write_text("")
    (folder / "fake.npz").write_bytes(b"\x93NUMPY not really")
    (folder / "deep.json").write_text("[" * 5000 + "]" * 5000)
    (folder / "hp.json").write_text(json.dumps({"rank": 2, "epochs": -1, "lr": 0.1, "lam": 0.0}))
    (folder / "dir").mkdir(exist_ok=True)
    cases = []
    run_numbers = {"--reps": BAD_COUNTS, "--budget": BAD_COUNTS, "--batch-size": BAD_COUNTS,
                   "--init-batches": BAD_COUNTS, "--refit-every": BAD_NUMBERS + ["1.5"], "--rank": BAD_COUNTS,
                   "--delta": BAD_PROBABILITIES, "--seed": ["-1", "abc", "1.5", str(2**70)],
                   "--chunk-size": BAD_COUNTS, "--exploration": ["-1", "nan", "inf", "abc"],
                   "--epsilon": ["-1", "nan", "inf", "abc"], "--top-k": BAD_COUNTS, "--tie-group": BAD_COUNTS}
    for command in ("demo", "simulate"):
        base = [command, "--out", str(folder / f"out_{command}")] + (
            ["--scores", str(folder / "ok.csv"), "--method", "ucbe"] if command == "simulate" else [])
        for option, values in run_numbers.items():
            cases += [(f"{command} {option} {v!r}", base + [option, v]) for v in values]
    for bad in ("empty.csv", "binary.csv", "one.csv", "bad.csv", "fake.npz", "missing.csv", "dir"):
        cases.append((f"simulate --scores {bad}", ["simulate", "--scores", str(folder / bad), "--out",
                                                   str(folder / "o1")]))
        cases.append((f"simulate --train {bad}", ["simulate", "--scores", str(folder / "ok.csv"), "--train",
                                                  str(folder / bad), "--method", "pulse", "--out", str(folder / "o2")]))
        cases.append((f"tune --train {bad}", ["tune", "--train", str(folder / bad), "--out", str(folder / "h.json")]))
        cases.append((f"sweep --scores {bad}", ["sweep", "--scores", str(folder / bad), "--grid", "delta=0.05,0.1",
                                                "--out", str(folder / "o3")]))
    for grid in ("delta=", "nosuch=1", "delta=2", "delta=abc", "rule.exploration=-1", "=1", "delta"):
        cases.append((f"sweep --grid {grid!r}", ["sweep", "--scores", str(folder / "ok.csv"), "--method", "ucbe",
                                                 "--grid", grid, "--out", str(folder / "o4")]))
    for option, values in (("--folds", BAD_COUNTS), ("--ranks", ["0", "-1", "a", ""]), ("--lams", ["-1", "nan", "a"]),
                           ("--lrs", ["0", "-1", "nan", "a"]), ("--epochs", ["0", "-1", "1.5", "a"])):
        cases += [(f"tune {option} {v!r}", ["tune", "--train", str(folder / "ok.csv"), "--out", str(folder / "t.json"),
                                            option, v]) for v in values]
    select = ["select", "--models", str(folder / "models.txt"), "--examples", "30", "--budget", "200", "--evaluate",
              "pulse_jax.stand_in:score", "--method", "ucbe", "--log", str(folder / "sel.db")]
    live_numbers = {"--budget": BAD_COUNTS, "--batch-size": BAD_COUNTS, "--concurrency": BAD_COUNTS,
                    "--retries": ["-1", "abc", "1.5", "99999999999"], "--retry-wait": ["-1", "nan", "inf", "abc"],
                    "--retry-max-wait": ["-1", "nan", "abc"], "--grace": ["-1", "nan", "inf", "abc"],
                    "--delta": BAD_PROBABILITIES, "--examples": ["0", "-5", str(folder / "empty.txt"),
                                                                 str(folder / "missing.txt")],
                    "--cost-per-call": ["-1", "nan", "abc"], "--budget-usd": ["-1", "nan", "abc"],
                    "--refit-every": ["-1", "abc"], "--rank": BAD_COUNTS, "--seed": ["-1", "abc"]}
    for option, values in live_numbers.items():
        for v in values:
            argv = list(select)
            if option in argv:
                argv[argv.index(option) + 1] = v
            else:
                argv += [option, v]
            cases.append((f"select {option} {v!r}", argv))
    for option, bad in (("--models", "dup.txt"), ("--models", "empty.txt"), ("--models", "missing.txt"),
                        ("--models", "binary.csv"), ("--train", "binary.csv"), ("--train", "fake.npz"),
                        ("--log", "dir"), ("--log", "ok.csv"), ("--log", "deep.json"), ("--evaluate", "nosuch:fn"),
                        ("--evaluate", "pulse_jax.stand_in:nothing"), ("--evaluate", "noformat"),
                        ("--price", "a=x/y"), ("--price", "nosuch=1/2"), ("--method", "nosuch"), ("--rule", "nosuch"),
                        ("--stop", "nosuch")):
        argv = list(select)
        value = str(folder / bad) if option in ("--models", "--train", "--log") else bad
        if option in argv:
            argv[argv.index(option) + 1] = value
        else:
            argv += [option, value]
        if option == "--train":
            argv[argv.index("--method") + 1] = "pulse"
        cases.append((f"select {option} {bad}", argv))
    for source, extra in (("long", ["--model-column", "nosuch"]), ("long", []), ("inspect", []), ("lm-eval", [])):
        for bad in ("empty.csv", "binary.csv", "deep.json", "missing.csv", "dir"):
            target = str(folder / bad)
            argv = ["import", source, target, "--out", str(folder / f"imp_{source}.csv")] + extra
            if source == "lm-eval":
                argv += ["--task", "x", "--metric", "acc"]
            cases.append((f"import {source} {bad} {' '.join(extra)}".strip(), argv))
    for action in ("show", "export"):
        for bad in ("empty.csv", "binary.csv", "deep.json", "missing.db", "dir", "ok.csv", "fake.npz"):
            argv = ["log", action, str(folder / bad)] + (["--jsonl", str(folder / f"x_{bad}.jsonl")]
                                                         if action == "export" else [])
            cases.append((f"log {action} {bad}", argv))
    for bad in ("empty.csv", "binary.csv", "deep.json", "missing.jsonl", "dir"):
        cases.append((f"log import {bad}", ["log", "import", str(folder / bad), str(folder / f"imp_{bad}.db")]))
    cases.append(("simulate --hparams epochs -1", ["simulate", "--scores", str(folder / "ok.csv"), "--train",
                                                   str(folder / "ok.csv"), "--hparams", str(folder / "hp.json"),
                                                   "--method", "pulse", "--out", str(folder / "o5")]))
    return cases + _cost_and_history_inputs(folder, select)


def _cost_and_history_inputs(folder: Path, select: list[str]) -> list[tuple[str, list[str]]]:
    """Costs (``--cost``, ``--cheapest``, ``--front``, per-call ``--price``), histories that cannot fit
    embeddings, JSONL scores that are not numbers and log headers without the run's identity."""
    header = "model," + ",".join(f"e{j}" for j in range(30)) + "\n"
    files = {"cost_ok.csv": "model,cost\nm0,1\nm1,2\nm2,3\nm3,4\n",
             "cost_neg.csv": "model,cost\nm0,1\nm1,-1\nm2,1\nm3,1\n",
             "cost_nan.csv": "model,cost\nm0,1\nm1,nan\nm2,1\nm3,1\n",
             "cost_unknown.csv": "model,cost\nm0,1\nm1,1\nm2,1\nm3,1\nzz,1\n",
             "cost_short.csv": "model,cost\nm0,1\n",
             "cost_text.csv": "model,cost\nm0,1\nm1,cheap\nm2,1\nm3,1\n",
             "cost_twice.csv": "model,cost\nm0,1\nm0,2\n",
             "cost_cols.csv": "model,e0,e1\nm0,1,1\nm1,1,1\nm2,1,1\nm3,1,1\n",
             "cost_zero.csv": "model,cost\nm0,0\nm1,1\nm2,1\nm3,1\n",
             "train_one.csv": header + "h0," + ",".join("1" for _ in range(30)) + "\n",
             "train_empty_row.csv": header + "h0," + ",".join("1" for _ in range(30)) + "\nh1" + "," * 30 + "\n",
             "long_text.jsonl": '{"model": "a", "example": "q", "score": "1"}\n',
             "long_bool.jsonl": '{"model": "a", "example": "q", "score": true}\n',
             "header_only.jsonl": '{"type": "header"}\n'}
    for name, text in files.items():
        (folder / name).write_text(text)
    simulate = ["simulate", "--scores", str(folder / "ok.csv"), "--method", "ucbe", "--reps", "1", "--batch-size", "4",
                "--out", str(folder / "o6")]
    cases = [(f"simulate --cost {name}", simulate + ["--cost", str(folder / name)])
             for name in ("cost_neg.csv", "cost_nan.csv", "cost_unknown.csv", "cost_short.csv", "cost_text.csv",
                          "cost_twice.csv", "cost_cols.csv", "cost_zero.csv", "missing.csv", "binary.csv", "dir",
                          "empty.csv")]
    cases.append(("simulate --cheapest without --cost", simulate + ["--cheapest", "0.01"]))
    cases.append(("simulate --front without --cost", simulate + ["--front"]))
    for flag in ("--cheapest", "--front"):
        cases += [(f"simulate {flag} {v!r}", simulate + ["--cost", str(folder / "cost_ok.csv"), flag, v])
                  for v in ("-1", "nan", "inf", "2", "abc")]
    cases.append(("simulate --cheapest and --epsilon", simulate + ["--cost", str(folder / "cost_ok.csv"), "--cheapest",
                                                                   "0.01", "--epsilon", "0.01"]))
    cases.append(("select --cheapest without prices", select + ["--cheapest", "0.01"]))
    cases += [(f"select --price {v!r}", select + ["--price", v]) for v in ("a=-1", "a=nan", "a=1/2/3", "a=", "=1")]
    for name in ("train_one.csv", "train_empty_row.csv"):
        cases.append((f"simulate --train {name}", ["simulate", "--scores", str(folder / "ok.csv"), "--train",
                                                   str(folder / name), "--method", "pulse", "--batch-size", "4",
                                                   "--out", str(folder / "o7")]))
    for name in ("long_text.jsonl", "long_bool.jsonl"):
        cases.append((f"import long {name}", ["import", "long", str(folder / name), "--out", str(folder / "l.csv")]))
    cases.append(("log show header_only.jsonl", ["log", "show", str(folder / "header_only.jsonl")]))
    cases.append(("log import header_only.jsonl", ["log", "import", str(folder / "header_only.jsonl"),
                                                   str(folder / "h.db")]))
    return cases


#: ``select_best`` keywords with values each of which must be refused (``name -> values``).
SELECT_BEST_BAD = {
    "budget": [-1, 0, 1.5, "x", float("nan")], "batch_size": [0, -1, "x", 2.5], "delta": [0, 1, 2, float("nan"), "x"],
    "method": ["nosuch", 3], "rule": ["nosuch", 3], "stop": ["nosuch"], "epsilon": [-1, 2, float("nan"), "x"],
    "top_k": [0, -1, 1.5], "tie_group": [0, -2], "cheapest": [0.01, -1], "front": [0.01, 2],
    "concurrency": [0, 2000, "x"], "retries": [-1, 1.5], "retry_wait": [-1, float("nan")], "call_timeout": [0, -1],
    "price": [["a=x"], 5], "cost_per_call": [-1, float("nan")], "budget_usd": [-1, 5], "seed": [-1, "x", 1.5],
    "train": ["missing.csv", 5], "param": [["nosuch=1"], ["delta"]], "report": [5], "nosuch_option": [1],
    "bounds": ["some"], "sequence": ["nosuch"], "rank": [0, -3], "init_batches": [0], "refit_every": [-1],
}


def _select_best_refusals(folder: Path) -> list[dict]:
    """Each bad `select_best` keyword (`SELECT_BEST_BAD`): refused (a `PulseInputError`), accepted or
    another exception (a traceback)."""
    from pulse_jax import select_best
    from pulse_jax.errors import PulseInputError

    rows = []
    for key, values in SELECT_BEST_BAD.items():
        for value in values:
            name = f"select_best({key}={value!r})"
            try:
                with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
                    select_best(log=str(folder / f"sb_{len(rows)}.db"), **{key: value})
                outcome, message = "accepted", ""
            except PulseInputError as err:
                outcome, message = ("refused" if "\n" not in str(err) else "traceback"), str(err)
            except Exception as exc:  # noqa: BLE001 -- counted
                outcome, message = "traceback", f"{type(exc).__name__}: {exc}"
            rows.append({"input": name, "outcome": outcome, "message": message[:160]})
    return rows


def bad_input(root: Path) -> dict:
    from pulse_jax import cli

    folder = root / "bad"
    folder.mkdir()
    rows, here = [], os.getcwd()
    os.chdir(folder)
    try:
        for name, argv in _bad_inputs(folder):
            err = io.StringIO()
            try:
                with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                    code = cli.main(argv)
                outcome = "refused" if code == 2 else "accepted"
            except SystemExit as stop:          # argparse: the usage and one error line
                outcome = "refused" if stop.code == 2 else "accepted"
            except Exception as exc:  # noqa: BLE001 -- counted
                outcome, err = "traceback", io.StringIO(f"{type(exc).__name__}: {exc}")
            last = (err.getvalue().strip().splitlines() or [""])[-1]
            rows.append({"input": name, "outcome": outcome, "message": last[:160]})
        rows += _select_best_refusals(folder)
    finally:
        os.chdir(here)
    return {"inputs": len(rows), **{o: sum(r["outcome"] == o for r in rows) for o in ("refused", "accepted", "traceback")},
            "rows": rows}


def main(argv=None) -> int:
    parser = common.parser(__doc__, out="docs/benchmarks/failures.json", seed=0)
    parser.add_argument("--budget", type=int, default=3200, help="cells per live run (640 of them initialization)")
    parser.add_argument("--points", type=int, default=20, help="random failure points per kind and concurrency")
    parser.add_argument("--failure-rate", type=float, default=0.05)
    parser.add_argument("--retry-wait", type=float, default=1.0, help="the first retry's wait (the library's default)")
    parser.add_argument("--only", default="transient,outlasting,tampering,bad_input")
    args = parser.parse_args(argv)
    train = stand_in.benchmark().train
    only = set(args.only.split(","))
    result = {"machine": platform.platform(), "python": sys.version.split()[0], "budget": args.budget,
              "batch_size": BATCH, "refit_every": REFIT_EVERY, "method": METHOD}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if "transient" in only:
            result["transient"] = transient(root, args.budget, args.failure_rate, args.retry_wait, train)
            _table("Transient failures", result["transient"])
        if "outlasting" in only:
            result["outlasting"] = outlasting(root, args.budget, args.points, train, args.seed)
            _table("Failures that outlast their retries", result["outlasting"])
        if "tampering" in only:
            result["tampering"] = tampering(root, train)
            _table("Tampering", [{k: v for k, v in result["tampering"].items() if k != "rows"}])
            _table("Tampering: cases not refused", [r for r in result["tampering"]["rows"] if r["outcome"] != "refused"])
        if "bad_input" in only:
            result["bad_input"] = bad_input(root)
            _table("Bad input", [{k: v for k, v in result["bad_input"].items() if k != "rows"}])
            _table("Bad input: not refused", [r for r in result["bad_input"]["rows"] if r["outcome"] != "refused"])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    command = "python benchmarks/durability/bench_failures.py " + " ".join(sys.argv[1:] if argv is None else argv)
    out.with_suffix(".md").write_text(f"# Failures a live selection meets\n\n`{command.strip()}` on {result['machine']}, "
                                      f"Python {result['python']}; {METHOD}, budget {args.budget:,} cells, batch "
                                      f"{BATCH}, refit every {REFIT_EVERY}.\n\n" + "\n".join(_MARKDOWN))
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


_MARKDOWN: list[str] = []


def _table(title: str, rows: list[dict]) -> None:
    """Print a table and keep it, as Markdown, for the ``.md`` beside ``--out``."""
    print(f"\n{title}")
    _MARKDOWN.extend([f"## {title}", ""])
    if not rows:
        print("  (none)")
        _MARKDOWN.extend(["(none)", ""])
        return
    keys = list(rows[0])
    print(" | ".join(keys))
    _MARKDOWN.extend(["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)])
    for row in rows:
        print(" | ".join(str(row[k]) for k in keys))
        _MARKDOWN.append("| " + " | ".join(str(row[k]).replace("|", "\\|") for k in keys) + " |")
    _MARKDOWN.append("")


if __name__ == "__main__":
    sys.exit(main())
