"""Returned scores kept the instant a call returns: one appended line per batch beside the log.

A worker commits each returned batch to the SQLite log as *paid* (`pulse_jax.live.ledger`), but
that commit can wait behind another transaction (a told batch's synced commit holds the log for a
disk sync). A ``kill -9`` in that wait would lose scores the scorer was paid for. So before the commit
the worker appends the batch to ``<log>.returned`` with one ``write`` (no lock, no sync: the page
cache outlives the process), and a resumed run adds every line of it that the log does not hold as
paid cells (`pulse_jax.live.ledger.Ledger.log_scored`), then empties the file.

Each line is JSON ``{"log", "model", "examples", "scores", "crc"}``: ``log`` names the log it belongs
to (its run checksum, so a file left by another log of the same name is ignored) and ``crc`` the
line's CRC-32 (a torn last line, cut by the kill mid-write, is left out).
"""
from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

SUFFIX = ".returned"


def path_of(log: Path) -> Path:
    return log.with_name(log.name + SUFFIX)


def _crc(body: dict) -> int:
    return zlib.crc32(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def line(log_id: str, model: str, examples: list, scores: list) -> bytes:
    """One batch's line (ends with a newline)."""
    body = {"log": log_id, "model": model, "examples": examples, "scores": [float(x) for x in scores]}
    return (json.dumps({**body, "crc": _crc(body)}, separators=(",", ":")) + "\n").encode()


def read(path: Path, log_id: str) -> list[tuple[str, dict]]:
    """``[(model, {example id: score})]`` of the lines of ``path`` that belong to ``log_id`` and pass their
    checksum (none when there is no file)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    out = []
    for raw in data.split(b"\n"):
        try:
            record = json.loads(raw)
            body = {k: record[k] for k in ("log", "model", "examples", "scores")}
        except (ValueError, TypeError, KeyError):
            continue            # a torn or foreign line
        if body["log"] == log_id and record.get("crc") == _crc(body) and len(body["examples"]) == len(body["scores"]):
            out.append((body["model"], dict(zip(body["examples"], body["scores"]))))
    return out


class Spool:
    """The open ``<log>.returned`` file: `keep` appends a batch in one ``write``."""

    def __init__(self, path: Path, log_id: str):
        self.path, self.log_id = path, log_id
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

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
