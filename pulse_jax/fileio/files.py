"""Writing output files so that they touch only their own names.

Every file pulse-jax writes goes through a fresh temporary file in the same
folder, created exclusively, then renamed over its name: a reader never sees
a half-written file, a failed write leaves the old file as it was, and a
symbolic link planted at the name is replaced, never written through. A
results folder's ``provenance.json`` lists the files pulse-jax wrote there
(``files``); ``--force`` removes those and nothing else
(`remove_previous_outputs`).
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

#: The provenance file whose ``files`` list names a folder's own outputs.
PROVENANCE = "provenance.json"


def exists(path) -> bool:
    """Whether anything is at ``path``, a dangling symbolic link included (it would be written through)."""
    return os.path.lexists(path)


@contextlib.contextmanager
def atomic_open(path, mode: str = "w", **kwargs):
    """A handle to a temporary file that becomes ``path`` when the block ends without an error."""
    path = Path(path)
    fd, partial = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with open(fd, mode, **kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
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


def remove_previous_outputs(folder) -> list[str]:
    """Remove the files an earlier pulse-jax run wrote into ``folder``, as its ``provenance.json`` lists
    them (``files``; a pulse-jax provenance without the list, from an earlier version: the fixed names it
    implies; another tool's ``provenance.json``: nothing). Nothing else is removed, and nothing outside
    the folder. Returns the names removed."""
    folder = Path(folder)
    try:
        record = json.loads((folder / PROVENANCE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
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
