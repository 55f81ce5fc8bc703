"""A batch to evaluate (`Request`) and the check of the scores a scorer returns for it."""
from __future__ import annotations

import dataclasses

import numpy as np

from pulse_jax.errors import PulseInputError, require

#: NumPy dtype kinds a score array must not have, in words.
_KINDS = {"b": "booleans", "c": "complex numbers", "U": "strings", "S": "bytes", "M": "dates", "m": "time spans",
          "V": "raw records"}


@dataclasses.dataclass(frozen=True)
class Request:
    """One batch to evaluate: ``model`` on ``example_ids``.

    ``tell`` accepts a request only from the selector that made it, unchanged: ``selector`` identifies
    that selector, and every field must equal the one it handed out."""

    ticket: int                 # running number of the ask
    step: int                   # bandit step t (0 for initialization batches)
    model: str
    model_index: int
    example_ids: tuple
    example_index: tuple[int, ...]
    selector: str = ""          # the asking selector's identity (random per selector object)


def check_request(request, identity: str, pending: dict) -> None:
    """Refuse, before anything is written, a request that the selector of ``identity`` (whose requests in
    flight are ``pending``, by ticket) did not hand out as it is."""
    require(isinstance(request, Request), f"tell: expected a Request from ask(), got {type(request).__name__}")
    require(request.selector == identity,
            f"tell: request {request.ticket} was made by another selector; tell each selector its own requests")
    mine = pending.get(request.ticket)
    require(mine is not None, f"tell: request {request.ticket} is not in flight (already told, or never asked)")
    if mine != request:
        field = next(f.name for f in dataclasses.fields(Request) if getattr(mine, f.name) != getattr(request, f.name))
        raise PulseInputError(f"tell: request {request.ticket} was changed after ask() (its {field} differs); "
                              "tell the request exactly as asked")


def check_scores(request: Request, scores, where: str | None = None) -> np.ndarray:
    """``scores`` of ``request`` as float32, one per example, each a number in [0, 1]; anything else is one
    line naming the request (or ``where``) and what is wrong."""
    where = where or f"model {request.model!r}, request {request.ticket}"
    if scores is None:
        raise PulseInputError(f"{where}: the scorer returned None; it must return one score in [0, 1] for "
                              f"each of the {len(request.example_ids)} examples, in order")
    if isinstance(scores, (list, tuple)) and any(isinstance(v, (bool, str, complex)) or v is None for v in scores):
        raise PulseInputError(f"{where}: scores are not numbers in [0, 1]: {list(scores)!r}"[:300])
    if isinstance(scores, np.ma.MaskedArray):
        require(not np.ma.getmaskarray(scores).any(),
                f"{where}: the scorer returned a masked array with masked values; return a score for every "
                "example (a masked value has no score)")
        scores = np.ma.getdata(scores)
    try:
        raw = np.asarray(scores)
        if raw.dtype.kind == "O":      # Python numbers of mixed kinds, or too large for any NumPy type
            raw = np.array([float(v) for v in raw.reshape(-1)], np.float64)
    except OverflowError:
        raise PulseInputError(f"{where}: a score is an integer too large for a number in [0, 1]") from None
    except (TypeError, ValueError):
        raise PulseInputError(f"{where}: scores are not numbers: {scores!r}"[:300]) from None
    require(raw.dtype.kind in "iuf", f"{where}: scores are not real numbers (the scorer returned an array of "
                                     f"{_KINDS.get(raw.dtype.kind, raw.dtype.name)}); return floats in [0, 1]")
    values = raw.astype(np.float64).reshape(-1)
    require(values.size == len(request.example_ids),
            f"{where}: got {values.size} scores for {len(request.example_ids)} examples")
    bad = np.nonzero(~np.isfinite(values) | (values < 0) | (values > 1))[0]
    if len(bad):
        k = bad[0]
        raise PulseInputError(f"{where}: score for example {request.example_ids[k]!r} is {values[k]}, "
                              "not a number in [0, 1]")
    return values.astype(np.float32)
