"""Where a results folder came from: ``provenance.json`` beside every result.

It records what is needed to reproduce or audit a result: the input files (path,
size and SHA-256), the package, Python, JAX, jaxlib, optax and NumPy versions, the
backend and devices, the full static configuration (plug-ins by name and settings)
and traced parameters, the seed, the command line and the time it was written.
"""
from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import platform
import shlex
import sys
from pathlib import Path

import numpy as np

from pulse_jax.fileio.jsonable import plain_value

FILE_NAME = "provenance.json"


def file_record(path) -> dict:
    """``{"path", "bytes", "sha256"}`` of an input file (read in 1 MiB blocks)."""
    path = Path(path).resolve()
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return {"path": str(path), "bytes": path.stat().st_size, "sha256": digest.hexdigest()}


def _versions() -> dict:
    from importlib import metadata

    found = {"python": platform.python_version()}
    for name in ("pulse-jax", "jax", "jaxlib", "optax", "chex", "numpy"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def _plain(value):
    """A config field as JSON: numbers and strings as they are, a plug-in as its name and settings."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "name"):
        return {"name": value.name, "settings": {k: plain_value(v) for k, v in dict(getattr(value, "settings", ())).items()}}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return repr(value)


def describe_config(config) -> dict:
    """Every field of a `pulse_jax.BanditConfig`, plug-ins by name and settings."""
    return {f.name: _plain(getattr(config, f.name)) for f in dataclasses.fields(config)}


def hash_inputs(*paths) -> list[dict]:
    """`file_record` of each given input, taken when the inputs are read (a file changed while the
    run goes on is recorded as it was read, not as it is at the end). ``collect(inputs=...)`` takes these."""
    return [file_record(p) for p in paths if p and Path(p).is_file()]


def describe_plugins(plugins) -> dict:
    """A `pulse_jax.Plugins` as ``{"estimator", "rule", "stop"}``, each by name and settings."""
    return {kind: _plain(plugin) for kind, plugin in zip(("estimator", "rule", "stop"), plugins)}


def collect(*, config=None, plugins=None, params=None, seed=None, inputs=(), method=None,
            extra: dict | None = None) -> dict:
    """The provenance record of one results folder (see the module docstring); ``method`` defaults to
    the name of ``plugins``' estimator."""
    import jax

    record = {
        "written": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(sys.argv),
        "versions": _versions(),
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "inputs": [p if isinstance(p, dict) else file_record(p) for p in inputs if p],
        "method": method if method is not None or plugins is None else plugins.estimator.name,
        "seed": seed,
        "config": describe_config(config) if config is not None else None,
        "plugins": describe_plugins(plugins) if plugins is not None else None,
        "params": params.to_dict() if params is not None else None,
    }
    record.update(extra or {})
    return record


def write(out_dir, record: dict, files=()) -> Path:
    """Write ``record`` as ``<out_dir>/provenance.json`` (strict JSON, written atomically); ``files``: the
    names of the other files pulse-jax writes into ``out_dir`` with it (``--force`` removes only these)."""
    from pulse_jax.fileio.files import write_atomically

    path = Path(out_dir) / FILE_NAME
    record = {**record, "files": [*files, FILE_NAME]}
    return write_atomically(path, json.dumps(clean_json(record), indent=2))


def clean_json(x):
    """Make ``x`` strict JSON: NumPy scalars to Python, NaN/inf to null."""
    if isinstance(x, dict):
        return {str(k): clean_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean_json(v) for v in x]
    if isinstance(x, np.ndarray):
        return clean_json(x.tolist())
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if np.isfinite(x) else None
    return x
