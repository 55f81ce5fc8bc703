"""The durable log of a live selection: a locked, checksummed JSONL journal and its verified replay.

Format (version 3). Line 1 is a header (the run's configuration); every later
line is one told batch (``"type": "tell"``): ``ticket``, ``step``,
``asks_issued``, ``model``, ``examples`` and ``scores``; or one *paid* batch
(``"type": "paid"``, the same fields): scores that arrived for a batch in flight
when the run was stopped, logged but not yet told, so that a resumed run tells
them at the point where an uninterrupted run would have (and never pays for
them again). Every line carries ``crc``: the CRC-32 (8 hex
digits) of the previous line's ``crc`` followed by the line's own canonical
JSON (sorted keys, no spaces, without ``crc``). The chain makes an edited
score, a deleted line, a duplicated or reordered line detectable at the
first line that no longer fits. Version-1 logs (no checksums) replay without
that check.

Durability: each record is written with one ``write`` and fsynced *before* it
changes the selector, so whatever a crash loses was never used. A crash in
mid-write leaves a last line without its newline; :meth:`Journal.open` cuts
such a torn tail back to the last complete record (and says so once) before
anything is appended.

Locking: :class:`Journal` holds an exclusive ``flock`` on ``<log>.lock`` (which
names the holder's process id and host) for as long as it is open, so a
second process on the same log refuses at once and writes nothing; closing
removes the lock file. Within one
process, a newer journal on the same path takes the lock over (an old selector
left behind by an exception cannot write any more).
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import zlib
from pathlib import Path
from typing import Iterator

import numpy as np

from pulse_jax.errors import PulseInputError, require

try:   # POSIX; elsewhere the log is not locked (said in the README)
    import fcntl
except ImportError:   # pragma: no cover -- Windows
    fcntl = None

LOG_VERSION = 3

#: Header fields added after version 1 and the value an older log implies.
HEADER_DEFAULTS = {"rule": "ucbe", "cs_horizon": 0.0, "cs_simultaneous": 1.0, "refit_prior": 0.0, "cs_grid": 0}
#: Logs older than this version lack some header fields (every traced parameter, the plug-ins'
#: settings); those fields are not compared when absent. From this version on every field must match.
COMPLETE_HEADER_VERSION = 3
#: Header fields that may differ between versions of the format itself.
VERSION_FIELDS = ("version",)


def fingerprint(array) -> str:
    """A short hash of an array's float32 bytes (to check side information on resume)."""
    return hashlib.sha256(np.ascontiguousarray(np.asarray(array, np.float32)).tobytes()).hexdigest()[:16]


def _canonical(record: dict) -> str:
    return json.dumps({k: v for k, v in record.items() if k != "crc"}, sort_keys=True, separators=(",", ":"))


def checksum(record: dict, previous: str) -> str:
    """The chained CRC-32 of ``record`` after the line whose checksum is ``previous``."""
    return f"{zlib.crc32((previous + _canonical(record)).encode('utf-8')) & 0xFFFFFFFF:08x}"


def check_header(path: Path, logged: dict, expected: dict) -> None:
    """A one-line error naming the first field where the log's header differs from this run's."""
    old = isinstance(logged.get("version"), int) and logged["version"] < COMPLETE_HEADER_VERSION
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


def _complete(tail: bytes, previous: bytes) -> bool:
    """Is ``tail`` a whole record whose checksum chains onto the line ``previous`` (b"" for none)?"""
    try:
        record = json.loads(tail.decode("utf-8"))
        before = json.loads(previous.decode("utf-8")).get("crc", "") if previous else ""
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return False
    return isinstance(record, dict) and "crc" in record and record["crc"] == checksum(record, before)


_HELD: dict = {}   # resolved log path -> the Journal of this process that holds its lock


class Journal:
    """An open, exclusively locked log (see the module docstring)."""

    def __init__(self, path):
        self.path = Path(path)
        require(not self.path.is_dir(), f"--log {self.path}: is a directory; give a file name")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._previous = ""          # crc of the last line written or read
        self._version = LOG_VERSION
        self._lock = None
        self._acquire()

    # ------------------------------------------------------------------ lock

    def _acquire(self):
        key = str(self.path.resolve())
        older = _HELD.get(key)
        if older is not None:        # same process: take the lock over from an abandoned selector
            self._lock, older._lock = older._lock, None
            _HELD[key] = self
            return
        lock_path = self.path.resolve().with_name(self.path.name + ".lock")
        for _ in range(100):
            handle = self._lock_once(lock_path)
            if handle is not None:
                break
        else:   # pragma: no cover -- 100 releases raced in a row
            raise PulseInputError(f"{lock_path}: the lock file keeps being replaced; try again")
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()} on {socket.gethostname()}\n")
        handle.flush()
        self._lock = handle
        _HELD[key] = self

    def _lock_once(self, lock_path):
        """The locked handle of ``lock_path``, or None when the file was removed (by a holder finishing)
        between our open and our lock: then the lock we got is on a file nobody else will see."""
        try:
            handle = open(lock_path, "a+", encoding="utf-8")
        except OSError as err:
            raise PulseInputError(f"{lock_path}: cannot open the lock file: {err.strerror}") from None
        if fcntl is None:
            return handle
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise PulseInputError(f"{self.path} is in use by process {holder}; wait for it to finish "
                                  "(or stop it) before running on the same log") from None
        try:
            same = os.stat(lock_path).st_ino == os.fstat(handle.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            handle.close()
            return None
        return handle

    def close(self) -> None:
        """Release the lock (the log itself is always consistent on disk)."""
        if self._lock is not None:
            if fcntl is not None:
                # Removed while still held, so no process can lock the old file after we let go
                # (one that opened it before the removal sees it gone and opens a new one).
                try:
                    os.unlink(self._lock.name)
                except OSError:
                    pass
                fcntl.flock(self._lock.fileno(), fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None
            _HELD.pop(str(self.path.resolve()), None)

    def __del__(self):
        try:
            self.close()
        except Exception:   # noqa: BLE001 -- interpreter shutdown
            pass

    # ------------------------------------------------------------------ write

    def append(self, record: dict) -> None:
        """Append one record with its chained checksum, as one write, and fsync it."""
        if self._lock is None:
            raise PulseInputError(f"{self.path}: this selector no longer holds the log (another selector "
                                  "in this process opened it); use the newer one")
        record = dict(record)
        if self._version >= 2:
            record["crc"] = checksum(record, self._previous)
        line = json.dumps(record) + "\n"
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
        self._previous = record.get("crc", "")

    # ------------------------------------------------------------------ read

    def open(self) -> tuple[dict | None, Iterator[tuple[int, dict]]]:
        """``(header, records)`` of an existing log (``(None, empty)`` for a new or empty one).

        Cuts a torn tail first. ``records`` yields ``(line number, record)``,
        each checked against the checksum chain (version 2); any unreadable
        line is a one-line error naming it.
        """
        self._fold_in_side_file()
        if not self.path.is_file() or self.path.stat().st_size == 0:
            return None, iter(())
        try:
            data = self.path.read_bytes()
        except OSError as err:
            raise PulseInputError(f"{self.path}: cannot read the log: {err.strerror}") from None
        if not data.endswith(b"\n"):
            data = self._mend_tail(data)
            if not data:
                return None, iter(())
        lines = data.split(b"\n")[:-1]
        header = self._parse(lines[0], 1)
        require(isinstance(header, dict) and header.get("type") == "header",
                f"{self.path}: line 1 is not a pulse-jax log header")
        self._version = int(header.get("version", 1)) if isinstance(header.get("version", 1), int) else 0
        require(self._version in (1, 2, 3), f"{self.path}: log format version {header.get('version')!r} is not "
                                         f"supported (this pulse-jax writes version {LOG_VERSION})")
        self._verify(header, 1)

        def records():
            for number, raw in enumerate(lines[1:], start=2):
                if not raw.strip():
                    raise PulseInputError(f"{self.path}: line {number} is empty (was the log edited?)")
                record = self._parse(raw, number)
                require(isinstance(record, dict) and record.get("type") in ("tell", "paid"),
                        f"{self.path}: line {number} is not a told or paid batch (was the log edited?)")
                self._verify(record, number)
                yield number, record

        return header, records()

    @property
    def side_path(self) -> Path:
        """Where paid batches go when the log itself cannot be written (a full disk)."""
        return self.path.with_name(self.path.name + ".paid")

    def save_aside(self, records: list[dict]) -> Path:
        """Write paid batches to the side file (each line checksummed on its own), fsynced; raises OSError."""
        lines = "".join(json.dumps({**r, "crc": checksum(r, "")}) + "\n" for r in records)
        with open(self.side_path, "a", encoding="utf-8") as handle:
            handle.write(lines)
            handle.flush()
            os.fsync(handle.fileno())
        return self.side_path

    def _fold_in_side_file(self) -> None:
        """Append the side file's paid batches to the log (their checksums checked), then remove it."""
        if not self.side_path.is_file():
            return
        if not self.path.is_file() or self.path.stat().st_size == 0:
            raise PulseInputError(f"{self.side_path}: paid batches without their log {self.path}; restore the log "
                                  "or remove this file")
        data = self.path.read_bytes()
        if not data.endswith(b"\n"):
            data = self._mend_tail(data)
        self._previous = json.loads(data.split(b"\n")[-2].decode("utf-8")).get("crc", "")
        kept = 0
        for number, raw in enumerate(self.side_path.read_bytes().split(b"\n"), start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                print(f"pulse-jax: {self.side_path}: line {number} is torn; its batch will be asked again",
                      file=sys.stderr)
                continue
            require(isinstance(record, dict) and record.get("type") == "paid"
                    and record.get("crc") == checksum(record, ""),
                    f"{self.side_path}: line {number} fails its checksum (was the file edited?)")
            record.pop("crc")
            self.append(record)
            kept += 1
        self.side_path.unlink()
        self._previous = ""
        print(f"pulse-jax: {self.path}: took in {kept} paid batch(es) saved beside it when the log could not be "
              "written", file=sys.stderr)

    def _mend_tail(self, data: bytes) -> bytes:
        """The log's bytes once its last line is whole: a last record that lacks only its newline and whose
        checksum fits the line before it is complete (the newline is added); anything else after the last
        newline is a torn write, cut (its batch was not logged and will be asked again)."""
        keep = data.rfind(b"\n") + 1
        tail, previous = data[keep:], b""
        if keep:
            previous = data[data.rfind(b"\n", 0, keep - 1) + 1:keep - 1]
        if _complete(tail, previous):
            with open(self.path, "ab") as handle:
                handle.write(b"\n")
                handle.flush()
                os.fsync(handle.fileno())
            print(f"pulse-jax: {self.path}: the last record was complete but lacked its newline; kept it",
                  file=sys.stderr)
            return data + b"\n"
        with open(self.path, "r+b") as handle:
            handle.truncate(keep)
            handle.flush()
            os.fsync(handle.fileno())
        print(f"pulse-jax: {self.path}: cut a torn last record ({len(data) - keep} bytes) left by an interrupted "
              "write; its batch was not logged and will be asked again", file=sys.stderr)
        return data[:keep]

    def _parse(self, raw: bytes, number: int):
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise PulseInputError(f"{self.path}: line {number} is not valid JSON (was the log edited?)") from None

    def _verify(self, record: dict, number: int) -> None:
        if self._version < 2:
            return
        expected = checksum(record, self._previous)
        if record.get("crc") != expected:
            raise PulseInputError(f"{self.path}: line {number} fails its checksum: the line was changed, or a "
                                  "line before it was deleted, duplicated or moved")
        self._previous = expected
