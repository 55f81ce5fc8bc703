"""The example embeddings a live selection with predictions uses, and keeping them beside the log.

A log started with embeddings is resumed with exactly those (saved beside it as ``<log>.embeddings.npy``),
so a resumed run's predictions are the first run's; side information that contradicts them is refused.
"""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np

from pulse_jax.errors import PulseInputError, require
from pulse_jax.fileio import files
from pulse_jax.live import log_schema


def save_atomically(path: Path, array) -> None:
    """Write ``array`` to ``path`` through a new temporary file and a rename, so a failed write (a full
    disk) leaves no truncated ``.npy`` behind; a failure is one line naming the file and the fix. The
    temporary file is created exclusively under a fresh name, so a link planted beside the log is never
    written through."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with files.atomic_open(path, "wb") as handle:
            np.save(handle, array)
    except OSError as err:
        raise PulseInputError(f"{path}: cannot save the embeddings beside the log ({err.strerror or err}); free "
                              "space there or give --log in another folder, then run the same command again") from None



def saved_path(log) -> Path:
    """Where the embeddings of the log at ``log`` are kept: ``<log>.embeddings.npy`` beside it."""
    log = Path(log)
    return log.with_name(log.name + ".embeddings.npy")


def fingerprint_of(train) -> str | None:
    """The fingerprint of ``train``'s scores the log header records (None: no usable ``train``; refused where
    ``train`` is checked)."""
    if train is None:
        return None
    try:
        return log_schema.fingerprint(np.asarray(getattr(train, "scores", train), np.float32))
    except (TypeError, ValueError):
        return None


class Given(NamedTuple):
    """The side information a selector was given: historical scores (``train``) or embeddings (``V``), the
    rank to fit, and the seed of the fit."""

    train: object
    V: object
    rank: int
    seed: int


def embeddings(estimator, example_ids, given: Given, log_path: Path | None, resuming: bool):
    """The example embeddings of a live selection: zeros for a method without predictions; a resumed log's,
    saved beside it (``<log>.embeddings.npy``), refusing side information that contradicts them; else
    ``V``, or fitted on ``train`` (columns aligned by example id), then saved beside the log."""
    n, (train, V, rank, seed) = len(example_ids), given
    if not estimator.uses_predictions:
        return np.zeros((n, 1), np.float32)
    sidecar = None if log_path is None else saved_path(log_path)
    if sidecar is not None and sidecar.is_file() and resuming:
        return _saved(sidecar, n, V, rank, log_path)
    require(train is not None or V is not None,
            f"method {estimator.name!r} needs side information: pass train= (historical scores on "
            "the same examples) or V= (example embeddings)")
    if V is None:
        from pulse_jax.fileio.data import ScoreMatrix

        if isinstance(train, ScoreMatrix):
            position = {str(e): k for k, e in enumerate(train.examples)}
            missing = [e for e in example_ids if str(e) not in position]
            require(not missing, f"{train.source}: no column for examples {missing[:3]} "
                                 f"({len(missing)} missing)")
            train = train.scores[:, [position[str(e)] for e in example_ids]]
        train = np.asarray(train, np.float32)
        require(train.ndim == 2 and train.shape[1] == n,
                f"train must have one column per example ({n}), got shape {train.shape}")
        from pulse_jax.stats import factorization   # JAX, once the plan's checks are done

        V = factorization.fit_example_embeddings(train, rank=rank, seed=seed)
    V = np.asarray(V, np.float32)
    require(V.ndim == 2 and V.shape[0] == n and np.isfinite(V).all(),
            f"V must be a finite (n_examples={n}, rank) array, got shape {V.shape}")
    if sidecar is not None:
        save_atomically(sidecar, V)
    return V


def _saved(sidecar: Path, n: int, V, rank: int, log_path: Path):
    """A resumed log's embeddings, exactly those of its first run; settings that contradict them refused."""
    try:
        first = np.load(sidecar, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise PulseInputError(f"{sidecar}: cannot read the embeddings saved with the log: {err}") from None
    require(first.ndim != 2 or first.shape[0] == n,
            f"examples: this run has {n} examples, but {log_path} was started with "
            f"{first.shape[0]}; give the same examples (--examples) to resume, or a new log")
    require(first.ndim == 2 and np.isfinite(first).all(),
            f"{sidecar}: not the (n_examples={n}, rank) embeddings of this run")
    if V is not None:
        require(np.shape(V) == first.shape and np.allclose(np.asarray(V, np.float32), first),
                f"V differs from the embeddings {log_path} was started with ({sidecar})")
    elif rank != first.shape[1]:
        raise PulseInputError(f"rank {rank} differs from rank {first.shape[1]}, which {log_path} was "
                              f"started with ({sidecar}); use --rank {first.shape[1]} to resume")
    return first.astype(np.float32)
