"""The durable log of a live selection: an SQLite database with one writer and one transaction per batch.

Tables (format version 4; ``PRAGMA application_id`` marks the file as a pulse-jax log):

* ``meta``: the format's name and version;
* ``run``: one row, the run's configuration (everything that decides its
  requests, every traced parameter) as canonical JSON, with its checksum;
* ``told``: one row per told batch, in the order told (``ticket``, ``step``,
  ``asks_issued``, ``model``, ``examples``, ``scores``, ``crc``);
* ``paid``: batches paid for but not yet told (scores that arrived after the
  run was stopped); the transaction that tells a batch deletes its row, so a
  resumed run tells it where an uninterrupted run would have, without paying
  for it again;
* ``holder``: the process that has the log open, for a second run's message;
* ``reserve``: `RESERVE_BYTES` kept free for a full disk (below).

Checksums (`pulse_jax.live.chain`): the ``run`` row's ``crc`` starts
the chain, each told row chains onto the one before it, each paid row onto
the ``run`` row. A database whose chain, format or version does not verify
is refused, naming the first row that does not fit.

Durability: every batch is one transaction, committed with
``synchronous=FULL`` *before* it changes the selector; a crash loses at most
the batch being committed, which SQLite rolls back when the log is next
opened (the batch is asked again: it was never used).

One writer: the process holds an exclusive ``flock`` on the database file
itself for as long as the log is open. The lock belongs to the file, not to
the name, so a second run through a symlink, a hard link, a rename or
another mount path meets it and is refused in one line naming the holder.
A database with a second hard link is refused outright: SQLite keeps its
rollback journal beside the name in use, and a crash under one name would
leave the journal where the other name cannot see it.

A full disk: a failed commit is rolled back by SQLite and nothing of it is
used. The caller retries; then `Journal.release_reserve` frees the
reserve, whose pages the next commits reuse without growing any file (the
rollback journal is kept, in ``PERSIST`` mode, at the size the reserve gave
it), so the batches already paid for are saved and the run stops cleanly.

JSONL logs of earlier versions (`pulse_jax.live.legacy_jsonl`) are
verified and converted in place once; the original is kept beside it.
"""
from __future__ import annotations

import datetime
import errno
import hashlib
import json
import os
import socket
import sqlite3
import stat
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import numpy as np

from pulse_jax.errors import PulseInputError, require
from pulse_jax.live import legacy_jsonl
from pulse_jax.live.chain import canonical, checksum

try:   # POSIX; elsewhere the log is not locked (said in the README)
    import fcntl
except ImportError:   # pragma: no cover -- Windows
    fcntl = None

#: The database format this pulse-jax writes and reads (JSONL logs, versions 1-3, are converted).
LOG_VERSION = 4
#: ``PRAGMA application_id`` of a pulse-jax log ("PJLG").
APPLICATION_ID = 0x504A4C47
#: Space kept in the database for saving paid batches when the disk is full (about 400 batches of 64).
RESERVE_BYTES = 512 * 1024
_MAGIC = b"SQLite format 3\x00"

#: Header fields added after version 1 and the value an older log implies.
HEADER_DEFAULTS = {"rule": "ucbe", "cs_horizon": 0.0, "cs_simultaneous": 1.0, "refit_prior": 0.0, "cs_grid": 0}
#: Logs older than this version lack some header fields (every traced parameter, the plug-ins'
#: settings); those fields are not compared when absent. From this version on every field must match.
COMPLETE_HEADER_VERSION = 3
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
_FIELDS = ("ticket", "step", "asks_issued", "model", "examples", "scores")


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
        have = logged.get(key, HEADER_DEFAULTS.get(key))
        if have != value:
            raise PulseInputError(f"{path} was written by a different configuration: {_difference(key, have, value)}")


def _difference(key: str, have, value) -> str:
    """What differs in one header field, in words (lists: their first differing entry, or their order)."""
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


class LogFull(OSError):
    """A commit failed (a full disk, an I/O error); SQLite rolled it back, so nothing of it was saved."""


_HELD: dict = {}   # (device, inode) -> the Journal of this process that holds that database


def _where_kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK,
                       "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


class LogReader:
    """The records of an open log database, verified as they are read (`Journal` writes them)."""

    def __init__(self, path, conn):
        self.path, self._conn = Path(path), conn
        self._previous = self._run_crc = ""

    def has_run(self) -> bool:
        """Whether the log holds a run (its configuration row), i.e. a resume."""
        return self._conn.execute("SELECT count(*) FROM run").fetchone()[0] > 0

    def open(self) -> tuple[dict | None, Iterator[tuple[str, dict]]]:
        """``(header, records)`` of the log (``(None, empty)`` for a new one).

        ``records`` yields ``(where, record)``: the told batches in the order
        told, then the paid ones, each checked against the checksum chain;
        ``where`` names the row for messages.
        """
        try:
            row = self._conn.execute("SELECT config, crc FROM run WHERE id = 1").fetchone()
        except sqlite3.DatabaseError as err:
            raise PulseInputError(f"{self.path}: the log database cannot be read ({err})") from None
        if row is None:
            return None, iter(())
        header = self._decode(row[0], f"{self.path}: the run's configuration")
        require(isinstance(header, dict) and header.get("type") == "header",
                f"{self.path}: the run's configuration is not a pulse-jax log header (was the log edited?)")
        require(row[1] == checksum(header, ""), f"{self.path}: the run's configuration fails its checksum (was the "
                                                "log edited?)")
        require(header.get("version") == LOG_VERSION, f"{self.path}: the run's configuration says format version "
                                                      f"{header.get('version')!r}, not {LOG_VERSION} (was it edited?)")
        self._previous = self._run_crc = row[1]
        return header, self._records()

    def _records(self):
        told = set()
        for seq, *fields, crc in self._conn.execute(
                "SELECT seq, ticket, step, asks_issued, model, examples, scores, crc FROM told ORDER BY seq"):
            where = f"{self.path}: told batch {seq}"
            record = self._record("tell", fields, where)
            if crc != checksum(record, self._previous):
                raise PulseInputError(f"{where} fails its checksum: the batch was changed, or one before it was "
                                      "deleted, duplicated or moved")
            self._previous = crc
            told.add(record.get("ticket"))
            yield where, record
        for *fields, crc in self._conn.execute(
                "SELECT ticket, step, asks_issued, model, examples, scores, crc FROM paid ORDER BY ticket").fetchall():
            where = f"{self.path}: paid batch (ticket {fields[0]})"
            record = self._record("paid", fields, where)
            require(crc == checksum(record, self._run_crc), f"{where} fails its checksum (was the log edited?)")
            require(record["ticket"] not in told, f"{where} was told already (was the log edited?)")
            yield where, record

    def _record(self, kind: str, fields, where: str) -> dict:
        record = {"type": kind, **dict(zip(_FIELDS[:4], fields[:4]))}
        record["examples"] = self._decode(fields[4], f"{where}: its examples")
        record["scores"] = self._decode(fields[5], f"{where}: its scores")
        return record

    @staticmethod
    def _decode(text, what: str):
        try:
            return json.loads(text)
        except (TypeError, ValueError, RecursionError):
            raise PulseInputError(f"{what} are not valid JSON (was the log edited?)") from None

    def export_jsonl(self, out) -> int:
        """Write the log to the text stream ``out`` as a version-3 JSONL log; returns the number of batches."""
        header, records = self.open()
        require(header is not None, f"{self.path}: the log has no run yet")
        records = [r for _, r in records]
        out.write(as_jsonl(header, records))
        return len(records)


class Journal(LogReader):
    """An open, exclusively held log database (see the module docstring)."""

    def __init__(self, path):
        super().__init__(path, None)
        self._lock_fd = None
        self._check_path()
        self._acquire()
        try:
            self._connect()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ open

    def _check_path(self) -> None:
        p = self.path
        require(not p.is_dir(), f"--log {p}: is a directory; give a file name")
        if p.is_symlink() and not p.exists():
            raise PulseInputError(f"--log {p}: is a symbolic link to a missing file ({os.readlink(p)}); give the "
                                  "log's own path or a new file name")
        if p.exists():
            mode = p.stat().st_mode
            require(stat.S_ISREG(mode), f"--log {p}: is {_where_kind(mode)}, not a file; give a file name for the log")
        p.parent.mkdir(parents=True, exist_ok=True)

    def _acquire(self) -> None:
        """Open the file for its lock (creating an empty one) and take the lock, or refuse naming the holder."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as err:
            raise PulseInputError(f"--log {self.path}: cannot open the log: {err.strerror}") from None
        info = os.fstat(fd)
        key = (info.st_dev, info.st_ino)
        older = _HELD.get(key)
        if older is not None:        # same process: an abandoned selector's log is taken over
            older.close()
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise PulseInputError(f"{self.path} is in use by {self._holder()}; wait for it to finish (or stop "
                                      "it) before running on the same log") from None
        if info.st_nlink > 1:
            os.close(fd)
            raise PulseInputError(f"{self.path}: the log has {info.st_nlink} names (hard links); SQLite keeps its "
                                  "journal beside the name in use, so a log must have one name: remove the other links")
        self._lock_fd, self._key = fd, key
        _HELD[key] = self

    def _holder(self) -> str:
        """'process PID on HOST (since ...)' as the holder wrote it, read without disturbing it."""
        try:
            conn = sqlite3.connect(f"file:{self.path.resolve()}?mode=ro", uri=True, timeout=2)
            try:
                row = conn.execute("SELECT pid, host, since FROM holder WHERE id = 1").fetchone()
            finally:
                conn.close()
        except sqlite3.Error:
            row = None
        return f"process {row[0]} on {row[1]} (since {row[2]})" if row else "another process"

    def _connect(self) -> None:
        size = os.fstat(self._lock_fd).st_size
        if size:
            with open(self._lock_fd, "rb", closefd=False) as handle:
                handle.seek(0)
                head = handle.read(len(_MAGIC))
            if head != _MAGIC:
                if not legacy_jsonl.looks_like_log(self.path):
                    raise PulseInputError(f"--log {self.path}: exists and is not a pulse-jax log (neither its database "
                                          "nor a JSONL log); it is left untouched: give --log a new file name")
                self._convert()
        self._conn = self._sqlite(self.path)
        conn = self._conn
        try:
            if not size:
                conn.executescript(f"BEGIN IMMEDIATE; {_SCHEMA} PRAGMA application_id = {APPLICATION_ID}; "
                                   f"PRAGMA user_version = {LOG_VERSION}; "
                                   f"INSERT INTO meta VALUES ('format', 'pulse-jax log'), ('version', '{LOG_VERSION}'); "
                                   "COMMIT;")
            self._check_format()
            conn.execute("PRAGMA journal_mode = PERSIST")
            self._commit(("INSERT OR REPLACE INTO holder VALUES (1, ?, ?, ?)",
                          (os.getpid(), socket.gethostname(), datetime.datetime.now().isoformat(timespec="seconds"))))
        except sqlite3.DatabaseError as err:
            raise PulseInputError(f"{self.path}: the log database cannot be read ({err}); restore it from a copy, or "
                                  "give --log a new file name") from None
        except LogFull as err:
            raise PulseInputError(f"{self.path}: cannot write the log ({err.strerror}); free space there, then run "
                                  "the same command again") from None
        self.keep_reserve()

    @staticmethod
    def _sqlite(path: Path):
        conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=5)
        conn.execute("PRAGMA synchronous = FULL")
        return conn

    def _check_format(self) -> None:
        conn = self._conn
        app = conn.execute("PRAGMA application_id").fetchone()[0]
        require(app == APPLICATION_ID, f"--log {self.path}: is an SQLite database but not a pulse-jax log; it is "
                                       "left untouched: give --log a new file name")
        try:
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.DatabaseError:
            meta = {}
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        require(meta.get("version") == str(version) == str(LOG_VERSION),
                f"{self.path}: log format version {meta.get('version', version)!r} is not supported (this pulse-jax "
                f"reads version {LOG_VERSION}), or the database was edited")

    def has_reserve(self) -> bool:
        """Whether the space kept for a full disk is there."""
        try:
            return self._conn is not None and self._conn.execute("SELECT count(*) FROM reserve").fetchone()[0] > 0
        except sqlite3.Error:
            return False

    def keep_reserve(self) -> bool:
        """Put the reserve back if it was used; False where the disk has no room for it (nothing is then
        paid for: `pulse_jax.live.Selector.can_pay`).

        Written twice, so that the rollback journal grows to its size and keeps it (PERSIST mode): a
        commit on a full disk then overwrites journal space instead of asking for more."""
        if self.has_reserve():
            return True
        try:
            self._commit(("INSERT INTO reserve VALUES (zeroblob(?))", (RESERVE_BYTES,)))
            self._commit(("UPDATE reserve SET space = randomblob(?)", (RESERVE_BYTES,)))
        except LogFull:
            return False
        return True

    def _convert(self) -> None:
        """Replace the JSONL log at ``self.path`` by a database with the same records (verified first)."""
        header, records, notes = legacy_jsonl.read(self.path)
        version = header.get("version", 1)
        temporary = _build_database(self.path, header, records)
        kept = self._free_name(self.path.name + f".v{version}.jsonl")
        os.replace(self.path, kept)
        side = self.path.with_name(self.path.name + ".paid")
        if side.exists():
            os.replace(side, kept.with_name(kept.name + ".paid"))
        os.replace(temporary, self.path)
        _fsync_folder(self.path.parent)
        # The lock was on the JSONL file, now renamed: take it on the database.
        _HELD.pop(self._key, None)
        os.close(self._lock_fd)
        self._acquire()
        for note in notes:
            print(f"pulse-jax: {note}", file=sys.stderr)
        print(f"pulse-jax: {self.path}: converted the version-{version} JSONL log to an SQLite database in place "
              f"({len(records)} record(s)); the original is kept as {kept.name}", file=sys.stderr)

    def _free_name(self, name: str) -> Path:
        candidate, k = self.path.with_name(name), 1
        while candidate.exists():
            k += 1
            candidate = self.path.with_name(f"{name}.{k}")
        return candidate

    # ------------------------------------------------------------------ close

    def close(self) -> None:
        """Let go of the log (it is always consistent on disk); its rollback journal file is removed."""
        if self._conn is not None:
            try:
                self._conn.execute("PRAGMA journal_mode = DELETE")
            except sqlite3.Error:
                pass
            self._conn.close()
            self._conn = None
        if self._lock_fd is not None:
            # After the connection: closing any descriptor of the file drops SQLite's own locks on it.
            os.close(self._lock_fd)
            self._lock_fd = None
            if _HELD.get(self._key) is self:
                del _HELD[self._key]

    def __del__(self):
        try:
            self.close()
        except Exception:   # noqa: BLE001 -- interpreter shutdown
            pass

    # ------------------------------------------------------------------ write

    def _commit(self, *statements) -> None:
        """Run ``statements`` (``(sql, args)`` pairs) as one transaction; a failure rolls it back and raises
        `LogFull` (with ``errno`` ENOSPC for a full disk)."""
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            for sql, args in statements:
                conn.execute(sql, args)
            conn.execute("COMMIT")
        except sqlite3.OperationalError as err:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            full = getattr(err, "sqlite_errorname", "") == "SQLITE_FULL" or "full" in str(err)
            raise LogFull(errno.ENOSPC if full else errno.EIO,
                          "No space left on device" if full else f"SQLite: {err}") from None

    def append(self, record: dict) -> None:
        """Commit one record (the header, a told batch or a paid batch) in one transaction.

        A told batch's row and the removal of its paid row (if any) are one transaction. Raises
        `LogFull` when the commit fails (nothing of it is saved)."""
        if self._conn is None:
            raise PulseInputError(f"{self.path}: this selector no longer holds the log (another selector in this "
                                  "process opened it); use the newer one")
        kind = record.get("type")
        body = {k: v for k, v in record.items() if k != "crc"}
        if kind == "header":
            body = {**body, "version": LOG_VERSION}
            crc = checksum(body, "")
            self._commit(("INSERT INTO run VALUES (1, ?, ?)", (canonical(body), crc)))
            self._previous = self._run_crc = crc
            return
        row = (body["ticket"], body["step"], body["asks_issued"], body["model"], json.dumps(body["examples"]),
               json.dumps(body["scores"]))
        if kind == "tell":
            crc = checksum(body, self._previous)
            self._commit(("INSERT INTO told(ticket, step, asks_issued, model, examples, scores, crc) "
                          "VALUES (?, ?, ?, ?, ?, ?, ?)", (*row, crc)),
                         ("DELETE FROM paid WHERE ticket = ?", (body["ticket"],)))
            self._previous = crc
        elif kind == "paid":
            self._commit(("INSERT OR REPLACE INTO paid VALUES (?, ?, ?, ?, ?, ?, ?)",
                          (*row, checksum(body, self._run_crc))))
        else:
            raise ValueError(f"unknown record type {kind!r}")

    def release_reserve(self) -> bool:
        """Free the space kept for a full disk (True if there was any): the next commits reuse it."""
        if self._conn is None or not self._conn.execute("SELECT count(*) FROM reserve").fetchone()[0]:
            return False
        try:
            self._commit(("DELETE FROM reserve", ()))
        except LogFull:
            return False
        return True

def _build_database(path: Path, header: dict, records: list) -> str:
    """A new log database beside ``path`` (a temporary name, returned) holding a JSONL log's verified
    ``header`` and ``records``; the caller renames it into place."""
    version = header.get("version", 1)
    told = {r["ticket"] for _, r in records if r.get("type") == "tell" and isinstance(r.get("ticket"), int)}
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".converting", dir=path.parent)
    os.close(fd)
    try:
        conn = Journal._sqlite(Path(temporary))
        conn.executescript(f"BEGIN; {_SCHEMA} PRAGMA application_id = {APPLICATION_ID}; "
                           f"PRAGMA user_version = {LOG_VERSION}; INSERT INTO meta VALUES ('format', "
                           f"'pulse-jax log'), ('version', '{LOG_VERSION}');")
        body = {**header, "version": LOG_VERSION, "jsonl_version": version}
        previous = run_crc = checksum(body, "")
        conn.execute("INSERT INTO run VALUES (1, ?, ?)", (canonical(body), run_crc))
        for _, record in records:
            fields = [record.get(f) for f in _FIELDS]
            row = fields[:4] + [json.dumps(fields[4]), json.dumps(fields[5])]
            if record.get("type") == "tell":
                previous = checksum(record, previous)
                conn.execute("INSERT INTO told(ticket, step, asks_issued, model, examples, scores, crc) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?)", (*row, previous))
            elif record.get("ticket") not in told:
                conn.execute("INSERT OR REPLACE INTO paid VALUES (?, ?, ?, ?, ?, ?, ?)",
                             (*row, checksum(record, run_crc)))
        conn.execute("COMMIT")
        conn.close()
    except (sqlite3.Error, TypeError, ValueError, OverflowError) as err:
        os.unlink(temporary)
        raise PulseInputError(f"{path}: cannot convert the JSONL log to a database ({err}); it is left as it "
                              "is") from None
    return temporary


def import_jsonl(source, target) -> int:
    """Write the JSONL log ``source`` (any version, verified) as a new log database ``target`` (which must
    not exist); returns the number of batches."""
    source, target = Path(source), Path(target)
    require(source.is_file() and legacy_jsonl.looks_like_log(source), f"{source}: not a pulse-jax JSONL log")
    require(not target.exists(), f"{target}: exists; give a new file name (a log is never written over)")
    header, records, notes = legacy_jsonl.read(source)
    for note in notes:
        print(f"pulse-jax: {note}", file=sys.stderr)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = _build_database(target, header, records)
    try:
        os.link(temporary, target)          # fails if target appeared meanwhile: never over a file
    finally:
        os.unlink(temporary)
    return len(records)


def as_jsonl(header: dict, records: list) -> str:
    """A log's header and records as a version-3 JSONL log (one checksum chain over every line), the
    format earlier pulse-jax versions wrote and `import_jsonl` reads."""
    header = {k: v for k, v in header.items() if k != "jsonl_version"}
    header["version"] = 3
    lines, previous = [], ""
    for record in [header] + list(records):
        previous = checksum(record, previous)
        lines.append(json.dumps({**record, "crc": previous}) + "\n")
    return "".join(lines)


def _fsync_folder(folder: Path) -> None:
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


def snapshot(path) -> tuple[dict | None, list[dict]]:
    """``(header, records)`` of the log at ``path`` as it is now, verified, read-only and without taking
    it (a running log can be read; its open transaction, if any, is not seen). A JSONL log of an earlier
    version is read as it is, unconverted."""
    path = Path(path)
    require(path.is_file(), f"{path}: no such log file")
    with open(path, "rb") as handle:
        head = handle.read(len(_MAGIC))
    if head != _MAGIC:
        require(legacy_jsonl.looks_like_log(path), f"{path}: not a pulse-jax log")
        header, records, _ = legacy_jsonl.read(path)
        return header, [r for _, r in records]
    try:
        conn = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error as err:
        raise PulseInputError(f"{path}: cannot open the log: {err}") from None
    try:
        require(conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID,
                f"{path}: an SQLite database but not a pulse-jax log")
        header, records = LogReader(path, conn).open()
        return header, [r for _, r in records]
    except sqlite3.DatabaseError as err:
        if "readonly" in str(err):     # a hot rollback journal: the writer died mid-commit
            raise PulseInputError(f"{path}: a run stopped in the middle of a commit; open the log once to finish it "
                                  "(run the same command again) before reading it") from None
        raise PulseInputError(f"{path}: the log database cannot be read ({err})") from None
    finally:
        conn.close()
