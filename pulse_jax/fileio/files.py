"""Writing output files so that they touch only their own names.

Every file pulse-jax writes goes through a fresh temporary file in the same
folder, created exclusively, then renamed over its name: a reader never sees
a half-written file, a failed write leaves the old file as it was, and a
symbolic link planted at the name is replaced, never written through. Only a
regular file (or a link) is ever replaced: a device, FIFO, socket or folder at
the name is refused in one line, ``--force`` or not (`check_replaceable`), since
a rename over ``/dev/null`` would leave a regular file there for the whole
machine. The new file gets the permissions of any file the user creates
(``0666`` less the umask), not the temporary file's ``0600``. A
results folder's ``provenance.json`` lists the files pulse-jax wrote there
(``files``); ``--force`` removes those and nothing else
(`remove_previous_outputs`).
"""
from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from pathlib import Path

#: The provenance file whose ``files`` list names a folder's own outputs.
PROVENANCE = "provenance.json"


def exists(path) -> bool:
    """Whether anything is at ``path``, a dangling symbolic link included (it would be written through)."""
    return os.path.lexists(path)


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


def kind_of(path) -> str | None:
    """What is at ``path`` when it is not a regular file or a symbolic link ("a character device", ...);
    None for a regular file, a link or nothing."""
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    return next((name for test, name in _KINDS if test(mode)), None)


def free_name(path) -> Path:
    """``path`` if nothing is there, else the first of ``<path>.2``, ``<path>.3``, ... that is free."""
    path, k = Path(path), 1
    candidate = path
    while exists(candidate):
        k += 1
        candidate = path.with_name(f"{path.name}.{k}")
    return candidate


def check_replaceable(path, name: str = "") -> None:
    """Refuse, in one line, to write ``path`` when something other than a regular file or a link is there.

    Replacing ``/dev/null`` or a FIFO with a regular file would change the machine for every other
    program, so ``--force`` does not allow it either. ``name``: the option the path came from."""
    from pulse_jax.errors import PulseInputError

    kind = kind_of(path)
    if kind is not None:
        where = f"{name} {path}" if name else str(path)
        raise PulseInputError(f"{where}: is {kind}, not a regular file; pulse-jax writes only regular files "
                              "(with or without --force): give the path of a file")


def new_file_mode() -> int:
    """The permissions a file the user creates gets: ``0666`` less the process's umask."""
    return 0o666 & ~_umask()


def _umask() -> int:
    """The process's umask, read without changing it where Linux says it (``/proc/self/status``)."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for text in handle:
                if text.startswith("Umask:"):
                    return int(text.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)   # elsewhere: the only portable way to read it is to set it and put it back
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_open(path, mode: str = "w", **kwargs):
    """A handle to a temporary file that becomes ``path`` when the block ends without an error.

    Refused (`check_replaceable`) when a device, FIFO, socket or folder is at ``path``, before anything
    is written and again just before the rename."""
    path = Path(path)
    check_replaceable(path)
    fd, partial = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        os.fchmod(fd, new_file_mode())
        with open(fd, mode, **kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        check_replaceable(path)
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise


def write_atomically(path, data) -> Path:
    """Write ``data`` (text or bytes) to ``path`` through a temporary file and a rename."""
    text = isinstance(data, str)
    with atomic_open(path, "w" if text else "wb", **({"encoding": "utf-8"} if text else {})) as handle:
        handle.write(data)
    return Path(path)


#: The most a fixed-name record the project reads back (report.json, provenance.json) may hold.
_RECORD_LIMIT = 64 * 2**20


def read_regular(path, limit: int | None = None) -> bytes | None:
    """The bytes of the file at ``path``, read only if it is a regular file (a FIFO or a device under a
    name the project reads back would block the read or never end) of at most ``limit`` bytes; None when
    absent, not a regular file, too large or unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or (limit is not None and info.st_size > limit):
            return None
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read()
    except OSError:
        return None
    finally:
        os.close(fd)


def read_record(path) -> str | None:
    """The text of a record pulse-jax wrote earlier at a fixed name (`read_regular`), or None."""
    raw = read_regular(path, _RECORD_LIMIT)
    try:
        return None if raw is None else raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def remove_previous_outputs(folder) -> list[str]:
    """Remove the files an earlier pulse-jax run wrote into ``folder``, as its ``provenance.json`` lists
    them (``files``; a pulse-jax provenance without the list, from an earlier version: the fixed names it
    implies; another tool's ``provenance.json``: nothing). Nothing else is removed, and nothing outside
    the folder. Returns the names removed."""
    folder = Path(folder)
    try:
        record = json.loads(read_record(folder / PROVENANCE) or "null")
    except ValueError:
        return []
    if not isinstance(record, dict):
        return []
    names = record.get("files")
    if not isinstance(names, list):
        versions = record.get("versions")
        if not (isinstance(versions, dict) and "pulse-jax" in versions):   # not written by pulse-jax
            return []
        methods = record.get("method")
        methods = methods if isinstance(methods, list) else [methods] if isinstance(methods, str) else []
        names = [f"{m}.npz" for m in methods if isinstance(m, str)] + [
            "summary.json", "accuracy.png", "sweep.json", "sweep.csv", "sweep.png", "report.md", "report.json",
            "estimates.png", PROVENANCE]
    removed = []
    for name in names:
        if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
            continue
        target = folder / name
        if exists(target) and not target.is_dir():
            target.unlink()
            removed.append(name)
    return removed


def check_out_dir(path, force: bool = False, name: str = "--out", force_name: str = "--force") -> None:
    """Before any computation: the results directory is a directory (or does not exist yet), and an
    existing one is empty unless ``force`` allows replacing its results. Nothing is removed here: the
    writer removes the files its folder's ``provenance.json`` lists, and only those, when the results are
    ready (`remove_previous_outputs`). ``name`` / ``force_name``: the choices as the caller spells them."""
    from pulse_jax.errors import require

    out = Path(path)
    require(not (out.is_symlink() and not out.exists()),
            f"{name} {out}: a symbolic link to nothing; remove it or give another folder")
    require(not out.exists() or out.is_dir(), f"{name} {out}: exists and is not a directory")
    if not out.is_dir():
        return
    entries = sorted(p.name for p in out.iterdir())
    shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
    require(not entries or force, f"{name} {out}: already holds {len(entries)} file(s) ({shown}); pass {force_name} "
                                  "to replace the results pulse-jax wrote there, or give another folder")
