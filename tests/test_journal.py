"""The live log cannot be lost, re-paid or silently corrupted: one writer however the path is spelled,
checksums, validated replay, files that are not logs left alone, JSONL logs converted once."""
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import log_records, run_sql, write_slow_scorer
from pulse_jax.errors import PulseInputError
from pulse_jax.live import Selector, journal, run

B = 8


def _selector(journal_bench, log, **kw):
    b, V = journal_bench
    kw.setdefault("method", "pulse")
    kw.setdefault("concurrency", 1)
    return Selector(b.models, 200, 6 * B + 8 * 10, batch_size=B, V=V, seed=5, refit_every=4, log=log, **kw)


def _oracle(b):
    return lambda model, ids: b.scores[b.models.index(model), ids].tolist()


def _finished_log(journal_bench, tmp_path, name="run.db"):
    log = tmp_path / name
    sel = _selector(journal_bench, log, stop="budget")
    report = run(_oracle(journal_bench[0]), sel)
    sel.close()
    return log, report


def _jsonl_copy(log, out):
    """The finished database ``log`` as an earlier version's live version-3 JSONL log at ``out``: one
    checksum chain over the header and the batches, no row count and no closing line (those mark an
    export)."""
    header, records = journal.snapshot(log)
    header = {**{k: v for k, v in header.items() if k != "jsonl_version"}, "version": 3}
    lines, previous = [], ""
    for record in [header] + records:
        previous = journal.checksum(record, previous)
        lines.append(json.dumps({**record, "crc": previous}) + "\n")
    Path(out).write_text("".join(lines))
    return Path(out)


def test_every_told_row_carries_a_chained_checksum(journal_bench, tmp_path):
    log, report = _finished_log(journal_bench, tmp_path)
    conn = sqlite3.connect(log)
    config, previous = conn.execute("SELECT config, crc FROM run").fetchone()
    assert previous == journal.checksum(json.loads(config), "")
    rows = conn.execute("SELECT ticket, step, asks_issued, model, examples, scores, crc FROM told ORDER BY seq")
    cells = 0
    for ticket, step, asks, model, examples, scores, crc in rows:
        record = {"type": "tell", "ticket": ticket, "step": step, "asks_issued": asks, "model": model,
                  "examples": json.loads(examples), "scores": json.loads(scores)}
        assert crc == journal.checksum(record, previous)
        previous, cells = crc, cells + len(record["examples"])
    assert cells == report.spent
    assert conn.execute("PRAGMA application_id").fetchone()[0] == journal.APPLICATION_ID
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.db", "run.db.embeddings.npy"]   # no lock, no journal


@pytest.mark.parametrize("tamper, needle", [
    ("UPDATE told SET scores = replace(scores, '0.0', '1.0') WHERE seq = 4", "told batch 4 fails its checksum"),
    ("DELETE FROM told WHERE seq = 4", "told batch 5 fails its checksum"),
    ("UPDATE told SET crc = (SELECT crc FROM told WHERE seq = 5), ticket = ticket + 1000 WHERE seq = 4",
     "told batch 4 fails its checksum"),
    ("UPDATE meta SET value = '1' WHERE key = 'version'", "the log's format marks disagree \\(meta version '1', "
                                                           "database version 5"),
    ("PRAGMA user_version = 3", "is a pulse-jax log of format version 3, which this pulse-jax \\(format 5\\) does "
                                "not read"),
    ("UPDATE run SET config = replace(config, '\"version\":5', '\"version\":1')", "configuration fails its checksum"),
    ("UPDATE run SET config = replace(config, '\"budget\":128', '\"budget\":129')", "configuration fails its checksum"),
])
def test_tampering_is_detected_and_named(journal_bench, tmp_path, tamper, needle):
    log, _ = _finished_log(journal_bench, tmp_path)
    run_sql(log, tamper)
    with pytest.raises(PulseInputError, match=needle) as err:
        _selector(journal_bench, log)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("edit, needle", [
    (lambda r: r.update(scores=[5.0] * len(r["scores"])), "score 5.0 is not a number in \\[0, 1\\]"),
    (lambda r: r.update(scores=[float("nan")] * len(r["scores"])), "not a number in \\[0, 1\\]"),
    (lambda r: r.update(scores={}), "field 'scores' is missing or not a list"),
    (lambda r: r.update(scores=[1, 2]), "2 scores for 8 examples"),
    (lambda r: r.update(scores="0.5"), "field 'scores' is missing or not a list"),
    (lambda r: r.update(scores=["a"] * 8), "score 'a' is not a number in \\[0, 1\\]"),
    (lambda r: r.update(model="gpt-9"), "unknown model 'gpt-9'"),
    (lambda r: r.update(ticket="seven"), "field 'ticket' is missing or not an int"),
])
def test_edited_records_with_a_valid_checksum_are_still_validated(journal_bench, tmp_path, edit, needle):
    """Someone edits a batch and recomputes the chain: the values themselves are checked, one line each."""
    log, _ = _finished_log(journal_bench, tmp_path)
    conn = sqlite3.connect(log, isolation_level=None)
    previous = conn.execute("SELECT crc FROM run").fetchone()[0]
    rows = conn.execute("SELECT seq, ticket, step, asks_issued, model, examples, scores FROM told ORDER BY seq").fetchall()
    for seq, ticket, step, asks, model, examples, scores in rows:
        record = {"type": "tell", "ticket": ticket, "step": step, "asks_issued": asks, "model": model,
                  "examples": json.loads(examples), "scores": json.loads(scores)}
        if seq == 7:
            edit(record)
        previous = journal.checksum(record, previous)
        conn.execute("UPDATE told SET ticket = ?, model = ?, scores = ?, crc = ? WHERE seq = ?",
                     (record["ticket"], record["model"], json.dumps(record["scores"]), previous, seq))
    conn.execute("UPDATE meta SET value = ? WHERE key = 'told_tail'", (previous,))   # the tally too
    conn.close()
    with pytest.raises(PulseInputError, match=needle) as err:
        _selector(journal_bench, log)
    assert f"{log}: told batch 7" in str(err.value) and "\n" not in str(err.value)


def test_a_resume_is_exact_and_a_second_resume_changes_nothing(journal_bench, tmp_path):
    full, report = _finished_log(journal_bench, tmp_path, "full.db")
    half = tmp_path / "half.db"
    sel = _selector(journal_bench, half, stop="budget")
    oracle = _oracle(journal_bench[0])
    for _ in range(9):
        request = sel.ask()
        sel.tell(request, oracle(request.model, list(request.example_ids)))
    sel.close()
    again = _selector(journal_bench, half, stop="budget")
    assert again.spent == sum(len(r["examples"]) for r in log_records(half))
    resumed = run(oracle, again)
    again.close()
    assert resumed.evaluated == report.evaluated
    np.testing.assert_allclose(resumed.estimates, report.estimates, atol=1e-6)
    second = _selector(journal_bench, half)
    assert second.spent == report.spent and not second.pending()
    second.close()
    assert log_records(half) == log_records(full)


def test_the_log_is_held_by_its_file_however_the_path_is_spelled(journal_bench, tmp_path):
    """A symlink, a renamed folder path or a hard link: a second writer in another process is refused in
    one line naming the holder, and nothing is written."""
    log, _ = _finished_log(journal_bench, tmp_path)
    (tmp_path / "link.db").symlink_to(log)
    (tmp_path / "alias").symlink_to(tmp_path)
    holder = _selector(journal_bench, log)
    script = ("import sys\nfrom pulse_jax.live import journal\nfrom pulse_jax.errors import PulseInputError\n"
              "try:\n    journal.Journal(sys.argv[1])\nexcept PulseInputError as e:\n    print(e); sys.exit(2)\n")
    before = log.read_bytes()
    for spelling in (tmp_path / "link.db", tmp_path / "alias" / "run.db", log):
        out = subprocess.run([sys.executable, "-c", script, str(spelling)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 2, out.stderr
        assert f"is in use by process {os.getpid()} on" in out.stdout and len(out.stdout.strip().splitlines()) == 1
    holder.close()
    assert log.read_bytes() == before
    os.link(log, tmp_path / "hard.db")
    with pytest.raises(PulseInputError, match=r"the log has 2 names \(hard links\)"):
        journal.Journal(tmp_path / "hard.db")
    with pytest.raises(PulseInputError, match=r"the log has 2 names \(hard links\)"):
        journal.Journal(log)
    assert log.read_bytes() == before


def test_a_second_selector_in_this_process_takes_the_log_over(journal_bench, tmp_path):
    log = tmp_path / "run.db"
    first = _selector(journal_bench, log)
    request = first.ask()
    second = _selector(journal_bench, log)
    with pytest.raises(PulseInputError, match="no longer holds the log"):
        first.tell(request, [1.0] * len(request.example_ids))
    second.close()


@pytest.mark.parametrize("content", [b'{"models": ["a", "b"]}\n', b"PK\x03\x04 not really a zip", b"x" * 4000,
                                     "sqlite", "fifo"])
def test_a_file_that_is_not_a_log_is_never_touched(journal_bench, tmp_path, content):
    log = tmp_path / "config.json"
    if content == "sqlite":           # somebody else's database
        run_sql(log, "CREATE TABLE t(x)", "INSERT INTO t VALUES (1)")
    elif content == "fifo":
        os.mkfifo(log)
    else:
        log.write_bytes(content)
    before = None if content == "fifo" else log.read_bytes()
    with pytest.raises(PulseInputError, match=r"config.json: (exists and is not a pulse-jax log|is an SQLite database "
                                              r"but not a pulse-jax log|is a FIFO, not a file)") as err:
        _selector(journal_bench, log)
    assert "\n" not in str(err.value)
    if before is not None:
        assert log.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


def test_dev_null_is_not_a_log():
    with pytest.raises(PulseInputError, match=r"--log /dev/null: is a character device, not a file"):
        journal.Journal("/dev/null")


def test_resume_refuses_embeddings_that_contradict_the_sidecar(journal_bench, tmp_path):
    b, V = journal_bench
    log, _ = _finished_log(journal_bench, tmp_path)
    with pytest.raises(PulseInputError, match="V differs from the embeddings"):
        Selector(b.models, 200, 6 * B + 8 * 10, batch_size=B, V=V + 1.0, seed=5, refit_every=4, log=log)
    with pytest.raises(PulseInputError, match="rank 7 differs from rank 3"):
        Selector(b.models, 200, 6 * B + 8 * 10, batch_size=B, train=b.train, rank=7, seed=5, refit_every=4, log=log)


def test_a_jsonl_log_is_converted_once_in_place_and_resumes_exactly(journal_bench, tmp_path, capsys):
    full, report = _finished_log(journal_bench, tmp_path, "full.db")
    lines = _jsonl_copy(full, tmp_path / "full.jsonl").read_text().splitlines()
    log = tmp_path / "run.jsonl"
    log.write_text("\n".join(lines[:8]) + "\n")                       # a run stopped after 7 batches
    (tmp_path / "run.jsonl.embeddings.npy").write_bytes((tmp_path / "full.db.embeddings.npy").read_bytes())
    from pulse_jax.errors import PulseNote

    with pytest.warns(PulseNote) as notes:
        sel = _selector(journal_bench, log, stop="budget")
    message = " ".join(str(n.message) for n in notes)
    assert "converted the version-3 JSONL log to an SQLite database in place (7 record(s)); the original is kept " \
           "as run.jsonl.v3.jsonl" in message
    assert (tmp_path / "run.jsonl.v3.jsonl").read_text() == "\n".join(lines[:8]) + "\n"
    assert log.read_bytes()[:16] == b"SQLite format 3\x00"
    resumed = run(_oracle(journal_bench[0]), sel)
    sel.close()
    assert resumed.evaluated == report.evaluated
    again = _selector(journal_bench, log)
    again.close()
    assert "converted" not in capsys.readouterr().err                 # once
    assert log_records(log) == log_records(full)


def test_a_torn_jsonl_tail_is_left_out_of_the_conversion(journal_bench, tmp_path, capsys):
    full, report = _finished_log(journal_bench, tmp_path, "full.db")
    data = _jsonl_copy(full, tmp_path / "full.jsonl").read_bytes()
    ends = [k for k, byte in enumerate(data) if byte == ord("\n")]
    log = tmp_path / "run.jsonl"
    log.write_bytes(data[:ends[5] - 7])                               # the 6th line torn
    (tmp_path / "run.jsonl.embeddings.npy").write_bytes((tmp_path / "full.db.embeddings.npy").read_bytes())
    from pulse_jax.errors import PulseNote

    with pytest.warns(PulseNote, match="left out a torn last record"):
        sel = _selector(journal_bench, log, stop="budget")
    assert sel.spent == 4 * B
    resumed = run(_oracle(journal_bench[0]), sel)
    sel.close()
    assert resumed.evaluated == report.evaluated


def test_version_1_jsonl_logs_convert_and_a_forged_version_1_header_is_refused(journal_bench, tmp_path):
    full, report = _finished_log(journal_bench, tmp_path, "full.db")
    lines = [json.loads(x) for x in _jsonl_copy(full, tmp_path / "full.jsonl").read_text().splitlines()]
    forged = [dict(r) for r in lines]
    forged[0]["version"] = 1                                          # checksums kept: the header was edited
    (tmp_path / "forged.jsonl").write_text("\n".join(json.dumps(r) for r in forged) + "\n")
    with pytest.raises(PulseInputError, match="header says version 1 .* but the lines carry checksums"):
        _selector(journal_bench, tmp_path / "forged.jsonl")
    for record in lines:
        record.pop("crc")
    lines[0]["version"] = 1
    log = tmp_path / "v1.jsonl"
    log.write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    (tmp_path / "v1.jsonl.embeddings.npy").write_bytes((tmp_path / "full.db.embeddings.npy").read_bytes())
    sel = _selector(journal_bench, log)
    assert sel.spent == report.spent
    sel.close()


def test_export_and_import_round_trip(journal_bench, tmp_path):
    from pulse_jax import cli

    full, _ = _finished_log(journal_bench, tmp_path, "full.db")
    assert cli.main(["log", "export", str(full), "--jsonl", str(tmp_path / "out.jsonl")]) == 0
    assert cli.main(["log", "import", str(tmp_path / "out.jsonl"), str(tmp_path / "back.db")]) == 0
    assert log_records(tmp_path / "back.db") == log_records(full)
    assert journal.snapshot(tmp_path / "back.db")[0]["models"] == journal.snapshot(full)[0]["models"]
    assert cli.main(["log", "import", str(tmp_path / "out.jsonl"), str(tmp_path / "back.db")]) == 2   # never over a log


@pytest.mark.integration   # subprocesses for seconds each: the second test command
def test_two_processes_on_one_log(tmp_path):
    """The second process refuses at once, naming the first, writes nothing; the first completes and
    no cell is evaluated twice."""
    args = write_slow_scorer(tmp_path) + ["--log", "run.db"]
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    first = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    log = tmp_path / "run.db"
    deadline = time.time() + 120
    while time.time() < deadline and len(log_records(log)) < 3:
        time.sleep(0.05)
    (tmp_path / "link.db").symlink_to(log)
    second = subprocess.run(args[:-1] + ["link.db"], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    assert second.returncode == 2
    assert f"is in use by process {first.pid} on" in second.stderr and len(second.stderr.strip().splitlines()) == 1
    assert first.wait(timeout=300) == 0, first.stderr.read()[-2000:]
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert len(calls) == len(set(calls)) == 800                      # every cell once
    tickets = [r["ticket"] for r in log_records(log)]
    assert len(tickets) == len(set(tickets)) == 50


def test_a_scorer_that_raises_system_exit_is_an_evaluation_error(journal_bench, tmp_path):
    from pulse_jax.live import EvaluationError

    def dies(model, ids):
        raise SystemExit(3)

    sel = _selector(journal_bench, tmp_path / "run.db")
    with pytest.raises(EvaluationError, match="SystemExit"):
        run(dies, sel, retry_wait=0.0)
    sel.close()


def test_requests_are_bound_to_their_selector(journal_bench, tmp_path):
    """A request from another selector with the same ticket, or with forged example or model indices, is
    refused before anything is written."""
    import dataclasses

    first = _selector(journal_bench, tmp_path / "a.db")
    other = _selector(journal_bench, tmp_path / "b.db")
    mine, theirs = first.ask(), other.ask()
    assert mine.ticket == theirs.ticket == 0
    scores = [1.0] * len(mine.example_ids)
    before = log_records(tmp_path / "a.db")
    with pytest.raises(PulseInputError, match="request 0 was made by another selector"):
        first.tell(theirs, scores)
    for field, value in (("example_index", tuple(reversed(mine.example_index))), ("model_index", 3),
                         ("example_ids", (0,) * len(mine.example_ids)), ("step", 4)):
        with pytest.raises(PulseInputError, match=f"request 0 was changed after ask\\(\\) \\(its {field} differs\\)"):
            first.tell(dataclasses.replace(mine, **{field: value}), scores)
    with pytest.raises(PulseInputError, match="request 7 is not in flight"):
        first.tell(dataclasses.replace(mine, ticket=7), scores)
    assert log_records(tmp_path / "a.db") == before and first.spent == 0
    first.tell(mine, scores)
    with pytest.raises(PulseInputError, match="request 0 is not in flight"):
        first.tell(mine, scores)
    first.close()
    other.close()


def test_a_tail_cut_with_its_tally_deleted_is_refused_and_a_format_4_log_gets_its_tally(journal_bench, tmp_path):
    """Format 5 keeps the tally, so deleting it (to hide rows cut off the end) is refused, by a resume and by
    the reader ``log show`` uses; a format-4 log without one (written before the tally) is given one and
    becomes format 5."""
    from pulse_jax.live import journal as jr

    log, _ = _finished_log(journal_bench, tmp_path)
    cut = tmp_path / "cut.db"
    cut.write_bytes(log.read_bytes())
    run_sql(cut, "DELETE FROM told WHERE seq = (SELECT max(seq) FROM told)")
    run_sql(cut, "DELETE FROM meta WHERE key IN ('told_rows', 'told_tail', 'paid_rows')")
    with pytest.raises(PulseInputError, match="the log's tally .* is missing, so rows cut off its end"):
        _selector(journal_bench, cut)
    with pytest.raises(PulseInputError, match="the log's tally .* is missing"):
        jr.snapshot(cut)
    old = tmp_path / "old.db"
    old.write_bytes(log.read_bytes())
    run_sql(old, "DELETE FROM meta WHERE key IN ('told_rows', 'told_tail', 'paid_rows')")
    run_sql(old, "UPDATE meta SET value = '4' WHERE key = 'version'")
    run_sql(old, "PRAGMA user_version = 4")
    _selector(journal_bench, old).close()
    conn = sqlite3.connect(old)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 5
    assert dict(conn.execute("SELECT key, value FROM meta"))["told_rows"] != ""
    conn.close()


def test_a_log_deleted_under_a_run_says_so_and_leaves_no_journal_behind(tmp_path):
    from pulse_jax import live, stand_in

    models = stand_in.models()[:3]
    sel = live.Selector(models, 40, 120, method="ucbe", batch_size=4, log=tmp_path / "run.db", concurrency=1)
    for _ in range(4):
        request = sel.ask()
        sel.tell(request, stand_in.score(request.model, list(request.example_ids)))
    (tmp_path / "run.db").unlink()
    with pytest.raises(Exception) as err:
        for _ in range(4):
            request = sel.ask()
            sel.tell(request, stand_in.score(request.model, list(request.example_ids)))
    assert "the log file was deleted" in str(err.value) and "\n" not in str(err.value), str(err.value)
    sel.close()
    assert not list(tmp_path.glob("run.db*journal")), list(tmp_path.iterdir())


def test_import_onto_a_dangling_link_and_reading_beside_a_stray_journal_are_one_line(journal_bench, tmp_path, capsys):
    from pulse_jax import cli

    log, _ = _finished_log(journal_bench, tmp_path)
    assert cli.main(["log", "export", str(log), "--jsonl", str(tmp_path / "x.jsonl")]) == 0
    (tmp_path / "link.db").symlink_to(tmp_path / "nowhere" / "x.db")
    assert cli.main(["log", "import", str(tmp_path / "x.jsonl"), str(tmp_path / "link.db")]) == 2
    err = capsys.readouterr().err
    assert "link.db: is a symbolic link to" in err and "which does not exist; give a new file name" in err
    assert ".converting" not in err
    (tmp_path / f"{log.name}-journal").write_bytes(os.urandom(1000))
    assert cli.main(["log", "show", str(log)]) == 2
    err = capsys.readouterr().err
    assert "beside it is a rollback journal" in err and "open the log once to finish it" in err, err


def test_a_refused_log_is_left_as_it_was(journal_bench, tmp_path):
    """A run that refuses a log (here: other models than the log's) writes nothing to it: no holder row,
    no reserve, not a byte."""
    import hashlib

    from pulse_jax import live

    log, _ = _finished_log(journal_bench, tmp_path)
    before = hashlib.sha256(log.read_bytes()).hexdigest()
    with pytest.raises(PulseInputError):
        live.Selector(["x", "y", "z"], 40, 120, method="ucbe", batch_size=4, log=log)
    assert hashlib.sha256(log.read_bytes()).hexdigest() == before
    assert not (tmp_path / f"{log.name}-journal").exists()


def test_an_export_never_replaces_a_log_database(journal_bench, tmp_path, capsys):
    from pulse_jax import cli

    log, _ = _finished_log(journal_bench, tmp_path)
    other = tmp_path / "other.db"
    other.write_bytes(log.read_bytes())
    before = other.read_bytes()
    assert cli.main(["log", "export", str(log), "--jsonl", str(other), "--force"]) == 2
    assert "is a pulse-jax log database (perhaps a running one); an export never replaces a log" in \
        capsys.readouterr().err
    assert other.read_bytes() == before


def test_a_backup_copied_over_a_running_log_is_refused_before_anything_is_written_on_it(tmp_path):
    from pulse_jax import live, stand_in

    models = stand_in.models()[:3]
    sel = live.Selector(models, 40, 120, method="ucbe", batch_size=4, log=tmp_path / "run.db", concurrency=1)

    def step():
        request = sel.ask()
        sel.tell(request, stand_in.score(request.model, list(request.example_ids)))

    for _ in range(4):
        step()
    backup = (tmp_path / "run.db").read_bytes()
    for _ in range(3):
        step()
    (tmp_path / "run.db").write_bytes(backup)       # in place, as cp does: the same file, older contents
    with pytest.raises(PulseInputError, match="the log was replaced while this run was writing it"):
        for _ in range(3):
            step()
    sel.close()
    assert (tmp_path / "run.db").read_bytes()[:100] == backup[:100]


@pytest.mark.integration   # two select processes, one killed: ~20 s
def test_a_run_killed_before_its_first_batch_is_told_is_resumed_with_its_line(tmp_path):
    """Killed while its first calls were out (nothing told yet), the rerun printed no resume line and
    re-paid those calls without a word: it now says it resumes and how many cells it asks again."""
    import signal

    args = write_slow_scorer(tmp_path) + ["--log", "run.db"]
    args[args.index("--quiet")] = "--concurrency"
    args.insert(args.index("--concurrency") + 1, "4")
    (tmp_path / "hang.py").write_text(
        "import pathlib, time\n"
        "def score(model, ids):\n"
        "    pathlib.Path('started').touch()\n"
        "    time.sleep(600)\n")
    hung = list(args)
    hung[hung.index("slowscore:score")] = "hang:score"
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    first = subprocess.Popen(hung, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and not (tmp_path / "started").exists():
        time.sleep(0.05)
    time.sleep(0.5)                       # the other calls of the first look go out too
    first.send_signal(signal.SIGKILL)
    first.wait(30)
    again = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    line = next((ln for ln in again.stdout.splitlines() if ln.startswith("resuming run.db")), None)
    assert line is not None, again.stdout
    assert "0 cells already evaluated" in line
    asked_again = int(line.split("; ")[2].split(" cells")[0].replace(",", ""))
    assert asked_again > 0, line
