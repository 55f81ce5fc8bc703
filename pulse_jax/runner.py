"""The runner of a live selection: drives a :class:`pulse_jax.selector.Selector` with the user's scorer.

``run(evaluate, selector)`` asks for batches, evaluates them (optionally
several at once in a thread pool, for I/O-bound scorers), tells the results
in ask order (so the outcome never depends on timing), retries failures and
stops early once the leader is certified.
"""
from __future__ import annotations

import sys
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

from pulse_jax.errors import require
from pulse_jax.live_report import Report
from pulse_jax.selector import Request, Selector


class EvaluationError(RuntimeError):
    """The user's evaluate function failed (after its retries)."""


def run(evaluate: Callable[[str, list], Sequence[float]], selector: Selector, *, concurrency: int = 1,
        retries: int = 0, retry_wait: float = 1.0, stop_early: bool = True, progress: bool = False) -> Report:
    """Drive ``selector`` with ``evaluate(model, example_ids) -> scores`` until done.

    Up to ``concurrency`` batches are evaluated at once in a thread pool (for
    I/O-bound scorers); results are told in ask order, so the outcome does not
    depend on timing. An exception from ``evaluate`` is retried ``retries``
    times (waiting ``retry_wait * 2^k`` seconds), then raised as
    :class:`EvaluationError`; everything told before is in the log. With
    ``stop_early`` the run ends as soon as the leader is separated from every
    other model by the simultaneous bounds (see :class:`Selector`).
    """
    require(concurrency >= 1, f"concurrency must be >= 1, got {concurrency}")
    require(retries >= 0, f"retries must be >= 0, got {retries}")

    def call(request: Request):
        for attempt in range(retries + 1):
            try:
                return evaluate(request.model, list(request.example_ids))
            except (Exception, SystemExit) as err:   # noqa: BLE001 -- the user's code may raise anything
                if attempt == retries:
                    raise EvaluationError(f"evaluate failed for model {request.model!r} on {len(request.example_ids)} "
                                          f"examples (request {request.ticket}) after {retries + 1} attempt(s): "
                                          f"{type(err).__name__}: {err}") from err
                time.sleep(retry_wait * 2**attempt)

    def separated():
        return stop_early and selector.initialized and selector.estimator.has_interval and selector.result().separated

    pool = ThreadPoolExecutor(concurrency) if concurrency > 1 else None
    in_flight: deque = deque((r, pool.submit(call, r) if pool else None) for r in selector.pending())
    start = time.perf_counter()
    try:
        while True:
            stop = separated()
            while not stop and len(in_flight) < concurrency:
                request = selector.ask()
                if request is None:
                    break
                in_flight.append((request, pool.submit(call, request) if pool else None))
            if not in_flight:
                break
            request, future = in_flight.popleft()
            selector.tell(request, future.result() if future else call(request))
            if progress:
                _progress(selector, len(in_flight), time.perf_counter() - start)
    finally:
        if pool:
            pool.shutdown(wait=False, cancel_futures=True)
    if progress:
        sys.stderr.write("\n")
    return selector.result()


def _progress(selector: Selector, in_flight: int, seconds: float):
    report = selector.result() if selector.initialized else None
    leader = f"leader {report.leader!r} ({report.estimates[report.models.index(report.leader)]:.3f})" if report else \
        "initializing"
    sys.stderr.write(f"\r  {selector.spent:,}/{selector.config.budget:,} cells, {leader}, {in_flight} in flight, "
                     f"{seconds:.0f} s   ")
    sys.stderr.flush()
