"""The log vouches only for what it can: an empty or foreign file, a schema other than its own, a cut
tail or a cut export is refused in one line before a cell is paid; a moved folder is followed; outputs
touch only their own files."""
import hashlib
import json
import os
import sqlite3

import pytest

from conftest import run_sql
from pulse_jax import cli
from pulse_jax.errors import PulseInputError
from pulse_jax.fileio import files, provenance
from pulse_jax.live import LogWriteError, Selector, journal, run

B = 8


def _selector(journal_bench, log, **kw):
    b, V = journal_bench
    return Selector(b.models, 200, 6 * B + 8 * 10, batch_size=B, V=V, seed=5, refit_every=4, log=log,
                    method="pulse", stop="budget", **kw)


class _Oracle:
    def __init__(self, b, hook=None):
        self.b, self.hook, self.calls = b, hook, 0

    def __call__(self, model, ids):
        self.calls += 1
        if self.hook is not None:
            self.hook(self.calls)
        return self.b.scores[self.b.models.index(model), ids].tolist()


def _finished_log(journal_bench, folder, name="run.db"):
    log = folder / name
    sel = _selector(journal_bench, log)
    report = run(_Oracle(journal_bench[0]), sel, handle_signals=False)
    sel.close()
    return log, report


def _digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _refused(journal_bench, log, needle, untouched=True):
    """Opening ``log`` is refused in one line containing ``needle``; a file that is not a readable
    pulse-jax log is left byte for byte (a damaged log gets only its holder row written)."""
    before = _digest(log)
    with pytest.raises(PulseInputError) as err:
        _selector(journal_bench, log)
    assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)
    assert not untouched or _digest(log) == before
    return str(err.value)


def test_an_empty_file_is_not_a_new_log(journal_bench, tmp_path):
    """A log emptied by mistake is refused (it would start the whole run again, paying every cell anew);
    `log show` says the same; a new name still starts a run."""
    log = tmp_path / "run.db"
    log.write_bytes(b"")
    message = _refused(journal_bench, log, "is an empty file (0 bytes), not a pulse-jax log")
    assert "restore it from a copy" in message and log.stat().st_size == 0
    with pytest.raises(PulseInputError, match="an empty file"):
        journal.snapshot(log)
    _finished_log(journal_bench, tmp_path, "new.db")
    assert not list(tmp_path.glob(".new.db.*"))                # the temporary file is gone


@pytest.mark.parametrize("cut", [1, 3])
def test_rows_cut_off_the_end_are_refused(journal_bench, tmp_path, cut):
    """The last told rows deleted: the chain of what is left verifies, the tally does not."""
    log, _ = _finished_log(journal_bench, tmp_path)
    run_sql(log, f"DELETE FROM told WHERE seq > (SELECT max(seq) FROM told) - {cut}")
    _refused(journal_bench, log, "but holds", untouched=False)
    with pytest.raises(PulseInputError, match="rows were deleted or added at its end"):
        journal.snapshot(log)


def test_a_deleted_paid_row_is_refused(journal_bench, tmp_path):
    b, _ = journal_bench
    log = tmp_path / "run.db"
    sel = _selector(journal_bench, log)
    requests = [sel.ask() for _ in range(3)]
    for r in requests:
        sel.log_paid(r, b.scores[r.model_index, list(r.example_index)])
    sel.close()
    run_sql(log, "DELETE FROM paid WHERE ticket = (SELECT max(ticket) FROM paid)")
    _refused(journal_bench, log, "the log committed 3 paid batch(es) but holds 2", untouched=False)


@pytest.mark.parametrize("statement, needle", [
    ("CREATE TRIGGER t AFTER INSERT ON told BEGIN DELETE FROM told WHERE seq = new.seq; END",
     "holds a trigger ('t')"),
    ("CREATE VIEW v AS SELECT * FROM told", "holds a view ('v')"),
    ("CREATE TABLE extra(x)", "holds a table ('extra')"),
    ("DROP TABLE paid", "its table 'paid' is missing"),
    ("DROP TABLE reserve", "its table 'reserve' is missing"),
    ("CREATE INDEX i ON told(model)", "holds a index ('i')"),
])
def test_a_schema_other_than_the_logs_is_refused(journal_bench, tmp_path, statement, needle):
    """A trigger would run on every commit (one that deletes each new row left a correct-looking report
    and an empty log); views, extra, dropped or changed tables are not the log either."""
    log, _ = _finished_log(journal_bench, tmp_path)
    run_sql(log, statement)
    _refused(journal_bench, log, needle)
    with pytest.raises(PulseInputError, match="a log is only what pulse-jax wrote"):
        journal.snapshot(log)


def test_a_foreign_wal_database_is_left_exactly_as_it_was(journal_bench, tmp_path):
    log = tmp_path / "other.db"
    run_sql(log, "PRAGMA journal_mode = WAL", "CREATE TABLE t(x)", "INSERT INTO t VALUES (1)")
    _refused(journal_bench, log, "an SQLite database but not a pulse-jax log")
    conn = sqlite3.connect(log)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_a_journal_symlink_is_refused(journal_bench, tmp_path):
    log, _ = _finished_log(journal_bench, tmp_path)
    target = tmp_path / "elsewhere"
    target.write_text("keep me")
    os.symlink(target, tmp_path / "run.db-journal")
    _refused(journal_bench, log, "its rollback journal run.db-journal is a symbolic link")
    assert target.read_text() == "keep me"


@pytest.mark.parametrize("fraction", [0.05, 0.3, 0.6, 0.9])
def test_a_truncated_log_is_refused_in_one_line(journal_bench, tmp_path, fraction):
    log, _ = _finished_log(journal_bench, tmp_path)
    size = log.stat().st_size
    with open(log, "r+b") as handle:
        handle.truncate(int(size * fraction))
    with pytest.raises(PulseInputError) as err:
        _selector(journal_bench, log)
    assert "\n" not in str(err.value)
    with pytest.raises(PulseInputError):
        journal.snapshot(log)


def test_an_export_cut_at_a_line_break_is_refused(journal_bench, tmp_path, capsys):
    """A JSONL export ends with a line that counts its batches: cut at a line break it is refused, by
    `log import` and as --log; whole, it converts and resumes."""
    log, _ = _finished_log(journal_bench, tmp_path)
    assert cli.main(["log", "export", str(log), "--jsonl", str(tmp_path / "x.jsonl")]) == 0
    lines = (tmp_path / "x.jsonl").read_text().splitlines(keepends=True)
    assert json.loads(lines[-1])["type"] == "end" and json.loads(lines[0])["rows"] == len(lines) - 2
    (tmp_path / "cut.jsonl").write_text("".join(lines[:-3]))
    capsys.readouterr()
    assert cli.main(["log", "import", str(tmp_path / "cut.jsonl"), str(tmp_path / "cut.db")]) == 2
    err = capsys.readouterr().err
    assert "the file was cut short" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(PulseInputError, match="the file was cut short"):
        _selector(journal_bench, tmp_path / "cut.jsonl")
    assert cli.main(["log", "import", str(tmp_path / "x.jsonl"), str(tmp_path / "whole.db")]) == 0
    again = _selector(journal_bench, tmp_path / "whole.db")
    assert again.spent == again.config.budget
    again.close()


def test_log_show_says_what_the_checksums_are(journal_bench, tmp_path, capsys):
    log, _ = _finished_log(journal_bench, tmp_path)
    assert cli.main(["log", "show", str(log)]) == 0
    out = capsys.readouterr().out
    assert "not signatures" in out and "verified" not in out
    v1 = tmp_path / "v1.jsonl"
    v1.write_text(json.dumps({"type": "header", "method": "ucbe", "models": ["a", "b"], "seed": 0, "examples": [0, 1],
                              "budget": 4, "batch_size": 1}) + "\n")
    assert cli.main(["log", "show", str(v1)]) == 0
    out = capsys.readouterr().out
    assert "no checksums, so nothing in it could be verified" in out


def test_a_moved_folder_is_followed_and_a_deleted_log_stops_with_the_reason(journal_bench, tmp_path, capsys):
    b, _ = journal_bench
    first, moved = tmp_path / "a", tmp_path / "b"
    first.mkdir()

    def rename(k):
        if k == 9:
            os.rename(first, moved)

    sel = _selector(journal_bench, first / "run.db")
    from pulse_jax.errors import PulseNote

    with pytest.warns(PulseNote, match="the log's folder was moved"):    # one note line from the CLI
        report = run(_Oracle(b, rename), sel, handle_signals=False)
    sel.close()
    assert report.spent == report.budget
    assert sum(len(r["examples"]) for r in journal.snapshot(moved / "run.db")[1]) == report.budget

    log = tmp_path / "gone.db"

    def delete(k):
        if k == 9:
            log.unlink()

    sel = _selector(journal_bench, log)
    with pytest.raises(LogWriteError) as err:
        run(_Oracle(b, delete), sel, handle_signals=False)
    sel.close()
    assert "the log file was deleted while this run was writing it" in str(err.value)
    assert "Free space" not in str(err.value) and "\n" not in str(err.value)


def test_force_removes_only_the_files_pulse_jax_wrote_and_only_after_every_check(tmp_path, capsys):
    """A results folder with the user's own ``mydata.npz``: a command that fails a check removes nothing;
    the writer removes exactly what the folder's provenance lists."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "mydata.npz").write_bytes(b"user's")
    (out / "notes.json").write_text("{}")
    assert cli.main(["demo", "--out", str(out), "--force", "--budget", "-5"]) == 2
    assert sorted(p.name for p in out.iterdir()) == ["mydata.npz", "notes.json"]
    provenance.write(out, {"method": ["ucbe"]}, files=["ucbe.npz", "summary.json"])
    (out / "ucbe.npz").write_bytes(b"old result")
    (out / "summary.json").write_text("{}")
    assert sorted(files.remove_previous_outputs(out)) == ["provenance.json", "summary.json", "ucbe.npz"]
    assert sorted(p.name for p in out.iterdir()) == ["mydata.npz", "notes.json"]
    # A provenance that names paths outside its folder removes nothing there.
    (tmp_path / "outside.txt").write_text("keep")
    (out / "provenance.json").write_text(json.dumps({"files": ["../outside.txt", "/etc/passwd", "sub/x"]}))
    assert files.remove_previous_outputs(out) == []
    assert (tmp_path / "outside.txt").read_text() == "keep"
    # Another tool's provenance.json (no ``files`` list, not pulse-jax's): the user's files stay.
    (out / "summary.json").write_text("{}")
    (out / "provenance.json").write_text(json.dumps({"method": "mydata", "tool": "other"}))
    assert files.remove_previous_outputs(out) == []
    assert sorted(p.name for p in out.iterdir()) == ["mydata.npz", "notes.json", "provenance.json", "summary.json"]
    # An earlier pulse-jax's provenance without the list: the fixed names it implies, as before.
    (out / "provenance.json").write_text(json.dumps({"method": ["ucbe"], "versions": {"pulse-jax": "0.2.0"}}))
    assert sorted(files.remove_previous_outputs(out)) == ["provenance.json", "summary.json"]


def test_outputs_replace_a_planted_symlink_instead_of_following_it(tmp_path, capsys):
    target = tmp_path / "victim.txt"
    target.write_text("precious")
    link = tmp_path / "report.md"
    os.symlink(target, link)
    files.write_atomically(link, "report")
    assert target.read_text() == "precious" and not link.is_symlink() and link.read_text() == "report"
    # A dangling symlink counts as existing for every "exists; pass --force" check.
    dangling = tmp_path / "dangling.json"
    os.symlink(tmp_path / "nowhere" / "x", dangling)
    assert cli.main(["tune", "--train", "missing.csv", "--out", str(dangling)]) == 2
    assert "exists; pass --force" in capsys.readouterr().err
    assert cli.main(["log", "export", "missing.db", "--jsonl", str(dangling)]) == 2
    assert "exists; pass --force" in capsys.readouterr().err
    assert not (tmp_path / "nowhere").exists()
