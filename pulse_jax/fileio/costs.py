"""Cost files: what each model's cell costs, beside a score matrix.

Two layouts, both CSV:

* per model: a header ``model,cost`` and one row per model, ``gpt-4o,0.012``;
* per cell: a matrix like the scores' (header ``model,<example id>,...``), for answers whose cost
  differs by example (tokens); an empty cell is allowed only where the model has no score.

Every candidate must be priced, no unknown model may be, and each cost must be a number >= 0;
a wrong one is refused in one line naming the file, the line and the column.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from pulse_jax.errors import PulseInputError, require


#: The largest cost per cell read: a whole run's money (cells x cost, float32 in the engine) stays finite.
MAX_COST = 1e24


def _number(text: str, source: str, line: int, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise PulseInputError(f"{source}: line {line}, column {column}: {text!r} is not a number") from None
    require(math.isfinite(value) and value >= 0,
            f"{source}: line {line}, column {column}: a cost must be a finite number >= 0, got {text}")
    require(value <= MAX_COST, f"{source}: line {line}, column {column}: a cost of {text} is too large to add up "
                               f"(money over a run would overflow); rescale the costs to at most {MAX_COST:g}")
    return value


def _rows(path: Path, source: str) -> list[list[str]]:
    require(path.is_file(), f"{source}: no such file" + (" (it is a directory)" if path.is_dir() else ""))
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            rows = [row for row in csv.reader(handle)]
    except UnicodeDecodeError:
        raise PulseInputError(f"{source}: not UTF-8 text; save the file as UTF-8") from None
    except (OSError, csv.Error) as err:
        raise PulseInputError(f"{source}: cannot read: {err}") from None
    require(rows and len(rows[0]) >= 2, f"{source}: expected a header 'model,cost' (one cost per model) or "
                                        "'model,<example id>,...' (one per cell)")
    return rows


def _by_name(rows, models, source: str) -> dict[str, int]:
    """``model name -> line`` of the file's rows, refusing duplicates and models that are not candidates."""
    known, seen = set(models), {}
    for line, row in enumerate(rows[1:], start=2):
        if not row or not any(cell.strip() for cell in row):
            continue
        name = row[0].strip()
        require(name not in seen, f"{source}: line {line}: model {name!r} is priced twice (also line {seen.get(name)})")
        require(name in known, f"{source}: line {line}: {name!r} is not a candidate (candidates: "
                               f"{', '.join(list(models)[:5])}{', ...' if len(models) > 5 else ''})")
        seen[name] = line
    missing = [m for m in models if m not in seen]
    require(not missing, f"{source}: no cost for {len(missing)} candidate(s), e.g. {missing[0]!r}" if missing else "")
    return seen


def load_costs(path, models, examples, scores=None) -> np.ndarray:
    """The costs in ``path`` for the candidates ``models`` (in their order): ``(m,)`` per model or
    ``(m, n)`` per cell, columns matched to ``examples`` by id; ``scores`` (optional) says which cells
    have no score (there an empty cost is allowed)."""
    path = Path(path)
    source = str(path)
    rows = _rows(path, source)
    header = [h.strip() for h in rows[0]]
    lines = _by_name(rows, [str(m) for m in models], source)
    by_line = {i: row for i, row in enumerate(rows, start=1)}
    if len(header) == 2 and header[1].lower() == "cost":
        out = np.array([_number(by_line[lines[str(m)]][1].strip(), source, lines[str(m)], "cost") for m in models])
        _check_positive(out, models, lines, source)
        return out
    ids = [str(e) for e in examples]
    columns = {}
    for k, h in enumerate(header[1:], start=1):
        require(h not in columns, f"{source}: line 1: example column {h!r} appears twice (columns {columns.get(h)} "
                                  f"and {k}); give each example one column")
        columns[h] = k
    absent = [e for e in ids if e not in columns]
    require(not absent, f"{source}: no column for example {absent[0]!r} ({len(absent)} of the {len(ids)} examples "
                        "missing); a per-model file has the header 'model,cost'" if absent else "")
    out = np.zeros((len(models), len(ids)))
    for r, m in enumerate(models):
        line = lines[str(m)]
        row = by_line[line]
        require(len(row) == len(header), f"{source}: line {line}: {len(row)} cells, the header has {len(header)}")
        for c, e in enumerate(ids):
            text = row[columns[e]].strip()
            if not text:
                require(scores is not None and np.isnan(scores[r, c]),
                        f"{source}: line {line}, column {e}: no cost for a cell {m!r} has a score for")
                continue
            out[r, c] = _number(text, source, line, e)
    _check_positive(out.sum(axis=1), models, lines, source)
    return out


def _check_positive(totals, models, lines, source: str) -> None:
    """Every model costs something (the rules weigh a model's pulls by its price)."""
    free = [m for m, total in zip(models, totals) if not total > 0]
    require(not free, f"{source}: line {lines.get(str(free[0])) if free else 0}: model {free[0] if free else ''!r} costs "
                      "nothing; give every model a positive cost (the rules weigh each model's pulls by its price)")
