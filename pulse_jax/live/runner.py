"""The runner of a live selection: drives a `pulse_jax.live.selector.Selector` with the user's scorer.

``run(evaluate, selector)`` asks for batches, evaluates them (optionally
several at once in a thread pool, for I/O-bound scorers), tells the results
in ask order (so the outcome never depends on timing) and retries failures. The
run ends when the selector asks nothing more: its stopping rule fired (the
same `pulse_jax.stopping.StoppingRule` a simulation stops by), its
budget is spent, or every model is known exactly.
"""
from __future__ import annotations

import queue
import signal
import sys
import threading
import time
import warnings
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures import wait as futures_wait
from typing import Callable, Sequence

from pulse_jax.errors import require
from pulse_jax.live.report import Report
from pulse_jax.live.selector import LogWriteError, Request, Selector


class EvaluationError(RuntimeError):
    """The user's evaluate function failed (after its retries)."""


class Interrupted(KeyboardInterrupt):
    """A run stopped by SIGINT or SIGTERM after logging what it had paid for (see `run`).

    ``paid``: cells this process had evaluated (or sent to be evaluated); ``logged``: of those, cells
    in the log (told, or paid and kept for the next run); ``again``: cells the next run asks again
    (calls abandoned while still running; 0 when every call in flight finished in time). ``exit_code``:
    130 (SIGINT) or 143 (SIGTERM).
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
        grace: float | None = None, handle_signals: bool = True,
        allow: Callable[[int], bool] | None = None) -> Report:
    """Drive ``selector`` with ``evaluate(model, example_ids) -> scores`` until done.

    Up to ``concurrency`` batches are evaluated at once, each in a worker
    thread (daemon threads: a scorer that hangs never keeps the process
    alive once the run has given up on it); results are told in ask order,
    so the outcome does not depend on timing. An exception from ``evaluate``
    is retried ``retries`` times (waiting ``retry_wait * 2^k`` seconds), then
    raised as `EvaluationError`; everything told before is in the log.
    The run stops where ``selector``'s stopping rule says
    (``Selector(stop=...)``). ``stop_early`` is deprecated: ``False`` is
    ``selector.use_stop("budget")``, ``True`` keeps the selector's rule.

    Interruptions (``handle_signals``, in the main thread): on SIGINT or
    SIGTERM the run stops asking and waits for the batches in flight, logging
    each result as *paid* the moment it arrives (the next run tells it where
    this run would have, without calling the scorer). A second signal, or
    ``grace`` seconds after the first, ends the wait: every result already
    arrived is logged, only the calls still running are abandoned. Then
    `Interrupted` is raised with the counts (``again``: cells the next
    run asks again).

    ``allow(cells)``, if given, is asked before each batch with the cells still in flight plus
    the next batch's; once it says no, the run asks nothing more and ends when the batches in
    flight are told (a money budget: `pulse_jax.live.money.Meter.allows`).

    A full disk (`Selector.log_full`): the run stops asking, logs the
    batches in flight the same way, and raises
    `pulse_jax.live.LogWriteError` saying every paid cell is in the log.
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
    workers = _Workers(concurrency)
    in_flight: deque = deque((request, workers.submit(call, request)) for request in selector.pending())
    logged_before = selector.spent
    try:
        _drive(selector, workers, call, in_flight, concurrency, stop, progress, allow)
        if selector.log_full or stop["signal"] is not None:
            kept, again = _settle(selector, in_flight, stop, grace)
            if stop["signal"] is not None:
                logged = selector.spent - logged_before + kept
                raise Interrupted(stop["signal"], max(paid["cells"], logged + again), logged, again, selector.log_path)
            raise selector.log_full_error(again)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        workers.shutdown()
    if progress:
        sys.stderr.write("\n")
    return selector.result()


_STOPPED = object()
_POLL = 0.05   # seconds between checks for a signal while waiting on the scorer


def _drive(selector: Selector, workers, call, in_flight: deque, concurrency: int, stop: dict, progress: bool,
           allow=None):
    """Ask, evaluate and tell in ask order until the selector asks nothing more (or ``allow`` refuses
    the next batch), a signal arrives or the log's disk is full (``in_flight`` keeps what is still out)."""
    start = time.perf_counter()
    largest = selector.config.batch_size * max(1, selector.config.init_batches)
    refused = False
    while stop["signal"] is None and not selector.log_full:
        while len(in_flight) < concurrency and stop["signal"] is None and not refused:
            if allow is not None and not allow(sum(len(r.example_ids) for r, _ in in_flight) + largest):
                refused = True
                break
            request = selector.ask()
            if request is None:
                break
            in_flight.append((request, workers.submit(call, request)))
        if not in_flight:
            return
        request, future = in_flight[0]
        scores = _result_unless_stopped(future, stop)
        if scores is _STOPPED:        # a signal while waiting: the batch stays in flight
            return
        in_flight.popleft()
        selector.tell(request, scores)
        if progress:
            _progress(selector, len(in_flight), time.perf_counter() - start)


def _result_unless_stopped(future, stop: dict):
    """The future's result, or ``_STOPPED`` as soon as a signal has arrived (the call keeps running)."""
    while True:
        try:
            return future.result(timeout=_POLL)
        except FutureTimeout:
            if stop["signal"] is not None:
                return _STOPPED


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


class _Workers:
    """A fixed pool of daemon threads running submitted calls (``concurrent.futures`` futures).

    ``ThreadPoolExecutor`` joins its threads when the interpreter exits, so one hung scorer would keep
    an interrupted run alive; daemon threads end with the process."""

    def __init__(self, count: int):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._work, daemon=True, name=f"pulse-jax-scorer-{k}")
                         for k in range(count)]
        for thread in self._threads:
            thread.start()

    def submit(self, fn, *args) -> Future:
        future: Future = Future()
        self._queue.put((future, fn, args))
        return future

    def _work(self):
        while (item := self._queue.get()) is not None:
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as err:   # noqa: BLE001 -- handed to the waiting thread
                future.set_exception(err)

    def shutdown(self) -> None:
        """Let idle threads end (a running call finishes, or ends with the process)."""
        for _ in self._threads:
            self._queue.put(None)


def _settle(selector: Selector, in_flight: deque, stop: dict, grace) -> tuple[int, int]:
    """Log the batches in flight as paid as their results arrive, until all have, a second signal, or
    ``grace`` seconds; returns ``(cells logged, cells abandoned)``. Results that arrived are always logged;
    only calls still running (or failed) are abandoned."""
    deadline = None if grace is None else time.monotonic() + grace
    remaining, kept, again = list(in_flight), 0, 0
    while remaining:
        for item in [item for item in remaining if item[1].done()]:
            remaining.remove(item)
            request, future = item
            try:
                scores = future.result()
                selector.log_paid(request, scores)
                kept += len(request.example_ids)
            except (EvaluationError, LogWriteError):
                again += len(request.example_ids)
        if not remaining or stop["abandon"] or (deadline is not None and time.monotonic() >= deadline):
            break
        futures_wait([future for _, future in remaining], timeout=_POLL, return_when=FIRST_COMPLETED)
    for request, future in remaining:
        future.cancel()
        again += len(request.example_ids)
    return kept, again


def _progress(selector: Selector, in_flight: int, seconds: float):
    report = selector.result() if selector.initialized else None
    leader = f"leader {report.leader!r} ({report.estimates[report.models.index(report.leader)]:.3f})" if report else \
        "initializing"
    sys.stderr.write(f"\r  {selector.spent:,}/{selector.config.budget:,} cells, {leader}, {in_flight} in flight, "
                     f"{seconds:.0f} s   ")
    sys.stderr.flush()
