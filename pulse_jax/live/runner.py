"""The runner of a live selection: drives a :class:`pulse_jax.live.selector.Selector` with the user's scorer.

``run(evaluate, selector)`` asks for batches, evaluates them (optionally
several at once in a thread pool, for I/O-bound scorers), tells the results
in ask order (so the outcome never depends on timing) and retries failures. The
run ends when the selector asks nothing more: its stopping rule fired (the
same :class:`pulse_jax.stopping.StoppingRule` a simulation stops by), its
budget is spent, or every model is known exactly.
"""
from __future__ import annotations

import signal
import sys
import threading
import time
import warnings
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Callable, Sequence

from pulse_jax.errors import require
from pulse_jax.live.report import Report
from pulse_jax.live.selector import Request, Selector


class EvaluationError(RuntimeError):
    """The user's evaluate function failed (after its retries)."""


class Interrupted(KeyboardInterrupt):
    """A run stopped by SIGINT or SIGTERM after logging what it had paid for (see :func:`run`).

    ``paid``: cells this process had evaluated (or sent to be evaluated); ``logged``: of those, cells
    in the log (told, or paid and kept for the next run); ``again``: cells the next run asks again
    (abandoned in flight; 0 when the wait completed). ``exit_code``: 130 (SIGINT) or 143 (SIGTERM).
    """

    def __init__(self, signum: int, paid: int, logged: int, again: int, log):
        self.signum, self.paid, self.logged, self.again = signum, paid, logged, again
        self.exit_code = 128 + signum
        name = signal.Signals(signum).name
        where = f" in {log}" if log else ""
        tail = "run the same command again to continue" if log else "nothing was logged (no log=)"
        super().__init__(f"stopped by {name}: {paid:,} cells paid, {logged:,} logged{where}, {again:,} will be "
                         f"asked again; {tail}")


def run(evaluate: Callable[[str, list], Sequence[float]], selector: Selector, *, concurrency: int = 1,
        retries: int = 0, retry_wait: float = 1.0, stop_early: bool | None = None, progress: bool = False,
        grace: float | None = None, handle_signals: bool = True) -> Report:
    """Drive ``selector`` with ``evaluate(model, example_ids) -> scores`` until done.

    Up to ``concurrency`` batches are evaluated at once in a thread pool (for
    I/O-bound scorers); results are told in ask order, so the outcome does not
    depend on timing. An exception from ``evaluate`` is retried ``retries``
    times (waiting ``retry_wait * 2^k`` seconds), then raised as
    :class:`EvaluationError`; everything told before is in the log. The run
    stops where ``selector``'s stopping rule says (``Selector(stop=...)``).
    ``stop_early`` is deprecated: ``False`` is ``selector.use_stop("budget")``,
    ``True`` keeps the selector's rule.

    Interruptions (``handle_signals``, in the main thread): on SIGINT or SIGTERM
    the run stops asking, waits for the batches in flight (at most ``grace``
    seconds; a second signal abandons them), logs every result that arrives as
    *paid* (the next run tells it where this run would have, without calling
    the scorer), and raises :class:`Interrupted` with the counts.
    """
    require(concurrency >= 1, f"concurrency must be >= 1, got {concurrency}")
    require(retries >= 0, f"retries must be >= 0, got {retries}")
    require(grace is None or grace >= 0, f"grace must be >= 0 seconds, got {grace}")
    stop = {"signal": None, "abandon": False}
    paid = {"cells": 0}
    call = _caller(evaluate, selector, retries, retry_wait, paid)
    if stop_early is not None:
        warnings.warn("run(stop_early=...) is deprecated: give the selector its stopping rule, "
                      "Selector(stop='budget') or Selector(stop='certified')", DeprecationWarning, stacklevel=2)
        if not stop_early:
            selector.use_stop("budget")

    def on_signal(signum, frame):
        del frame
        if stop["signal"] is None:
            stop["signal"] = signum
        else:
            stop["abandon"] = True

    install = handle_signals and threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)} if install else {}
    pool = ThreadPoolExecutor(concurrency) if concurrency > 1 else None
    in_flight: deque = deque()
    start, logged_before = time.perf_counter(), selector.spent
    try:
        for request in selector.pending():
            in_flight.append((request, pool.submit(call, request) if pool else None))
        while stop["signal"] is None:
            while len(in_flight) < concurrency and stop["signal"] is None:
                request = selector.ask()
                if request is None:
                    break
                in_flight.append((request, pool.submit(call, request) if pool else None))
            if not in_flight or stop["signal"] is not None:
                break
            request, future = in_flight[0]
            scores = future.result() if future else call(request)
            if stop["signal"] is not None:        # arrived while this batch was evaluated: keep it as paid
                in_flight[0] = (request, _Done(scores))
                break
            in_flight.popleft()
            selector.tell(request, scores)
            if progress:
                _progress(selector, len(in_flight), time.perf_counter() - start)
        if stop["signal"] is not None:
            _stop_gracefully(selector, in_flight, stop, grace, paid, logged_before)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if pool:
            pool.shutdown(wait=False, cancel_futures=True)
    if progress:
        sys.stderr.write("\n")
    return selector.result()


def _caller(evaluate, selector: Selector, retries: int, retry_wait: float, paid: dict):
    """``call(request) -> scores``: the scores logged as paid if there are any (never asked again), else
    ``evaluate`` with retries; counts the cells sent to the scorer in ``paid["cells"]``."""

    def call(request: Request):
        known = selector.paid_scores(request)
        if known is not None:
            return known
        for attempt in range(retries + 1):
            try:
                paid["cells"] += len(request.example_ids)
                return evaluate(request.model, list(request.example_ids))
            except (Exception, SystemExit) as err:   # noqa: BLE001 -- the user's code may raise anything
                if attempt == retries:
                    raise EvaluationError(f"evaluate failed for model {request.model!r} on {len(request.example_ids)} "
                                          f"examples (request {request.ticket}) after {retries + 1} attempt(s): "
                                          f"{type(err).__name__}: {err}") from err
                time.sleep(retry_wait * 2**attempt)

    return call


class _Done:
    """A finished evaluation, shaped like a future."""

    def __init__(self, value):
        self.value = value

    def result(self, timeout=None):
        return self.value


def _stop_gracefully(selector: Selector, in_flight: deque, stop: dict, grace, paid: dict, logged_before: int):
    """Wait for the batches in flight (until ``grace`` or a second signal), log each result as paid, raise."""
    deadline = None if grace is None else time.monotonic() + grace
    kept = 0
    again = 0
    for request, future in in_flight:
        scores = None
        while scores is None and not stop["abandon"] and (deadline is None or time.monotonic() < deadline):
            if future is None:
                break                             # never started (concurrency 1): nothing was paid
            try:
                scores = future.result(timeout=0.05)
            except FutureTimeout:
                continue
            except EvaluationError:
                break
        if scores is None:
            again += len(request.example_ids) if future is not None else 0
            continue
        selector.log_paid(request, scores)
        kept += len(request.example_ids)
    logged = selector.spent - logged_before + kept
    raise Interrupted(stop["signal"], max(paid["cells"], logged + again), logged, again, selector.log_path)


def _progress(selector: Selector, in_flight: int, seconds: float):
    report = selector.result() if selector.initialized else None
    leader = f"leader {report.leader!r} ({report.estimates[report.models.index(report.leader)]:.3f})" if report else \
        "initializing"
    sys.stderr.write(f"\r  {selector.spent:,}/{selector.config.budget:,} cells, {leader}, {in_flight} in flight, "
                     f"{seconds:.0f} s   ")
    sys.stderr.flush()
