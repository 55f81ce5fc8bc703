"""Reading a log database: its records verified as they are read (the checksum chain, the tally), for a
resume (`pulse_jax.live.journal.Journal`, which writes them) and for ``pulse-jax log show``."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Iterator

from pulse_jax.errors import PulseInputError, require
from pulse_jax.fileio.files import kind_of
from pulse_jax.live.chain import checksum
from pulse_jax.live import legacy_jsonl
from pulse_jax.live.log_schema import (APPLICATION_ID, FIELDS, MAGIC, READ_VERSIONS, TALLY, TALLY_VERSION, cannot_read,
                                       check_schema, read_file_header)


#: A commit's pseudo-statement: check, before the tally moves, that the log's last told batch is still
#: the one this run wrote (`Journal._check_tail`).
CHECK_TAIL = "-- check the told tail"


def check_tally_kept(path, conn) -> None:
    """A log of a format that keeps the tally has it (deleting it hides rows cut off the end)."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    require(version < TALLY_VERSION, f"{path}: the log's tally (its committed row counts, in meta) is missing, so rows "
                                     "cut off its end would go unnoticed: the log was edited. Restore it from a copy")


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
            raise cannot_read(self.path, err) from None
        if row is None:
            return None, iter(())
        header = self._decode(row[0], f"{self.path}: the run's configuration")
        require(isinstance(header, dict) and header.get("type") == "header",
                f"{self.path}: the run's configuration is not a pulse-jax log header (was the log edited?)")
        require(row[1] == checksum(header, ""), f"{self.path}: the run's configuration fails its checksum (was the "
                                                "log edited?)")
        require(header.get("version") in READ_VERSIONS, f"{self.path}: the run's configuration says format version "
                                                        f"{header.get('version')!r}, not one of {READ_VERSIONS} (was it "
                                                        "edited?)")
        self._previous = self._run_crc = row[1]
        return header, self._records()

    def tally(self) -> dict:
        """The tally the last commit wrote (`TALLY`), or ``{}`` for a log written before it was kept."""
        rows = dict(self._conn.execute("SELECT key, value FROM meta WHERE key IN (?, ?, ?)", TALLY).fetchall())
        return rows if len(rows) == len(TALLY) else {}

    def failures(self) -> tuple[int, int]:
        """``(failed attempts, retries)`` of the scorer over every run of this log (`add_failures`)."""
        rows = dict(self._conn.execute("SELECT key, value FROM meta WHERE key IN ('failed_attempts', 'retries')"))
        try:
            return int(rows.get("failed_attempts", 0)), int(rows.get("retries", 0))
        except ValueError:
            return 0, 0

    def _records(self):
        told = set()
        # One read transaction: a running log's writer commits between statements otherwise.
        in_transaction = self._conn.in_transaction
        if not in_transaction:
            self._conn.execute("BEGIN")
        try:
            tally = self.tally()
            rows = self._conn.execute(
                "SELECT seq, ticket, step, asks_issued, model, examples, scores, crc FROM told ORDER BY seq").fetchall()
            paid = self._conn.execute(
                "SELECT ticket, step, asks_issued, model, examples, scores, crc FROM paid ORDER BY ticket").fetchall()
        finally:
            if not in_transaction:
                self._conn.execute("COMMIT")
        for seq, *fields, crc in rows:
            where = f"{self.path}: told batch {seq}"
            record = self._record("tell", fields, where)
            if crc != checksum(record, self._previous):
                raise PulseInputError(f"{where} fails its checksum: the batch was changed, or one before it was "
                                      "deleted, duplicated or moved")
            self._previous = crc
            told.add(record.get("ticket"))
            yield where, record
        # A cut tail leaves a chain that verifies: the tally, committed with every batch, does not match.
        if not tally:
            check_tally_kept(self.path, self._conn)
        if tally:
            last = rows[-1][-1] if rows else ""
            if str(len(rows)) != tally["told_rows"] or last != tally["told_tail"]:
                raise PulseInputError(
                    f"{self.path}: the log committed {tally['told_rows']} told batch(es) but holds {len(rows)}"
                    + ("" if str(len(rows)) != tally["told_rows"] else " with another last one")
                    + ": rows were deleted or added at its end (was the log edited?). Restore it from a copy")
            require(str(len(paid)) == tally["paid_rows"],
                    f"{self.path}: the log committed {tally['paid_rows']} paid batch(es) but holds {len(paid)} (was "
                    "the log edited?). Restore it from a copy")
        for *fields, crc in paid:
            where = f"{self.path}: paid batch (ticket {fields[0]})"
            record = self._record("paid", fields, where)
            require(crc == checksum(record, self._run_crc), f"{where} fails its checksum (was the log edited?)")
            require(record["ticket"] not in told, f"{where} was told already (was the log edited?)")
            yield where, record

    def _record(self, kind: str, fields, where: str) -> dict:
        record = {"type": kind, **dict(zip(FIELDS[:4], fields[:4]))}
        record["examples"] = self._decode(fields[4], f"{where}: its examples")
        record["scores"] = self._decode(fields[5], f"{where}: its scores")
        return record

    @staticmethod
    def _decode(text, what: str):
        try:
            return json.loads(text)
        except (TypeError, ValueError, RecursionError):
            raise PulseInputError(f"{what} are not valid JSON (was the log edited?)") from None


def snapshot(path) -> tuple[dict | None, list[dict]]:
    """``(header, records)`` of the log at ``path`` as it is now, verified, read-only and without taking
    it (a running log can be read; its open transaction, if any, is not seen). A JSONL log of an earlier
    version is read as it is, unconverted."""
    path = Path(path)
    kind = kind_of(path.resolve())      # a FIFO would block the read below
    require(kind is None, f"{path}: is {kind}, not a pulse-jax log file")
    require(path.is_file(), f"{path}: no such log file")
    require(path.stat().st_size > 0, f"{path}: an empty file (0 bytes), not a pulse-jax log")
    head, app, version = read_file_header(path)
    if head != MAGIC:
        require(legacy_jsonl.looks_like_log(path), f"{path}: not a pulse-jax log (neither its database nor a JSONL log)")
        header, records, _ = legacy_jsonl.read(path)
        return header, [r for _, r in records]
    require(app == APPLICATION_ID, f"{path}: an SQLite database but not a pulse-jax log")
    require(version in READ_VERSIONS, f"{path}: a pulse-jax log of format version {version}, which this pulse-jax "
                                      f"(formats {', '.join(map(str, READ_VERSIONS))}) does not read")
    try:
        conn = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error as err:
        raise PulseInputError(f"{path}: cannot open the log: {err}") from None
    try:
        check_schema(path, conn)
        header, records = LogReader(path, conn).open()
        return header, [r for _, r in records]
    except sqlite3.DatabaseError as err:
        if "readonly" in str(err):     # a hot rollback journal: the writer died mid-commit
            raise PulseInputError(f"{path}: a run stopped in the middle of a commit; open the log once to finish it "
                                  "(run the same command again) before reading it") from None
        raise PulseInputError(f"{path}: the log database cannot be read ({err}): it is damaged; restore it from a "
                              "copy") from None
    finally:
        conn.close()
