"""The log's file: the checks on its path, and the exclusive lock its one writer holds.

The lock (``flock``) belongs to the file, not to the name, so a second run through a symbolic link,
a hard link, a rename or another mount path meets it and is refused in one line naming the holder
(the process id, host and start time it wrote into the ``holder`` table). A log with a second hard
link is refused outright: SQLite keeps its rollback journal beside the name in use.
"""
from __future__ import annotations

import json
import os
import sqlite3
import stat
from pathlib import Path

from pulse_jax.errors import PulseInputError, require
from pulse_jax.live.log_schema import create_log_file

try:   # POSIX; elsewhere the log is not locked (said in the README)
    import fcntl
except ImportError:   # pragma: no cover -- Windows
    fcntl = None


def where_kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK,
                       "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def check_path(p: Path) -> None:
    """A log path that names a file (or nothing yet), with no rollback journal beside it that SQLite would
    write through; its folder is made."""
    require(not p.is_dir(), f"--log {p}: is a directory; give a file name")
    if p.is_symlink() and not p.exists():
        raise PulseInputError(f"--log {p}: is a symbolic link to a missing file ({os.readlink(p)}); give the "
                              "log's own path or a new file name")
    if p.exists():
        mode = p.stat().st_mode
        require(stat.S_ISREG(mode), f"--log {p}: is {where_kind(mode)}, not a file; give a file name for the log")
    side = p.with_name(p.name + "-journal")
    if os.path.lexists(side):
        require(not side.is_symlink() and side.is_file(),
                f"--log {p}: its rollback journal {side.name} is "
                f"{'a symbolic link' if side.is_symlink() else 'not a file'}; SQLite would write the log's journal "
                "through it: remove it (a log's journal is a plain file beside it)")
    p.parent.mkdir(parents=True, exist_ok=True)


def open_locked(path: Path, held: dict) -> tuple[int, tuple]:
    """``(descriptor, (device, inode))`` of the log file, opened and exclusively locked (a new log is
    first created whole, under a temporary name, and linked into place); refused in one line naming the
    holder. ``held``: this process's open journals by file; one on the same file is closed first."""
    if not os.path.lexists(path):
        create_log_file(path)
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise PulseInputError(f"--log {path}: cannot open the log: {err.strerror}") from None
    info = os.fstat(fd)
    key = (info.st_dev, info.st_ino)
    older = held.get(key)
    if older is not None:        # same process: an abandoned selector's log is taken over
        older.close()
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise PulseInputError(f"{path} is in use by {holder(path)}; wait for it to finish (or stop it) before "
                                  "running on the same log") from None
    if info.st_nlink > 1:
        os.close(fd)
        raise PulseInputError(f"{path}: the log has {info.st_nlink} names (hard links); SQLite keeps its journal "
                              "beside the name in use, so a log must have one name: remove the other links")
    return fd, key


def holder(path: Path) -> str:
    """'process PID on HOST (since ...)' as the holder wrote it, read without disturbing it."""
    try:
        conn = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True, timeout=2)
        try:
            row = conn.execute("SELECT pid, host, since FROM holder WHERE id = 1").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        row = None
    return f"process {row[0]} on {row[1]} (since {row[2]})" if row else "another process"


def finished_mark(path) -> dict | None:
    """The mark `pulse_jax.live.ledger.Ledger.mark_finished` left in the log at ``path``, read without taking the log (None if none)."""
    try:
        conn = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True, timeout=2)
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'finished'").fetchone()
        finally:
            conn.close()
        return json.loads(row[0]) if row else None
    except (sqlite3.Error, ValueError):
        return None
