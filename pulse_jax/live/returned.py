"""Returned scores kept the instant a call returns: one appended line per batch beside the log.

A worker commits each returned batch to the SQLite log as *paid* (`pulse_jax.live.ledger`), but
that commit can wait behind another transaction (a told batch's synced commit holds the log for a
disk sync). A ``kill -9`` in that wait would lose scores the scorer was paid for. So before the commit
the worker appends the batch to ``<log>.returned`` with one ``write`` (no lock, no sync: the page
cache outlives the process), and a resumed run adds every line of it that the log does not hold as
paid cells (`pulse_jax.live.ledger.Ledger.log_scored`), then empties the file.

Each line is JSON ``{"log", "model", "examples", "scores", "crc"}``: ``log`` names the log it belongs
to (its run checksum, which covers the random ``log_id`` every new log's header carries, so two logs
of the same command never share a name) and ``crc`` the line's CRC-32 (a torn last line, cut by the
kill mid-write, is left out). Lines of any other log (one deleted while this file stayed) are never
told: the file is set aside under a new name and the run says so in one line.

The file is opened as a regular file or refused: a FIFO there would block the open, a link to
``/dev/zero`` would be read until memory runs out.
"""
from __future__ import annotations

import json
import os
import stat
import zlib
from pathlib import Path

from pulse_jax.errors import PulseInputError
from pulse_jax.fileio import files

SUFFIX = ".returned"


def path_of(log: Path) -> Path:
    return log.with_name(log.name + SUFFIX)


def _crc(body: dict) -> int:
    return zlib.crc32(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def line(log_id: str, model: str, examples: list, scores: list) -> bytes:
    """One batch's line (ends with a newline)."""
    body = {"log": log_id, "model": model, "examples": examples, "scores": [float(x) for x in scores]}
    return (json.dumps({**body, "crc": _crc(body)}, separators=(",", ":")) + "\n").encode()


def _open_regular(path: Path, flags: int) -> int:
    """``os.open`` of ``path`` as a regular file (never through a link, never blocking on a FIFO), or a
    one-line `PulseInputError` naming it."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), 0o644)
    except FileNotFoundError:
        raise
    except OSError as err:
        raise PulseInputError(f"{path}: cannot open the log's file of returned scores ({err.strerror}; a link "
                              "there is refused); remove it or give --log another name") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise PulseInputError(f"{path}: the log's file of returned scores is not a regular file (a FIFO or a "
                              "device?); remove it or give --log another name")
    os.set_blocking(fd, True)
    return fd


def read(path: Path, log_id: str) -> tuple[list[tuple[str, dict]], int]:
    """``([(model, {example id: score})], foreign)``: the lines of ``path`` that belong to ``log_id`` and
    pass their checksum, and the count of whole lines that belong to another log (none when there is
    no file)."""
    try:
        fd = _open_regular(path, os.O_RDONLY)
    except FileNotFoundError:
        return [], 0
    with open(fd, "rb") as handle:
        data = handle.read()
    out, foreign = [], 0
    for raw in data.split(b"\n"):
        try:
            record = json.loads(raw)
            body = {k: record[k] for k in ("log", "model", "examples", "scores")}
        except (ValueError, TypeError, KeyError):
            continue            # a torn line
        if record.get("crc") != _crc(body):
            continue
        if body["log"] != log_id:
            foreign += 1
        elif len(body["examples"]) == len(body["scores"]):
            out.append((body["model"], dict(zip(body["examples"], body["scores"]))))
    return out, foreign


def set_aside(path: Path) -> Path:
    """Rename ``path`` to a free name beside it (``<name>.orphaned``, ``.orphaned.2``, ...); returns it."""
    candidate = files.free_name(path.with_name(path.name + ".orphaned"))
    os.replace(path, candidate)
    return candidate


class Spool:
    """The open ``<log>.returned`` file: `keep` appends a batch in one ``write``."""

    def __init__(self, path: Path, log_id: str):
        self.path, self.log_id = path, log_id
        self._fd = _open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def keep(self, model: str, examples: list, scores: list) -> None:
        """Append one batch; a failed write (a full disk) is left to the log's own commit, which follows
        and says what it could not save."""
        if self._fd is not None:
            try:
                os.write(self._fd, line(self.log_id, model, examples, scores))
            except OSError:
                pass

    def clear(self) -> None:
        """Empty the file: everything in it is in the log."""
        if self._fd is not None:
            os.ftruncate(self._fd, 0)

    def close(self, remove: bool) -> None:
        """Close the file; ``remove``: delete it (everything in it is in the log)."""
        if self._fd is None:
            return
        os.close(self._fd)
        self._fd = None
        if remove:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
