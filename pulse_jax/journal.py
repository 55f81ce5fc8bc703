"""The durable log of a live selection: a JSONL journal of told batches, and its replay.

Line 1 is a header (the run's configuration); every later line is one told
batch (ticket, step, model, examples, scores). Each record is appended and
fsynced *before* it changes the selector, so whatever a crash loses was never
used. The selector replays a journal by asking again and checking that each
logged batch is exactly what it asks (:meth:`pulse_jax.selector.Selector`).
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Iterator

import numpy as np

from pulse_jax.errors import PulseInputError, require

LOG_VERSION = 1

#: Header fields added after version 1 and the value an older log implies.
HEADER_DEFAULTS = {"rule": "ucbe"}


def fingerprint(array) -> str:
    """A short hash of an array's float32 bytes (to check side information on resume)."""
    return hashlib.sha256(np.ascontiguousarray(np.asarray(array, np.float32)).tobytes()).hexdigest()[:16]


def append(path: Path, record: dict) -> None:
    """Append one record as a line and fsync it."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def check_header(path: Path, logged: dict, expected: dict) -> None:
    """A one-line error naming the first field where the log's header differs from this run's."""
    for key, value in expected.items():
        have = logged.get(key, HEADER_DEFAULTS.get(key))
        if have != value:
            shown = (lambda v: f"{len(v)} entries" if isinstance(v, list) else repr(v))
            raise PulseInputError(f"{path} was written by a different configuration: {key} is "
                                  f"{shown(have)} in the log, {shown(value)} here")


def read(path: Path) -> tuple[dict, Iterator[tuple[int, dict]]]:
    """``(header, records)``: the header dict and an iterator of ``(line number, record)``.

    A torn last line (the write it belonged to never completed) is skipped;
    an unreadable line elsewhere is an error naming it.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    try:
        header = json.loads(lines[0])
    except (json.JSONDecodeError, IndexError):
        raise PulseInputError(f"{path}: line 1 is not a pulse-jax log header") from None
    require(isinstance(header, dict) and header.get("type") == "header", f"{path}: line 1 is not a pulse-jax log header")

    def records():
        for number, line in enumerate(lines[1:], start=2):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                if number == len(lines):
                    return
                raise PulseInputError(f"{path}: line {number} is not valid JSON") from None
            yield number, record

    return header, records()
