"""Loading score matrices from CSV and NPZ, with errors that say where.

CSV schema: a header ``model,<example id>,...``; the first column is the model
name; every cell is 0/1 or a number in [0, 1]; an empty cell (or NaN) is
missing. Columns named ``created_date`` or ``sha`` are metadata, kept aside.

NPZ schema: ``scores`` (m x n float, NaN = missing), optional ``models`` and
``examples`` (string arrays).
"""
from __future__ import annotations

import csv
import dataclasses
import datetime as _dt
import math
import zipfile
from pathlib import Path

import numpy as np

from pulse_jax.errors import PulseInputError, note, require

METADATA_COLUMNS = ("created_date", "sha")


@dataclasses.dataclass(frozen=True)
class ScoreMatrix:
    """Scores with their model and example names (NaN = missing)."""

    scores: np.ndarray
    models: tuple[str, ...]
    examples: tuple[str, ...]
    source: str = "<memory>"
    metadata: dict = dataclasses.field(default_factory=dict)  # column -> tuple of values per model

    @property
    def shape(self):
        return self.scores.shape

    def require_complete(self) -> None:
        """Raise naming the first missing cell, if any."""
        missing = np.argwhere(np.isnan(self.scores))
        if len(missing):
            r, c = missing[0]
            raise PulseInputError(
                f"{self.source}: model {self.models[r]!r} (row {r + 1}) has no score for example "
                f"{self.examples[c]!r} (column {c + 1}); candidate scores must be fully observed "
                f"({len(missing)} missing cells)")


def _parse_cell(text: str, source: str, line: int, column: str) -> float:
    text = text.strip()
    if text == "" or text.lower() in ("nan", "na"):
        return math.nan
    try:
        if "_" in text:   # float() takes "0_1" as 1; a score never has digit separators
            raise ValueError(text)
        value = float(text)
    except ValueError:
        raise PulseInputError(f"{source}: line {line}, column {column!r}: {text!r} is not a number") from None
    if not math.isfinite(value) and not math.isnan(value):
        raise PulseInputError(f"{source}: line {line}, column {column!r}: score {text!r} is not finite")
    if not 0.0 <= value <= 1.0:
        raise PulseInputError(f"{source}: line {line}, column {column!r}: score {value} is outside [0, 1]")
    return value


def _check_date(text: str, source: str, line: int) -> str:
    try:
        _dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise PulseInputError(
            f"{source}: line {line}, column 'created_date': {text!r} is not a date (use ISO 8601, e.g. 2024-05-01)"
        ) from None
    return text.strip()


#: First header cells that mean the file has one row per example (it is transposed).
_EXAMPLE_HEADERS = ("example", "examples", "example_id", "doc_id", "doc", "id", "question", "item", "prompt")
_LAYOUT = "pulse-jax reads one row per model: a header 'model,<example id>,<example id>,...' then 'name,score,...'"


def _looks_numeric(cells) -> bool:
    try:
        return all(0.0 <= float(c) <= 1.0 for c in cells if c)
    except ValueError:
        return False


def _layout_hint(names: list[str]) -> str:
    """What the file looks like, when a duplicate name suggests it is laid out otherwise."""
    if _looks_numeric(names):
        return f"; its first line looks like scores, not a header row ({_LAYOUT})"
    return f"; is the file transposed, or missing its header row? ({_LAYOUT})"


#: Column names of a long table's example and score columns (one row per model, example and score).
_LONG_EXAMPLE = _EXAMPLE_HEADERS + ("sample", "sample_id", "example_idx")
_LONG_SCORE = ("score", "scores", "correct", "acc", "accuracy", "value", "result", "label")


def _check_not_long(names: list[str], source: str) -> None:
    """Refuse a long table (``model,example,score``) where a matrix is read, naming the command that
    converts it: read as a matrix, each model would appear on many lines."""
    rest = [n.lower() for n in names[1:]]
    if len(rest) <= 4 and any(n in _LONG_EXAMPLE for n in rest) and any(n in _LONG_SCORE for n in rest):
        example = next(n for n in names[1:] if n.lower() in _LONG_EXAMPLE)
        score = next(n for n in names[1:] if n.lower() in _LONG_SCORE)
        raise PulseInputError(
            f"{source}: a long table (columns {', '.join(names)}: one row per model, example and score), where a "
            f"score matrix is read ({_LAYOUT}); convert it first: pulse-jax import long {source} --out matrix.csv"
            + (f" --model-column {names[0]}" if names[0] != "model" else "")
            + (f" --example-column {example}" if example != "example" else "")
            + (f" --score-column {score}" if score != "score" else ""))


def _check_orientation(names: list[str], source: str) -> None:
    """Refuse a file whose header says it has one row per example (it would read as nonsense)."""
    _check_not_long(names, source)
    first = names[0].lower().lstrip("#")
    if first in _EXAMPLE_HEADERS:
        raise PulseInputError(f"{source}: the first column is named {names[0]!r}, so the file has one row per example; "
                              f"{_LAYOUT}. Transpose it (e.g. pandas: df.set_index({names[0]!r}).T)")


def load_csv(path) -> ScoreMatrix:
    """Read a CSV score matrix (see module docstring)."""
    path = Path(path)
    source = str(path)
    require(path.is_file(), f"{source}: no such file" + (" (it is a directory)" if path.is_dir() else ""))
    try:
        return _read_csv(path, source)
    except UnicodeDecodeError as err:
        line = path.read_bytes()[:err.start].count(b"\n") + 1
        raise PulseInputError(f"{source}: line {line} is not UTF-8 text (byte {err.start}); save the file as "
                              "UTF-8") from None
    except OSError as err:
        raise PulseInputError(f"{source}: cannot read: {err.strerror}") from None
    except csv.Error as err:      # e.g. a field longer than the csv module's limit, a NUL byte
        raise PulseInputError(f"{source}: not a readable CSV score matrix: {err}") from None


def _read_csv(path: Path, source: str) -> ScoreMatrix:
    with open(path, newline="", encoding="utf-8-sig") as handle:   # a byte-order mark is not part of a name
        reader = csv.reader(handle)
        try:
            header = next(reader)
        except StopIteration:
            raise PulseInputError(f"{source}: the file is empty") from None
        require(len(header) >= 2, f"{source}: header must be 'model,<example id>,...' (found {len(header)} column)")
        names = [h.strip() for h in header]
        _check_orientation(names, source)
        if names[0].lower() != "model":   # read as the model names all the same, but not without a word
            note(f"{source}: the first column is named {names[0]!r}; it is read as the model names (the "
                 "schema's header is 'model,<example id>,...')")
        meta_idx = [k for k, h in enumerate(names) if k > 0 and h in METADATA_COLUMNS]
        ex_idx = [k for k in range(1, len(names)) if k not in meta_idx]
        require(ex_idx, f"{source}: no example columns in the header")
        examples = [names[k] for k in ex_idx]
        blank = [k + 1 for k in ex_idx if not names[k]]
        require(not blank, f"{source}: header column {blank[0] if blank else 0} has no example id")
        seen: dict[str, int] = {}
        for k, e in zip(ex_idx, examples):
            require(e not in seen, f"{source}: example column {e!r} appears twice (columns {seen.get(e, 0) + 1} "
                                   f"and {k + 1}){_layout_hint(names)}")
            seen[e] = k
        models, rows, meta = [], [], {names[k]: [] for k in meta_idx}
        model_line: dict[str, int] = {}
        for line, record in enumerate(reader, start=2):
            if not record or all(not c.strip() for c in record):
                continue
            require(len(record) == len(header),
                    f"{source}: line {line} has {len(record)} fields but the header has {len(header)}")
            model = record[0].strip()
            require(model, f"{source}: line {line}: empty model name")
            require(model not in model_line,
                    f"{source}: model {model!r} appears twice (lines {model_line.get(model)} and {line}){_layout_hint(names)}")
            model_line[model] = line
            models.append(model)
            rows.append([_parse_cell(record[k], source, line, names[k]) for k in ex_idx])
            for k in meta_idx:
                value = record[k]
                meta[names[k]].append(_check_date(value, source, line) if names[k] == "created_date" else value)
    require(rows, f"{source}: no model rows")
    _check_not_transposed(models, examples, source)
    scores = np.asarray(rows, dtype=np.float64)
    return ScoreMatrix(scores, tuple(models), tuple(examples), source, {k: tuple(v) for k, v in meta.items()})


def _is_integer(text: str) -> bool:
    return text.strip().lstrip("-").isdigit()


def _check_not_transposed(models: list, examples: list, source: str) -> None:
    """Refuse a matrix whose rows are named like example ids (every one an integer) and whose columns like
    models (some not an integer), with more rows than columns: a transposed file, which would otherwise
    run as many 'models' on few 'examples'."""
    if len(models) > len(examples) and all(map(_is_integer, models)) and not all(map(_is_integer, examples)):
        named = next(e for e in examples if not _is_integer(e))
        raise PulseInputError(f"{source}: looks transposed: its {len(models):,} rows are named like example ids "
                              f"({', '.join(models[:3])}, ...) and its {len(examples):,} columns like models "
                              f"({named!r}); {_LAYOUT}. Transpose it (e.g. pandas: df.set_index('model').T)")


def _check_npz_members(path: Path, source: str) -> None:
    """Each ``.npy`` member's header is read first: one that claims more bytes than the member holds (a
    damaged or crafted file, which NumPy would try to allocate in full) is refused in one line."""
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if not info.filename.endswith(".npy"):
                    continue
                with archive.open(info) as member:
                    version = np.lib.format.read_magic(member)
                    read = np.lib.format.read_array_header_1_0 if version[0] == 1 else \
                        np.lib.format.read_array_header_2_0
                    shape, _, dtype = read(member)
                    header = member.tell()
                claimed = int(np.prod(shape, dtype=object)) * (dtype.itemsize if not dtype.hasobject else 1)
                require(claimed <= info.file_size - header,
                        f"{source}: member {info.filename!r} claims shape {tuple(shape)} ({claimed:,} bytes) but holds "
                        f"{info.file_size - header:,}; the file is damaged")
    except PulseInputError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return      # np.load below says what is wrong, in one line


def load_npz(path) -> ScoreMatrix:
    """Read an NPZ score matrix (see module docstring)."""
    path = Path(path)
    source = str(path)
    require(path.is_file(), f"{source}: no such file" + (" (it is a directory)" if path.is_dir() else ""))
    require(zipfile.is_zipfile(path), f"{source}: not a readable .npz score matrix: not a zip archive (a single .npy "
                                      "array, or another file, named .npz?); save the matrix with numpy.savez(path, "
                                      "scores=..., models=..., examples=...)")
    _check_npz_members(path, source)
    try:
        with np.load(path, allow_pickle=False) as data:
            require("scores" in data.files, f"{source}: no array named 'scores' (found {', '.join(data.files)})")
            raw = data["scores"]
            require(raw.dtype.kind in "biuf", f"{source}: 'scores' must hold real numbers, got dtype {raw.dtype}")
            scores = np.asarray(raw, dtype=np.float64)
            require(scores.ndim == 2, f"{source}: 'scores' must be 2-D, got shape {scores.shape}")
            m, n = scores.shape
            for name in ("models", "examples"):
                if name in data.files:
                    shape = data[name].shape
                    require(len(shape) == 1, f"{source}: {name!r} must be a 1-D array of names, got shape {shape}")
            models = tuple(str(x) for x in data["models"]) if "models" in data.files else tuple(
                f"model-{i}" for i in range(m))
            examples = tuple(str(x) for x in data["examples"]) if "examples" in data.files else tuple(
                str(j) for j in range(n))
    except PulseInputError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:   # not a zip, truncated, pickled, unreadable
        why = getattr(err, "strerror", None) or (str(err).splitlines() or [type(err).__name__])[0]
        raise PulseInputError(f"{source}: not a readable .npz score matrix: {why}") from None
    except MemoryError:
        raise PulseInputError(f"{source}: the score matrix does not fit in memory") from None
    require(len(models) == m, f"{source}: 'models' has {len(models)} names for {m} rows")
    require(len(examples) == n, f"{source}: 'examples' has {len(examples)} names for {n} columns")
    for kind, names in (("model", models), ("example", examples)):
        if len(set(names)) < len(names):
            dup = next(x for k, x in enumerate(names) if x in names[:k])
            raise PulseInputError(f"{source}: {kind} name {dup!r} appears twice")
    require(not np.isinf(scores).any(), f"{source}: 'scores' contains infinite values")
    bad = np.argwhere(~np.isnan(scores) & ((scores < 0) | (scores > 1)))
    if len(bad):
        r, c = bad[0]
        raise PulseInputError(f"{source}: row {r + 1} ({models[r]!r}), column {c + 1} ({examples[c]!r}): "
                              f"score {scores[r, c]} is outside [0, 1]")
    return ScoreMatrix(scores, models, examples, source)


def load(path) -> ScoreMatrix:
    """Load a ``.csv`` or ``.npz`` score matrix."""
    suffix = Path(path).suffix.lower()
    if suffix == ".csv":
        return load_csv(path)
    if suffix == ".npz":
        return load_npz(path)
    raise PulseInputError(f"{path}: unknown file type {suffix!r}; use .csv or .npz")


def save_csv(matrix: ScoreMatrix, path) -> None:
    """Write a score matrix in the CSV schema (missing cells empty)."""
    from pulse_jax.fileio.files import atomic_open

    with atomic_open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        meta_cols = list(matrix.metadata)
        writer.writerow(["model", *meta_cols, *matrix.examples])
        for i, model in enumerate(matrix.models):
            cells = ["" if math.isnan(x) else f"{x:g}" for x in matrix.scores[i]]
            writer.writerow([model, *(matrix.metadata[c][i] for c in meta_cols), *cells])


MISSING_POLICIES = ("keep", "drop-examples", "drop-models")


def handle_missing(matrix: ScoreMatrix, policy: str = "keep") -> ScoreMatrix:
    """Missing candidate cells (NaN): ``"keep"`` (default; each model's benchmark is the examples it
    has a score for), ``"drop-examples"`` (keep the examples every model has) or ``"drop-models"``
    (keep the models that have every example). One-line errors when too little is left."""
    require(policy in MISSING_POLICIES, f"--missing must be one of {', '.join(MISSING_POLICIES)}, got {policy!r}")
    missing = np.isnan(matrix.scores)
    if policy == "keep" or not missing.any():
        empty = np.flatnonzero(missing.all(axis=1))
        require(len(empty) == 0, f"{matrix.source}: model {matrix.models[empty[0]] if len(empty) else ''!r} has no "
                                 "scores at all")
        return matrix
    if policy == "drop-examples":
        keep = ~missing.any(axis=0)
        require(keep.any(), f"{matrix.source}: no example is scored by every model; use --missing keep")
        return dataclasses.replace(matrix, scores=matrix.scores[:, keep],
                                   examples=tuple(e for e, k in zip(matrix.examples, keep) if k))
    keep = ~missing.any(axis=1)
    require(keep.sum() >= 2, f"{matrix.source}: only {keep.sum()} model(s) have every example; use --missing keep")
    return dataclasses.replace(matrix, scores=matrix.scores[keep], models=tuple(m for m, k in zip(matrix.models, keep) if k),
                               metadata={c: tuple(v for v, k in zip(vals, keep) if k) for c, vals in matrix.metadata.items()})


def check_history(train: ScoreMatrix) -> None:
    """A history (train split) has at least two models, each with at least one score."""
    require(len(train.models) >= 2, f"{train.source}: a history needs at least 2 models to fit embeddings on; it has "
                                    f"{len(train.models)}")
    empty = [m for m, row in zip(train.models, np.asarray(train.scores)) if np.isnan(row).all()]
    require(not empty, f"{train.source}: model {empty[0] if empty else ''!r} has no score at all; drop its row "
                       f"({len(empty)} such row{'s' if len(empty) > 1 else ''})")


def align_train(candidates: ScoreMatrix, train: ScoreMatrix) -> ScoreMatrix:
    """Check that ``train`` has exactly the candidates' examples and is a usable history
    (`check_history`); reorder its columns to match."""
    check_history(train)
    cand, tr = set(candidates.examples), set(train.examples)
    if cand != tr:
        only_c = sorted(cand - tr)[:3]
        only_t = sorted(tr - cand)[:3]
        raise PulseInputError(
            f"{train.source}: train examples differ from the candidates' ({candidates.source}): "
            f"{len(cand - tr)} only in candidates (e.g. {only_c}), {len(tr - cand)} only in train (e.g. {only_t})")
    position = {e: k for k, e in enumerate(train.examples)}
    order = [position[e] for e in candidates.examples]
    aligned = dataclasses.replace(train, scores=train.scores[:, order], examples=candidates.examples)
    _say_leak(candidates, aligned)
    return aligned


def _say_leak(candidates: ScoreMatrix, train: ScoreMatrix) -> None:
    """One note when the history holds candidates themselves (by name, or rows equal to a candidate's
    scores): their scores in the side information are the answers being estimated, so a simulation on
    them flatters PULSE (the predictions know the cells). Names a file did not give (``model-0``, ...)
    are not compared; rows are, where they are not constant."""
    def given(names):
        return names != tuple(f"model-{i}" for i in range(len(names)))

    shared = [m for m in candidates.models if m in set(train.models)] \
        if given(candidates.models) and given(train.models) else []
    rows = {np.nan_to_num(row, nan=-1.0).tobytes() for row in np.asarray(train.scores, np.float64)}
    same = [m for m, row in zip(candidates.models, np.asarray(candidates.scores, np.float64))
            if np.nanmin(row) != np.nanmax(row) and np.nan_to_num(row, nan=-1.0).tobytes() in rows]
    if not shared and not same:
        return
    named = shared or same
    names = ", ".join(named[:3]) + (f" and {len(named) - 3} more" if len(named) > 3 else "")
    held = f"{len(shared)} of the candidates ({names})" if shared else f"the scores of {len(same)} candidates ({names})"
    note(f"{train.source}: the history holds {held}"
         + (f", {len(same)} with exactly the candidates' scores" if shared and same else "")
         + ": their cells are what the selection estimates, so predictions fitted on them leak the answer and "
           "flatter PULSE; give the scores of other (earlier) models as the history")


# ----------------------------------------------------------------------------- splits and subsets


SPLITS = ("auto", "random", "stratified")


def split_models(matrix: ScoreMatrix, seed: int = 0, train_fraction: float = 0.5, how: str = "auto"):
    """Split models into a train split (side information) and candidates.

    ``how``: ``"auto"`` (default) splits chronologically by ``created_date`` when the matrix has it
    (the older ``train_fraction`` is train, as in the paper), otherwise at random with ``seed``;
    ``"random"`` always at random; ``"stratified"`` by mean score: the models ranked by mean are
    dealt alternately (for ``train_fraction = 1/2``: ranks 1, 3, 5, ... to the candidates, 2, 4, 6,
    ... to train), so neither split takes all the strong models and the candidates keep a
    realistic top of the field. Returns ``(train, candidates, info)``; ``info`` records the choice
    and the candidates' top-2 gap (best minus second-best mean), which says how hard the selection is.
    """
    m = len(matrix.models)
    require(m >= 3, f"{matrix.source}: need at least 3 models to split into train and candidates, found {m}")
    require(0 < train_fraction < 1, f"train_fraction must be in (0, 1), got {train_fraction}")
    require(how in SPLITS, f"split must be one of {', '.join(SPLITS)}, got {how!r}")
    n_train = min(m - 2, max(1, int(round(train_fraction * m))))
    dates = matrix.metadata.get("created_date")
    if how == "auto" and dates is not None:
        keys = [_dt.datetime.fromisoformat(d.replace("Z", "+00:00")).replace(tzinfo=None) for d in dates]
        order = sorted(range(m), key=lambda i: (keys[i], matrix.models[i]))
        info = {"split": "chronological", "by": "created_date", "train_until": str(dates[order[n_train - 1]])}
    elif how == "stratified":
        ranked = np.argsort(-np.nanmean(matrix.scores, axis=1), kind="stable")
        to_train = [k for k in range(m) if int((k + 1) * n_train / m) > int(k * n_train / m)]
        order = [int(ranked[k]) for k in to_train] + [int(ranked[k]) for k in range(m) if k not in set(to_train)]
        info = {"split": "stratified", "by": "mean score"}
    else:
        order = list(np.random.default_rng(seed).permutation(m))
        info = {"split": "random", "seed": int(seed)}
    train_rows, cand_rows = sorted(order[:n_train]), sorted(order[n_train:])
    means = np.sort(np.nanmean(matrix.scores[cand_rows], axis=1))[::-1]
    info.update(n_train=len(train_rows), n_candidates=len(cand_rows),
                train_models=[matrix.models[i] for i in train_rows],
                candidates_top2_gap=float(means[0] - means[1]))

    return (subset_rows(matrix, train_rows, f"{matrix.source} [train]"),
            subset_rows(matrix, cand_rows, f"{matrix.source} [candidates]"), info)


def top2_subset(means: np.ndarray, size: int, gap: float) -> np.ndarray:
    """Indices of a difficulty subset (paper, Section 5).

    The best model, then the model whose gap to it is closest to ``gap``, then
    the next ``size - 2`` models below that one in descending order of mean.
    Raises if the matrix cannot provide it.
    """
    means = np.asarray(means, dtype=np.float64)
    require(size >= 2, f"subset size must be >= 2, got {size}")
    require(len(means) >= size, f"cannot take a subset of {size} models from {len(means)}")
    order = np.argsort(-means, kind="stable")
    best = order[0]
    gaps = means[best] - means[order[1:]]
    second_pos = 1 + int(np.argmin(np.abs(gaps - gap)))
    rest = order[second_pos + 1: second_pos + 1 + size - 2]
    require(len(rest) == size - 2,
            f"only {len(order) - second_pos - 1} models rank below the one whose gap to the best is closest "
            f"to {gap} (gap {gaps[second_pos - 1]:.4f}); a subset of {size} needs {size - 2}")
    return np.concatenate([[best, order[second_pos]], rest]).astype(np.int64)



def subset_rows(matrix: ScoreMatrix, rows, source: str | None = None) -> ScoreMatrix:
    """The models ``rows`` of ``matrix``, names and metadata kept."""
    rows = [int(i) for i in rows]
    meta = {k: tuple(v[i] for i in rows) for k, v in matrix.metadata.items()}
    return ScoreMatrix(matrix.scores[rows], tuple(matrix.models[i] for i in rows), matrix.examples,
                       source or matrix.source, meta)


# ----------------------------------------------------------------------------- paper-scale factor files


def load_factors(path):
    """Read a factor file: arrays ``U`` (models x r) and ``V`` (examples x r), ``P = sigmoid(U V^T)``."""
    path = Path(path)
    source = str(path)
    require(path.is_file(), f"{source}: no such file")
    try:
        with np.load(path, allow_pickle=False) as f:
            require(hasattr(f, "files"), f"{source}: a single array, not a factor file (.npz with 'U' and 'V')")
            missing = [k for k in ("U", "V") if k not in f.files]
            require(not missing, f"{source}: factor file needs arrays 'U' and 'V'; missing {missing} "
                                 f"(found {', '.join(f.files)})")
            U, V = np.asarray(f["U"], np.float32), np.asarray(f["V"], np.float32)
    except PulseInputError:
        raise
    except (OSError, ValueError, TypeError, EOFError, zipfile.BadZipFile) as err:
        why = getattr(err, "strerror", None) or (str(err).splitlines() or [type(err).__name__])[0]
        raise PulseInputError(f"{source}: not a readable factor file: {why}") from None
    require(U.ndim == 2 and V.ndim == 2, f"{source}: 'U' and 'V' must be 2-D, got shapes {U.shape} and {V.shape}")
    require(U.shape[1] == V.shape[1], f"{source}: 'U' {U.shape} and 'V' {V.shape} must have the same rank "
                                      "(number of columns)")
    require(U.shape[0] >= 4, f"{source}: 'U' has {U.shape[0]} rows; need at least 4 models")
    require(np.isfinite(U).all() and np.isfinite(V).all(), f"{source}: 'U' or 'V' contains NaN or inf")
    return U, V


def paper_scale_problem(path, seed: int = 0, n_candidates: int = 1000, delta_top2: float | None = None,
                        chunk: int = 256):
    """Score matrices at the paper's scale from a factor file (see ``shared/data/README.md``).

    The rows of ``U`` are split at random (``seed``) into a train half and a
    candidate half; every cell is a Bernoulli draw from ``sigmoid(u_i . v_j)``.
    With ``delta_top2`` the candidates are the paper's difficulty subset of
    ``n_candidates`` models (the best, the one whose gap is closest to
    ``delta_top2``, then the next best); otherwise the first ``n_candidates``
    of the candidate half. Returns ``(train, candidates, info)`` as ScoreMatrix.
    """
    U, V = load_factors(path)
    rng = np.random.default_rng(seed)
    order = rng.permutation(U.shape[0])
    half = U.shape[0] // 2
    train_rows, cand_rows = np.sort(order[:half]), np.sort(order[half:])

    def draw(rows):
        out = np.empty((len(rows), V.shape[0]), np.float32)
        for start in range(0, len(rows), chunk):   # bounded memory: chunk x n probabilities at a time
            block = rows[start:start + chunk]
            p = 1.0 / (1.0 + np.exp(-(U[block] @ V.T)))
            out[start:start + len(block)] = rng.random(p.shape) < p
        return out

    train, pool = draw(train_rows), draw(cand_rows)
    if delta_top2 is None:
        require(n_candidates <= len(cand_rows), f"n_candidates={n_candidates} but the candidate half has "
                                                f"{len(cand_rows)} models")
        picked = np.arange(n_candidates)
    else:
        picked = top2_subset(pool.mean(axis=1), n_candidates, delta_top2)
    examples = tuple(str(j) for j in range(V.shape[0]))
    name = Path(path).name
    info = {"factors": name, "seed": int(seed), "split": "random halves of U's rows", "n_train": len(train_rows),
            "candidate_pool": len(cand_rows), "delta_top2": delta_top2}
    if delta_top2 is not None:
        means = pool[picked].mean(axis=1)
        info["realized_top2_gap"] = float(np.sort(means)[-1] - np.sort(means)[-2])
    return (ScoreMatrix(train, tuple(f"train-{i}" for i in train_rows), examples, f"{name} [train]"),
            ScoreMatrix(pool[picked], tuple(f"model-{cand_rows[i]}" for i in picked), examples, f"{name} [candidates]"),
            info)
