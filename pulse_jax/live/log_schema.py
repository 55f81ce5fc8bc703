"""The log database's format: its tables and marks, the checks that a file is a pulse-jax log of this
version, creating a new log whole, building one from a converted JSONL log, and the header
comparison that refuses a resume with another configuration (`pulse_jax.live.journal` reads and
writes the log itself)."""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import tempfile
from pathlib import Path

import numpy as np

from pulse_jax import registry
from pulse_jax.errors import PulseInputError, note, require
from pulse_jax.fileio import files
from pulse_jax.live.chain import canonical, checksum

#: The database format this pulse-jax writes (JSONL logs, versions 1-3, are converted).
LOG_VERSION = 5
#: The database formats it reads. In format 5 the tally (`TALLY`) is part of the format, so a log
#: without it was edited; a format-4 log may predate the tally: it gets one, and becomes format 5,
#: when it is opened to be written.
READ_VERSIONS = (4, 5)
TALLY_VERSION = 5
#: ``PRAGMA application_id`` of a pulse-jax log ("PJLG").
APPLICATION_ID = 0x504A4C47
#: Space kept in the database for saving paid batches when the disk is full (about 400 batches of 64).
RESERVE_BYTES = 512 * 1024
MAGIC = b"SQLite format 3\x00"

#: Header fields added after version 1 and the value an older log implies.
HEADER_DEFAULTS = {"rule": "ucbe", "cs_horizon": 0.0, "cs_simultaneous": 1.0, "refit_prior": 0.0, "cs_grid": 0,
                   "cs_upper_share": 0.5, "gap_horizon": 0.0, "carry_refit_state": False,
                   "example_order": "drawn"}
#: Logs older than this version lack some header fields (every traced parameter, the plug-ins'
#: settings); those fields are not compared when absent. From this version on every field must match.
COMPLETE_HEADER_VERSION = 3
#: The header field a resumed run may raise (`pulse_jax.live.Selector`; a lower one is refused here).
EXTENDABLE_FIELD = "budget"
#: Header fields that may differ between versions of the format itself.
VERSION_FIELDS = ("version", "jsonl_version")
_SCHEMA = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE run(id INTEGER PRIMARY KEY CHECK (id = 1), config TEXT NOT NULL, crc TEXT NOT NULL);
CREATE TABLE told(seq INTEGER PRIMARY KEY, ticket INTEGER NOT NULL UNIQUE, step INTEGER NOT NULL,
                  asks_issued INTEGER NOT NULL, model TEXT NOT NULL, examples TEXT NOT NULL, scores TEXT NOT NULL,
                  crc TEXT NOT NULL);
CREATE TABLE paid(ticket INTEGER PRIMARY KEY, step INTEGER NOT NULL, asks_issued INTEGER NOT NULL,
                  model TEXT NOT NULL, examples TEXT NOT NULL, scores TEXT NOT NULL, crc TEXT NOT NULL);
CREATE TABLE holder(id INTEGER PRIMARY KEY CHECK (id = 1), pid INTEGER, host TEXT, since TEXT);
CREATE TABLE reserve(space BLOB);
"""
FIELDS = ("ticket", "step", "asks_issued", "model", "examples", "scores")
#: The ``meta`` rows that tally what the log committed: told rows, the last told row's checksum, paid rows.
#: Each commit updates them in its own transaction, so rows cut off the end of ``told`` (or a paid row
#: deleted) no longer match the tally and the log is refused.
TALLY = ("told_rows", "told_tail", "paid_rows")



def create_tables(conn) -> None:
    """The log's tables, format marks and an empty tally (run in autocommit: a fresh file only)."""
    conn.executescript(f"{_SCHEMA} PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {LOG_VERSION}; "
                       f"INSERT INTO meta VALUES ('format', 'pulse-jax log'), ('version', '{LOG_VERSION}'), "
                       "('told_rows', '0'), ('told_tail', ''), ('paid_rows', '0');")


def schema_rows(conn) -> set:
    return set(conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall())


def _expected_schema() -> set:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        create_tables(conn)
        return schema_rows(conn)
    finally:
        conn.close()


_EXPECTED_SCHEMA = _expected_schema()


def cannot_read(path, err) -> PulseInputError:
    """The one-line error of a log read that failed: a log deleted (or moved) under a running run says so."""
    from pathlib import Path

    if not Path(path).exists():
        return PulseInputError(f"{path}: the log file was deleted (or moved) while the run was going on ({err}); put "
                               "it back where it was (or give --log its new path), then run the same command again")
    if "readonly" in str(err) and Path(f"{path}-journal").exists():   # reading it would mean rolling it back
        return PulseInputError(f"{path}: beside it is a rollback journal ({Path(path).name}-journal) of a commit that "
                               "did not finish, which a reader cannot apply; open the log once to finish it (run "
                               "the same select command again), then read it")
    return PulseInputError(f"{path}: the log database cannot be read ({err})")


def check_schema(path, conn) -> None:
    """Refuse, in one line, a log whose tables are not exactly its format's: a trigger or a view (they
    would run or answer in place of the log's own rows), a table added or dropped, a table changed."""
    try:
        have = schema_rows(conn)
    except sqlite3.DatabaseError as err:
        raise cannot_read(path, err) from None
    if have == _EXPECTED_SCHEMA:
        return
    extra = sorted(have - _EXPECTED_SCHEMA, key=lambda r: (r[0], r[1]))
    missing = sorted(_EXPECTED_SCHEMA - have, key=lambda r: (r[0], r[1]))
    names = {r[1] for r in _EXPECTED_SCHEMA}
    if extra and extra[0][0] in ("trigger", "view"):
        what = f"it holds a {extra[0][0]} ({extra[0][1]!r}) that is not part of a pulse-jax log"
    elif extra and extra[0][1] in names:
        what = f"its {extra[0][0]} {extra[0][1]!r} was changed"
    elif extra:
        what = f"it holds a {extra[0][0]} ({extra[0][1]!r}) that is not part of a pulse-jax log"
    else:
        what = f"its {missing[0][0]} {missing[0][1]!r} is missing"
    raise PulseInputError(f"{path}: {what}; a log is only what pulse-jax wrote (was the database edited?). Restore it "
                          "from a copy, or give --log a new file name")


def read_file_header(path) -> tuple[bytes, int | None, int | None]:
    """``(first 16 bytes, application_id, user_version)`` of a file, read as bytes (SQLite's header keeps
    both numbers at fixed offsets), so a foreign database is recognized without opening it in SQLite."""
    with open(path, "rb") as handle:
        head = handle.read(100)
    if len(head) < 72 or head[:16] != MAGIC:
        return head[:16], None, None
    return head[:16], int.from_bytes(head[68:72], "big"), int.from_bytes(head[60:64], "big")


def fingerprint(array) -> str:
    """A short hash of an array's float32 bytes (to check side information on resume)."""
    return hashlib.sha256(np.ascontiguousarray(np.asarray(array, np.float32)).tobytes()).hexdigest()[:16]


def check_header(path: Path, logged: dict, expected: dict) -> None:
    """A one-line error naming the first field where the log's header differs from this run's."""
    origin = logged.get("jsonl_version", logged.get("version"))
    old = isinstance(origin, int) and origin < COMPLETE_HEADER_VERSION
    for key, value in expected.items():
        if key in VERSION_FIELDS or (old and key not in logged and key not in HEADER_DEFAULTS):
            continue
        if key == "concurrency" and key not in logged:   # a log from before it was recorded: any concurrency
            continue
        have = logged.get(key, HEADER_DEFAULTS.get(key))
        if key == EXTENDABLE_FIELD and isinstance(have, int) and isinstance(value, int) and value < have:
            raise PulseInputError(f"--budget {value:,} is smaller than the {have:,} {path} was started with; give "
                                  f"--budget {have:,} or more to continue it (a larger budget extends the run)")
        if have != value:
            raise PulseInputError(f"{path} was written by a different configuration: {_difference(key, have, value)}")


def _plugin_numbers(numbers: dict) -> dict:
    """The estimator's and the rule's own numbers as header fields ``estimator.x``, ``rule.y`` (the
    stopping rule's are left out: a resumed run may stop by another rule)."""
    return {f"{part}.{name}": value for part in ("estimator", "rule") for name, value in numbers[part].items()}


def run_header(config, params, plugins, seed: int, names: tuple, V, *, order_given: bool) -> dict:
    """Everything that decides a selection's requests (``names``: its models and example ids): a resume
    with any difference is refused, naming it (`check_header`)."""
    c, (models, examples), estimator, rule = config, names, plugins.estimator, plugins.rule
    return {"type": "header", "version": LOG_VERSION, "method": estimator.name,
            "method_settings": registry.describe(estimator)["settings"], "seed": seed,
            "models": list(models), "examples": list(examples), "budget": c.budget,
            "batch_size": c.batch_size, "init_batches": c.init_batches, "refit_every": c.refit_every,
            "init_refit_epochs": c.init_refit_epochs, "refit_epochs": c.refit_epochs,
            "carry_refit_state": c.carry_refit_state, "interval": c.interval,
            "cs_grid": c.cs_grid, "gap_horizon": c.gap_horizon,
            "rule": rule.name, "rule_settings": registry.describe(rule)["settings"],
            # The engine's numbers and the estimator's and rule's own (the stopping rule may change on resume).
            **params.engine.to_dict(), **_plugin_numbers(params.to_dict()),
            "side_information": fingerprint(V) if estimator.uses_predictions else None,
            "example_order": "given" if order_given else "drawn", "concurrency": c.concurrency}


def grown_budget(path: Path, logged: dict, header: dict, rule) -> dict:
    """A log continues with a larger budget: the requests of a rule that does not plan on the budget
    (``SamplingRule.plans_on_budget``; successive halving does) do not depend on it until it runs out
    (tested: a run extended from B to B' asks what a run started with B' asks), so the logged budget
    is read as this run's. A rule that plans on it without saying so is still caught: the replay
    refuses a logged request that differs from what the selector asks."""
    have, want = logged.get("budget"), header["budget"]
    if not (isinstance(have, int) and not isinstance(have, bool) and have < want):
        return logged
    require(not rule.plans_on_budget,
            f"--budget {want:,}: {path} was started with --budget {have:,}, and the sampling rule "
            f"{rule.name!r} plans on the budget, so the log continues only with --budget {have:,}")
    note(f"{path} was started with a budget of {have:,} cells; it continues with {want:,}")
    return {**logged, "budget": want}


#: Levels a live selection chooses by the claim (`pulse_jax.choices.claim_split`, `gap_horizon`): how to
#: give a log's own value.
_LEVELS = {"gap_horizon": "--gap-horizon {0} (gap_horizon={0})", "cs_upper_share": "--param cs_upper_share={0} "
           "(params={{'cs_upper_share': {0}}})"}


def _difference(key: str, have, value) -> str:
    """What differs in one header field, in words (lists: their first differing entry, or their order)."""
    if key in _LEVELS:        # chosen by the claim unless given: say how to give the log's
        return (f"{key} is {have!r} in the log, {value!r} here; give {_LEVELS[key].format(have)} to continue the "
                "log with the levels it was started with")
    if not (isinstance(have, list) and isinstance(value, list)):
        return f"{key} is {have!r} in the log, {value!r} here"
    if len(have) != len(value):
        return f"{key} has {len(have)} entries in the log, {len(value)} here"
    if sorted(map(str, have)) == sorted(map(str, value)):
        k = next(i for i, (a, b) in enumerate(zip(have, value)) if a != b)
        return (f"{key} are the same {len(have)} entries in another order (entry {k + 1} is {have[k]!r} in the "
                f"log, {value[k]!r} here); give them in the log's order")
    k = next(i for i, (a, b) in enumerate(zip(have, value)) if a != b)
    return f"{key}: entry {k + 1} is {have[k]!r} in the log, {value[k]!r} here"


def tally_sql(tail: str):
    """The statement that brings the tally up to date inside a commit (``tail``: the last told checksum)."""
    return ("UPDATE meta SET value = CASE key WHEN 'told_rows' THEN (SELECT count(*) FROM told) "
            "WHEN 'paid_rows' THEN (SELECT count(*) FROM paid) ELSE ? END WHERE key IN ('told_rows', 'paid_rows', "
            "'told_tail')", (tail,))



def connect(path: Path):
    """A connection to the log database at ``path``: autocommit, ``synchronous=FULL``."""
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=5)
    try:
        conn.execute("PRAGMA synchronous = FULL")
    except sqlite3.Error:
        conn.close()
        raise
    return conn


def create_log_file(path: Path) -> None:
    """Create a new, empty log at ``path`` whole: built under a temporary name and linked into place, so
    that no process ever sees a log without its tables (an empty file is refused as not a log). Another
    process creating the same log at the same instant wins or loses the link; both then open that one."""
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".new", dir=path.parent)
    except OSError as err:
        raise PulseInputError(f"--log {path}: cannot create the log: {err.strerror}") from None
    os.fchmod(fd, files.new_file_mode())
    os.close(fd)
    try:
        conn = sqlite3.connect(temporary, isolation_level=None)
        try:
            create_tables(conn)     # a temporary file: nobody sees it before it is whole
        finally:
            conn.close()
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass
        except OSError:         # a file system without hard links: create the name exclusively, copy the bytes
            try:
                target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                return
            with open(target, "wb") as out, open(temporary, "rb") as source:
                out.write(source.read())
                out.flush()
                os.fsync(out.fileno())
        fsync_folder(path.parent)
    except sqlite3.Error as err:
        raise PulseInputError(f"--log {path}: cannot create the log ({err})") from None
    except OSError as err:
        raise PulseInputError(f"--log {path}: cannot create the log: {err.strerror or err}") from None
    finally:
        Path(temporary).unlink(missing_ok=True)


def build_database(path: Path, header: dict, records: list) -> str:
    """A new log database beside ``path`` (a temporary name, returned) holding a JSONL log's verified
    ``header`` and ``records``; the caller renames it into place."""
    version = header.get("version", 1)
    told = {r["ticket"] for _, r in records if r.get("type") == "tell" and isinstance(r.get("ticket"), int)}
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".converting", dir=path.parent)
    os.fchmod(fd, files.new_file_mode())
    os.close(fd)
    try:
        conn = connect(Path(temporary))
        create_tables(conn)
        conn.execute("BEGIN")
        body = {**header, "version": LOG_VERSION, "jsonl_version": version}
        previous = run_crc = checksum(body, "")
        conn.execute("INSERT INTO run VALUES (1, ?, ?)", (canonical(body), run_crc))
        for _, record in records:
            fields = [record.get(f) for f in FIELDS]
            row = fields[:4] + [json.dumps(fields[4]), json.dumps(fields[5])]
            if record.get("type") == "tell":
                previous = checksum(record, previous)
                conn.execute("INSERT INTO told(ticket, step, asks_issued, model, examples, scores, crc) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?)", (*row, previous))
            elif record.get("ticket") not in told:
                conn.execute("INSERT OR REPLACE INTO paid VALUES (?, ?, ?, ?, ?, ?, ?)",
                             (*row, checksum(record, run_crc)))
        conn.execute(*tally_sql("" if previous == run_crc else previous))
        conn.execute("COMMIT")
        conn.close()
    except (sqlite3.Error, TypeError, ValueError, OverflowError) as err:
        os.unlink(temporary)
        raise PulseInputError(f"{path}: cannot convert the JSONL log to a database ({err}); it is left as it "
                              "is") from None
    return temporary


def fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


#: A told or paid batch's fields and their types.
RECORD_FIELDS = (("ticket", int), ("step", int), ("asks_issued", int), ("model", str), ("examples", list),
                 ("scores", list))


def check_record_fields(where: str, record: dict) -> None:
    """A told or paid batch has every field, each of its type, and one score per example; anything else
    is one line naming the place (``where``: the log and its row or line)."""
    for field, kind in RECORD_FIELDS:
        value = record.get(field)
        require(isinstance(value, kind) and not isinstance(value, bool),
                f"{where}: field {field!r} is missing or not a{'n' if kind is int else ''} {kind.__name__} "
                "(was the log edited?)")
    require(len(record["scores"]) == len(record["examples"]),
            f"{where}: {len(record['scores'])} scores for {len(record['examples'])} examples (was the log edited?)")
    told = record.get("type") == "tell"          # a paid batch may lack scores still in flight (None)
    for value in record["scores"]:
        number = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1
        require(number or (value is None and not told),
                f"{where}: score {value!r} is not a number in [0, 1] (was the log edited?)")


def _row(record: dict) -> tuple:
    """A told or paid record as its table's columns before the checksum."""
    return (record["ticket"], record["step"], record["asks_issued"], record["model"], json.dumps(record["examples"]),
            json.dumps(record["scores"]))


def copy_database(path: Path, header: dict, run_crc: str, told, paid) -> None:
    """A new log at ``path`` holding ``header`` and the ``told`` and ``paid`` records with the checksums
    they have in the log they come from (the chain goes on in the copy as it would have there), built
    under a temporary name and linked into place."""
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".new", dir=path.parent)
    os.fchmod(fd, files.new_file_mode())
    os.close(fd)
    conn = connect(Path(temporary))
    try:
        create_tables(conn)
        conn.execute("BEGIN")
        conn.execute("INSERT INTO run VALUES (1, ?, ?)", (canonical(header), run_crc))
        previous = ""
        for record in told:
            previous = checksum(record, previous or run_crc)
            conn.execute("INSERT INTO told(ticket, step, asks_issued, model, examples, scores, crc) VALUES "
                         "(?, ?, ?, ?, ?, ?, ?)", (*_row(record), previous))
        for record in paid:
            conn.execute("INSERT INTO paid VALUES (?, ?, ?, ?, ?, ?, ?)", (*_row(record), checksum(record, run_crc)))
        conn.execute(*tally_sql(previous))
        conn.execute("COMMIT")
    finally:
        conn.close()
    os.link(temporary, path)
    os.unlink(temporary)
    fsync_folder(path.parent)
