"""The durable log of a live selection: an SQLite database with one writer and one transaction per batch.

Tables (format version 5; ``PRAGMA application_id`` marks the file as a pulse-jax log):

* ``meta``: the format's name and version;
* ``run``: one row, the run's configuration (everything that decides its requests, every traced
  parameter, and a random ``log_id``) as canonical JSON, with its checksum;
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

JSONL logs of earlier versions (`pulse_jax.live.legacy_jsonl`) are verified and converted in place once.
"""
from __future__ import annotations

import contextlib
import datetime
import errno
import functools
import json
import os
import secrets
import socket
import sqlite3
import threading
from pathlib import Path

from pulse_jax.errors import PulseInputError, note, require
from pulse_jax.fileio import files
from pulse_jax.live import legacy_jsonl, log_file
from pulse_jax.live.chain import canonical, checksum
from pulse_jax.live.log_reader import CHECK_TAIL, LogReader, check_tally_kept, snapshot  # noqa: F401 -- snapshot: journal.snapshot
from pulse_jax.live.log_schema import (APPLICATION_ID, LOG_VERSION, MAGIC, READ_VERSIONS, RESERVE_BYTES, TALLY_VERSION,
                                       build_database, check_schema, connect, copy_database,
                                       fsync_folder, read_file_header, tally_sql)

from pulse_jax.live.log_file import fcntl

def _locked(method):
    """``method`` holding the journal's lock (one transaction at a time on its connection)."""
    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return locked


#: Add a number to a counter in ``meta`` (created at that number).
_ADD_TO_COUNTER = ("INSERT INTO meta VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET "
                   "value = CAST(CAST(value AS INTEGER) + CAST(excluded.value AS INTEGER) AS TEXT)")


class LogFull(OSError):
    """A commit failed (a full disk, an I/O error); SQLite rolled it back, so nothing of it was saved."""


_HELD: dict = {}   # (device, inode) -> the Journal of this process that holds that database


class Journal(LogReader):
    """An open, exclusively held log database (see the module docstring)."""

    def __init__(self, path):
        super().__init__(path, None)
        self._lock_fd, self._owned = None, False
        # What this run knows the log holds (read or written): a copy written over the log under the
        # run is detected at the next commit (`_check_file`) and this is saved whole beside it.
        self._header: dict | None = None
        self._told_records: list = []
        self._paid_records: dict = {}
        self._changes: int | None = None      # SQLite's file change counter after this run's last commit
        self.replaced: str = ""               # the one line saying the log was replaced, once it was
        # One transaction at a time on the connection: the runner's workers commit returned batches while
        # the main thread tells and asks.
        self._lock = threading.RLock()
        self._check_path()
        self._acquire()
        try:
            self._connect()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ open

    def _check_path(self) -> None:
        log_file.check_path(self.path)

    def _acquire(self) -> None:
        """Open the file and take its lock (`pulse_jax.live.log_file.open_locked`); an abandoned journal of
        this process on the same file is closed first (its log is taken over)."""
        self._lock_fd, self._key = log_file.open_locked(self.path, _HELD)
        _HELD[self._key] = self

    def _connect(self) -> None:
        size = os.fstat(self._lock_fd).st_size
        require(size > 0, f"--log {self.path}: is an empty file (0 bytes), not a pulse-jax log: a log emptied by "
                          "mistake cannot be resumed (restore it from a copy); to start a new run, give --log a new "
                          "file name or remove the empty file. It is left untouched")
        head, app, version = read_file_header(self.path)
        if head != MAGIC:
            if not legacy_jsonl.looks_like_log(self.path):
                raise PulseInputError(f"--log {self.path}: exists and is not a pulse-jax log (neither its database "
                                      "nor a JSONL log); it is left untouched: give --log a new file name")
            self._convert()
        elif app != APPLICATION_ID:
            raise PulseInputError(f"--log {self.path}: is an SQLite database but not a pulse-jax log; it is left "
                                  "untouched: give --log a new file name")
        elif version not in READ_VERSIONS:
            raise PulseInputError(f"--log {self.path}: is a pulse-jax log of format version {version}, which this "
                                  f"pulse-jax (format {LOG_VERSION}) does not read; it is left untouched")
        with self._opening():
            self._conn = self._sqlite(self.path)
            self._owned = True          # ours from here on: closing may set its journal mode back
            self._check_format()
            self._conn.execute("PRAGMA journal_mode = PERSIST")

    def open(self):
        """`LogReader.open`, keeping what the log holds for `_rescue`."""
        header, records = super().open()
        self._header = header

        def kept():
            for where, record in records:
                if record["type"] == "tell":
                    self._told_records.append(record)
                else:
                    self._paid_records[record["ticket"]] = record
                yield where, record

        return header, kept()

    def add_failures(self, failed_attempts: int, retries: int) -> None:
        """Add a run's scorer failures to the log's counts (one transaction; a failure to write them is
        not an error: they are a report, not a score)."""
        if not (failed_attempts or retries):
            return
        sql = _ADD_TO_COUNTER
        try:
            self._commit((sql, ("failed_attempts", str(int(failed_attempts)))), (sql, ("retries", str(int(retries)))))
        except LogFull:
            pass

    def claim(self) -> None:
        """Make the log this run's once the run accepted it (its configuration and batches checked): the
        tally of a format-4 log, the holder row a second run's message names, the space kept for a full
        disk. A log refused before this is left as it was."""
        with self._opening():
            self._add_tally()
            self._commit(("INSERT OR REPLACE INTO holder VALUES (1, ?, ?, ?)",
                          (os.getpid(), socket.gethostname(), datetime.datetime.now().isoformat(timespec="seconds"))))
        self.keep_reserve()

    @contextlib.contextmanager
    def _opening(self):
        """Errors of opening the log (and of its first writes) as one line each."""
        try:
            yield
        except LogFull as err:
            raise PulseInputError(f"{self.path}: cannot write the log ({err.strerror}); {fix_for(err)}") from None
        except sqlite3.OperationalError as err:
            if _full(err):
                raise PulseInputError(f"{self.path}: cannot write the log (no space left on device); free space "
                                      "there, then run the same command again") from None
            raise PulseInputError(f"{self.path}: the log database cannot be opened ({err}); check the file and its "
                                  "folder (permissions, space), or restore the log from a copy") from None
        except sqlite3.DatabaseError as err:
            raise PulseInputError(f"{self.path}: the log database cannot be read ({err}): it is damaged; restore it "
                                  "from a copy, or give --log a new file name") from None

    @staticmethod
    def _sqlite(path: Path):
        return connect(path)

    def _check_format(self) -> None:
        conn = self._conn
        app = conn.execute("PRAGMA application_id").fetchone()[0]
        require(app == APPLICATION_ID, f"--log {self.path}: is an SQLite database but not a pulse-jax log; it is "
                                       "left untouched: give --log a new file name")
        check_schema(self.path, conn)
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        require(meta.get("format") == "pulse-jax log" and meta.get("version") == str(version)
                and version in READ_VERSIONS,
                f"{self.path}: the log's format marks disagree (meta version {meta.get('version')!r}, database "
                f"version {version}, this pulse-jax's {LOG_VERSION}): the database was edited; restore it from a copy")

    def _add_tally(self) -> None:
        """Start the tally of a format-4 log written before it was kept (from what it holds now), and mark
        the log format 5; a format-5 log without its tally was edited and is refused."""
        if self.tally():
            return
        check_tally_kept(self.path, self._conn)
        rows = self._conn.execute("SELECT count(*), (SELECT crc FROM told ORDER BY seq DESC LIMIT 1) FROM told").fetchone()
        self._commit(("INSERT OR REPLACE INTO meta VALUES ('told_rows', ?), ('told_tail', ?), "
                      "('paid_rows', (SELECT count(*) FROM paid))", (str(rows[0]), rows[1] or "")),
                     ("UPDATE meta SET value = ? WHERE key = 'version'", (str(TALLY_VERSION),)),
                     (f"PRAGMA user_version = {TALLY_VERSION}", ()))

    @_locked
    def has_reserve(self) -> bool:
        """Whether the space kept for a full disk is there."""
        try:
            return self._conn is not None and self._conn.execute("SELECT count(*) FROM reserve").fetchone()[0] > 0
        except sqlite3.Error:
            return False

    def keep_reserve(self) -> bool:
        """Put the reserve back if it was used; False where the disk has no room for it (nothing is then
        paid for: `pulse_jax.live.ledger.Ledger.can_pay`).

        Written twice, so that the rollback journal grows to its size and keeps it (PERSIST mode): a
        commit on a full disk then overwrites journal space instead of asking for more."""
        if self.has_reserve():
            return True
        try:
            self._commit(("INSERT INTO reserve VALUES (zeroblob(?))", (RESERVE_BYTES,)))
            self._commit(("UPDATE reserve SET space = randomblob(?)", (RESERVE_BYTES,)))
        except LogFull as err:
            if err.errno == errno.ENOENT:     # the log is gone: no room would bring it back
                raise
            return False
        return True

    def _convert(self) -> None:
        """Replace the JSONL log at ``self.path`` by a database with the same records (verified first)."""
        header, records, notes = legacy_jsonl.read(self.path)
        version = header.get("version", 1)
        temporary = build_database(self.path, header, records)
        kept = files.free_name(self.path.with_name(self.path.name + f".v{version}.jsonl"))
        os.replace(self.path, kept)
        side = self.path.with_name(self.path.name + ".paid")
        if side.exists():
            os.replace(side, kept.with_name(kept.name + ".paid"))
        os.replace(temporary, self.path)
        fsync_folder(self.path.parent)
        # The lock was on the JSONL file, now renamed: take it on the database.
        _HELD.pop(self._key, None)
        os.close(self._lock_fd)
        self._acquire()
        for text in notes:
            note(text)
        note(f"{self.path}: converted the version-{version} JSONL log to an SQLite database in place "
             f"({len(records)} record(s)); the original is kept as {kept.name}")

    # ------------------------------------------------------------------ close

    def close(self) -> None:
        """Let go of the log (always consistent on disk; its rollback journal goes, also for a deleted log)."""
        gone = self._lock_fd is not None and os.fstat(self._lock_fd).st_nlink == 0
        if self._conn is not None and self._owned and not (gone or self.replaced or self._check_file(before=True)):
            self._rescue()      # copied over after the last commit: what this run holds is saved beside it
        if self._conn is not None:
            try:
                if self._owned:
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
        if gone and not os.path.lexists(self.path):
            Path(f"{self.path}-journal").unlink(missing_ok=True)

    def __del__(self):
        try:
            self.close()
        except Exception:   # noqa: BLE001 -- interpreter shutdown
            pass

    # ------------------------------------------------------------------ write

    @_locked
    def _commit(self, *statements) -> None:
        """Run ``statements`` (``(sql, args)`` pairs) as one transaction; a failure rolls it back and raises
        `LogFull` (with ``errno`` ENOSPC for a full disk). A log whose folder was renamed meanwhile is
        followed to its new place (the open file says where it is now) and the commit is made there."""
        for attempt in (0, 1):
            try:
                return self._transaction(statements)
            except LogFull:
                if attempt or not self._follow():
                    raise

    def _file_changes(self) -> int | None:
        """SQLite's file change counter (bytes 24-27 of the database, one more at every commit), read
        from the open file; None where the file is shorter than its header (being overwritten)."""
        head = os.pread(self._lock_fd, 4, 24) if self._lock_fd is not None else b""
        return int.from_bytes(head, "big") if len(head) == 4 else None

    def _check_file(self, before: bool) -> bool:
        """Nobody but this run wrote the log since its last commit (``before``), and its commit moved the
        counter by one (after). Another file copied over the running log (``cp backup.db run.db``)
        changes it: this run's log is then saved whole beside it (`_rescue`) and the commit goes there."""
        now = self._file_changes()
        if self._changes is None or self._lock_fd is None:
            self._changes = now
            return True
        expected = self._changes if before else (self._changes + 1) % 2**32
        if now == expected:
            self._changes = now
            return True
        return False

    def _rescue(self) -> None:
        """Save what this run knows the log holds as a new log beside it, carry on there, and say so once."""
        if self.replaced:
            return
        kept = files.free_name(self.path.with_name(self.path.name + ".kept"))
        self._write_copy(kept)
        if self._conn is not None:
            self._conn.close()
        old_fd = self._lock_fd
        fd = os.open(kept, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        info = os.fstat(fd)
        _HELD.pop(self._key, None)
        self._lock_fd, self._key = fd, (info.st_dev, info.st_ino)
        _HELD[self._key] = self
        os.close(old_fd)
        replaced = self.path
        self.path = kept
        self._conn = self._sqlite(kept)
        self._conn.execute("PRAGMA journal_mode = PERSIST")
        self._changes = self._file_changes()
        self.replaced = (f"{replaced}: the log was replaced while this run was writing it (another file copied "
                         f"over it?); every batch this run knew of is saved in {kept}, where this run goes on, and "
                         f"the file now at {replaced.name} is left as it is. Stopped asking: keep the log you mean "
                         f"to continue as {replaced.name}, then run the same command again")

    def _write_copy(self, path: Path) -> None:
        """A new log at ``path`` holding what this run knows this log holds, with the same checksums."""
        copy_database(path, self._header, self._run_crc, self._told_records, self._paid_records.values())

    def _transaction(self, statements, again: bool = False) -> None:
        if not self._check_file(before=True):
            self._replaced_now(again)
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            for sql, args in statements:
                if sql is CHECK_TAIL:
                    self._check_tail(*args)
                else:
                    conn.execute(sql, args)
            conn.execute("COMMIT")
        except sqlite3.DatabaseError as err:
            if isinstance(err, sqlite3.OperationalError):
                raise self._failed(conn, err) from None
            try:       # pages that are not SQLite's: the file is being overwritten
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            self._replaced_now(again)
            return self._transaction(statements, again=True)
        if not self._check_file(before=False):     # overwritten while committing: commit again in the copy
            self._replaced_now(again)
            return self._transaction(statements, again=True)

    def _replaced_now(self, again: bool) -> None:
        """The log was overwritten under this run: save what it holds beside it and go on there (`_rescue`);
        a copy overwritten in turn ends the run."""
        if again or self.replaced:
            raise LogFull(errno.EIO, "the log was overwritten again while this run was writing it")
        self._rescue()

    def _failed(self, conn, err) -> "LogFull":
        """A failed commit, rolled back, as `LogFull` (its errno says why)."""
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        gone = self._gone()
        if gone:
            return LogFull(errno.ENOENT, gone)
        return LogFull(errno.ENOSPC if _full(err) else errno.EIO,
                       "No space left on device" if _full(err) else f"SQLite: {err}")

    def _where_now(self) -> Path | None:
        """The path of the open log file now (Linux: ``/proc/self/fd``), or None where that cannot be told."""
        try:
            return Path(os.readlink(f"/proc/self/fd/{self._lock_fd}"))
        except OSError:
            return None

    def _gone(self) -> str:
        """Why the log can no longer be written at its path, if it was deleted or moved ('' otherwise)."""
        if self._lock_fd is None:
            return ""
        if os.fstat(self._lock_fd).st_nlink == 0:
            return "the log file was deleted while this run was writing it"
        try:
            here = os.stat(self.path)
            if (here.st_dev, here.st_ino) == self._key:
                return ""
        except OSError:
            pass
        now = self._where_now()
        return f"the log was moved to {now}" if now is not None else "the log file was moved or replaced"

    def _follow(self) -> bool:
        """Reconnect to the log where its folder was moved (True), if it was moved and can be found."""
        now = self._where_now()
        if now is None or now == self.path.resolve() or self._conn is None:
            return False
        try:
            info = os.stat(now)
            if (info.st_dev, info.st_ino) != self._key or info.st_nlink != 1:
                return False
            conn = self._sqlite(now)
            conn.execute("PRAGMA journal_mode = PERSIST")
        except (OSError, sqlite3.Error):
            return False
        self._conn.close()
        note(f"{self.path}: the log's folder was moved while the run was going; the log is now {now}, and the "
             "run goes on there")
        self._conn, self.path = conn, now
        return True

    @_locked
    def append(self, record: dict, synced: bool = True, drop_paid: tuple = (), counts: dict | None = None) -> None:
        """Commit one record (the header, a told batch or a paid batch) in one transaction.

        A told batch's row and the removal of its paid row (if any) are one transaction (with the rows
        of ``drop_paid``: tickets of paid rows whose cells are all told by then, and ``counts`` added to
        the log's counters in ``meta``, e.g. ``{"after_stop": 16}``). Raises
        `LogFull` when the commit fails (nothing of it is saved). ``synced=False`` (the samples of a
        batch in flight, as they come back) commits without waiting for the disk: the row outlives the
        process (a ``kill -9``), not the machine (a power cut), after which those samples are asked
        again like any batch in flight."""
        if self._conn is None:
            raise PulseInputError(f"{self.path}: this selector no longer holds the log (another selector in this "
                                  "process opened it); use the newer one")
        kind = record.get("type")
        body = {k: v for k, v in record.items() if k != "crc"}
        if kind == "header":
            body = {**body, "version": LOG_VERSION, "log_id": body.get("log_id") or secrets.token_hex(16)}
            crc = checksum(body, "")
            self._commit(("INSERT INTO run VALUES (1, ?, ?)", (canonical(body), crc)))
            self._previous = self._run_crc = crc
            self._header = body
            return
        row = (body["ticket"], body["step"], body["asks_issued"], body["model"], json.dumps(body["examples"]),
               json.dumps(body["scores"]))
        if kind == "tell":
            crc = checksum(body, self._previous)
            self._commit(("INSERT INTO told(ticket, step, asks_issued, model, examples, scores, crc) "
                          "VALUES (?, ?, ?, ?, ?, ?, ?)", (*row, crc)),
                         ("DELETE FROM paid WHERE ticket = ?", (body["ticket"],)),
                         *[("DELETE FROM paid WHERE ticket = ?", (t,)) for t in drop_paid],
                         *[(_ADD_TO_COUNTER, (key, str(int(n)))) for key, n in (counts or {}).items()],
                         (CHECK_TAIL, (self._previous_told(),)), tally_sql(crc))
            self._previous = crc
            self._told_records.append(body)
            for ticket in (body["ticket"], *drop_paid):
                self._paid_records.pop(ticket, None)
        elif kind == "paid":
            if not synced:
                self._conn.execute("PRAGMA synchronous = OFF")
            try:
                self._commit(("INSERT OR REPLACE INTO paid VALUES (?, ?, ?, ?, ?, ?, ?)",
                              (*row, checksum(body, self._run_crc))), (CHECK_TAIL, (self._previous_told(),)),
                             tally_sql(self._previous_told()))
            finally:
                if not synced:
                    self._conn.execute("PRAGMA synchronous = FULL")
            self._paid_records[body["ticket"]] = body
        else:
            raise ValueError(f"unknown record type {kind!r}")

    def asked(self) -> dict | None:
        """``{model: cells}`` sent to the scorer over every run of the log (`add_asked`), or None for a log
        written before the ledger was kept."""
        rows = dict(self._conn.execute("SELECT key, value FROM meta WHERE key = 'asked_kept' OR key LIKE 'asked:%'"))
        if "asked_kept" not in rows:
            return None
        try:
            return {key[len("asked:"):]: int(value) for key, value in rows.items() if key.startswith("asked:")}
        except ValueError:
            raise PulseInputError(f"{self.path}: the log's ledger of paid cells is not a count (was the log "
                                  "edited?). Restore it from a copy") from None

    def start_asked(self, counts: dict) -> None:
        """Start the ledger of cells sent to the scorer at ``counts`` (``{model: cells}``)."""
        self._commit(*[("INSERT OR REPLACE INTO meta VALUES (?, ?)", (f"asked:{m}", str(int(c))))
                       for m, c in counts.items()], ("INSERT OR REPLACE INTO meta VALUES ('asked_kept', '1')", ()))

    @_locked
    def set_meta(self, key: str, value: str) -> None:
        """``meta[key] = value`` in its own commit (checked like every commit: a log copied over is found)."""
        self._commit(("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value)))

    @_locked
    def add_asked(self, model: str, cells: int) -> None:
        """Add ``cells`` of ``model`` to the ledger before they are sent (unsynced: it outlives a ``kill -9``)."""
        self._conn.execute("PRAGMA synchronous = OFF")
        try:
            self._commit((_ADD_TO_COUNTER, (f"asked:{model}", str(int(cells)))))
        finally:
            self._conn.execute("PRAGMA synchronous = FULL")

    run_id = property(lambda self: self._run_crc, doc="The run checksum (its random log_id included).")

    def counter(self, key: str) -> int:
        """A counter the log keeps in ``meta`` (0 where it has none)."""
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return int(row[0]) if row and str(row[0]).isdigit() else 0

    def paid_rows(self) -> int:    # rows in the ``paid`` table
        return self._conn.execute("SELECT count(*) FROM paid").fetchone()[0]

    def replace_paid(self, records: list) -> None:
        """Replace every paid row by ``records`` (paid records) in one transaction (`LogFull` if it fails)."""
        statements = [("DELETE FROM paid", ())]
        for record in records:
            body = {k: v for k, v in record.items() if k != "crc"}
            statements.append(("INSERT INTO paid VALUES (?, ?, ?, ?, ?, ?, ?)",
                               (body["ticket"], body["step"], body["asks_issued"], body["model"],
                                json.dumps(body["examples"]), json.dumps(body["scores"]),
                                checksum(body, self._run_crc))))
        self._commit(*statements, (CHECK_TAIL, (self._previous_told(),)), tally_sql(self._previous_told()))
        self._paid_records = {r["ticket"]: r for r in records}

    def _check_tail(self, tail: str) -> None:
        """Inside a commit: the log's last told checksum is still the one this run committed last; a copy
        written over the log while the run goes on (a backup put back) has another, and is refused before
        anything is written on top of it."""
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'told_tail'").fetchone()
        if row is not None and row[0] != tail:
            self._conn.execute("ROLLBACK")
            raise PulseInputError(f"{self.path}: the log changed under this run (another file was copied over it?): "
                                  "its last batch is not the one this run wrote. Nothing more is written; restore the "
                                  "log you mean to continue, then run the same command again")

    def _previous_told(self) -> str:
        """The last told row's checksum ('' before the first): the run row's checksum starts the chain."""
        return "" if self._previous == self._run_crc else self._previous

    def release_reserve(self) -> bool:
        """Free the space kept for a full disk (True if there was any): the next commits reuse it."""
        if not self.has_reserve():
            return False
        try:
            self._commit(("DELETE FROM reserve", ()))
        except LogFull:
            return False
        return True

def _full(err) -> bool:
    return getattr(err, "sqlite_errorname", "") == "SQLITE_FULL" or "full" in str(err)


def fix_for(err: OSError) -> str:
    """What to do about a failed write, by its cause."""
    if err.errno == errno.ENOSPC:
        return "free space there, then run the same command again"
    if err.errno == errno.ENOENT:
        return "put the log back where it was (or give --log its new path), then run the same command again"
    return "check the log's folder (permissions, the file system), then run the same command again"
