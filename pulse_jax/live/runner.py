"""The runner of a live selection: drives a `pulse_jax.live.selector.Selector` with the user's scorer.

``run(evaluate, selector)`` asks for batches, evaluates them (optionally
several at once in a thread pool, for I/O-bound scorers), tells the results
in ask order (so the outcome never depends on timing) and retries failures. The
run ends when the selector asks nothing more: its stopping rule fired (the
same `pulse_jax.stopping.StoppingRule` a simulation stops by), its
budget is spent, or every model is known exactly.

Transient failures: an exception from ``evaluate`` is retried up to
``retries`` times in its own worker (the others keep going), waiting
``retry_wait * 2**k`` seconds times a random factor in [0.5, 1] (jitter,
so that workers hit by one rate limit do not come back together), at
most ``retry_max_wait``; an exception that carries a retry-after hint
(a ``retry_after`` attribute in seconds, or a ``Retry-After`` header on
its ``response``) waits what the hint says instead (at most
`RETRY_AFTER_CAP`). The report counts the failed attempts and the
retries (``Report.failed_attempts``, ``Report.retries``).

Stopping without paying twice: whatever ends the run early -- a call
that failed after its retries (`EvaluationError`), a
``KeyboardInterrupt`` raised inside the scorer, a log write that failed,
SIGINT or SIGTERM -- the run stops asking, tells the batches before the
failed one, and waits for the other batches in flight, logging each
result as *paid* the moment it arrives (the next run tells it where this
run would have, without calling the scorer). A second signal, or
``grace`` seconds after the first, ends the wait: every result already
arrived is logged, only the calls still running are abandoned. The
error then says how many cells the next run asks again: the failed
batch's and those abandoned while still running, never one whose
scores came back.
"""
from __future__ import annotations

import asyncio
import email.utils
import math
import queue
import random
import signal
import sys
import threading
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as futures_wait
from typing import Callable, Sequence

from pulse_jax.errors import PulseInputError, require
from pulse_jax.live.report import Report
from pulse_jax.live.ledger import LogWriteError
from pulse_jax.live.request import Request
from pulse_jax.live.selector import Selector


class EvaluationError(RuntimeError):
    """The user's evaluate function failed (after its retries)."""


class Interrupted(KeyboardInterrupt):
    """A run stopped by SIGINT or SIGTERM after logging what it had paid for (see `run`).

    ``paid``: cells this process had evaluated (or sent to be evaluated); ``logged``: of those, cells
    in the log (told, or paid and kept for the next run); ``again``: cells the next run asks again
    (calls abandoned while still running; 0 when every call in flight finished in time). ``exit_code``:
    130 (SIGINT) or 143 (SIGTERM).
    """

    def __init__(self, signum: int, paid: int, logged: int, again: int, log, inside: bool = False):
        self.signum, self.paid, self.logged, self.again = signum, paid, logged, again
        self.exit_code = 128 + signum
        name = "a KeyboardInterrupt in the scorer" if inside else signal.Signals(signum).name
        where = f" in {log}" if log else ""
        tail = "run the same command again to continue" if log else "nothing was logged (no log=)"
        super().__init__(f"stopped by {name}: {paid:,} cells paid, {logged:,} logged{where}, {again:,} will be "
                         f"asked again; {tail}")


#: Defaults of a failing ``evaluate`` call's retries: how many, the first wait and the longest (seconds).
RETRIES, RETRY_WAIT, RETRY_MAX_WAIT = 3, 1.0, 60.0
#: The longest wait a scorer's own retry-after hint is followed for (seconds).
RETRY_AFTER_CAP = 3600.0
#: A call still running after this many seconds is named on the status line (``progress=True``).
SLOW_CALL = 10.0
#: A call still running after this many seconds, with no ``call_timeout``, is said once on stderr.
HUNG_CALL = 120.0


class CallTimeout(TimeoutError):
    """A scorer call ran past ``call_timeout``: counted as a failed attempt and retried."""


def run(evaluate: Callable[[str, list], Sequence[float]], selector: Selector, *,
        retries: int = RETRIES, retry_wait: float = RETRY_WAIT, retry_max_wait: float = RETRY_MAX_WAIT,
        progress: bool | Callable = False, grace: float | None = None,
        handle_signals: bool = True, allow: Callable[[Request], bool] | None = None,
        call_timeout: float | None = None) -> Report:
    """Drive ``selector`` with ``evaluate(model, example_ids) -> scores`` until done.

    Up to the selector's ``concurrency`` batches (its one owner: ``Selector(concurrency=)`` or
    ``Plan(concurrency=)``, default `CONCURRENCY`) are evaluated at once, each in a daemon
    worker thread (a hung scorer never keeps the process alive once the run has given up on it);
    results are told in ask order, so the outcome does not depend on timing. Each ask counts the
    batches in flight (`pulse_jax.live.Selector.ask`); once the stopping rule fires nothing more is
    asked, and the batches in flight are told as they return (``Report.after_stop``).

    ``call_timeout`` (seconds; None: no limit): a call still running then is a failed attempt
    (`CallTimeout`), retried like any other; the late call is abandoned and its result ignored.

    Failed calls are retried and an early stop pays for no cell twice: see the module docstring.

    ``progress``: True for a status line on stderr (a terminal's), or ``progress(selector, in_flight,
    seconds)`` called after every told batch.

    ``allow(request)``, if given, is asked for each batch before it is paid for (a money budget:
    `pulse_jax.live.money.Meter.fits`); a batch it refuses waits for the batches in flight, and the
    run ends when it is refused with nothing in flight (`_next_to_pay`). Every batch paid for is
    counted in the log before the call (`pulse_jax.live.ledger.Ledger.record_asked`).

    A full disk (`Ledger.full`): the run stops asking, logs the batches in flight the same way,
    and raises `pulse_jax.live.LogWriteError` saying every paid cell is in the log; a log without its
    reserve asks nothing (`Ledger.can_pay`).
    """
    concurrency = _concurrency_for(evaluate, selector)
    _check_numbers(concurrency, retries, retry_wait, retry_max_wait, grace, call_timeout)
    stop = _Stop()
    kept: set = set()       # tickets whose scores their worker committed to the log as paid
    call = _caller(evaluate, selector, _Backoff(retries, retry_wait, retry_max_wait), stop, call_timeout, kept)

    install = handle_signals and threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, lambda signum, frame: stop.signalled(signum))
                for s in (signal.SIGINT, signal.SIGTERM)} if install else {}
    workers = _Workers(concurrency)
    in_flight: deque = deque()
    logged_before = selector.spent
    try:
        try:
            # A resumed log's requests asked and never told go first, through the same gate as new ones.
            _drive(selector, workers, call, in_flight, concurrency, stop, progress=progress, allow=allow, kept=kept,
                   queued=deque(selector.pending()), call_timeout=call_timeout)
        except Exception as err:   # noqa: BLE001 -- whatever broke, the batches in flight are still logged
            stop.fail(err)
        if stop.halted or selector.ledger.full:
            raise _stopped_early(selector, in_flight, stop, grace, logged_before, kept)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        workers.shutdown()
        selector.ledger.add_failures(stop.failed_attempts, stop.retries)
    if progress is True:
        sys.stderr.write("\n")
    return selector.result()


def _concurrency_for(evaluate, selector: Selector) -> int:
    """The batches in flight: the selector's, which its kernel plans its holds for; a scorer that evaluates
    fewer at once (a harness scorer's ``max_concurrency``) is refused in one line, not run at another."""
    concurrency, limit = selector.config.concurrency, getattr(evaluate, "max_concurrency", None)
    require(limit is None or concurrency <= int(limit),
            f"concurrency {concurrency}: this scorer evaluates at most {limit} batch(es) at once; make the selector "
            f"with concurrency={limit} (Plan(concurrency={limit}), --concurrency {limit})")
    return concurrency


def _check_numbers(concurrency, retries, retry_wait, retry_max_wait, grace, call_timeout=None) -> None:
    require(call_timeout is None or (isinstance(call_timeout, (int, float)) and call_timeout > 0),
            f"call_timeout must be a number of seconds > 0 (or None), got {call_timeout!r}")
    require(isinstance(concurrency, int) and concurrency >= 1, f"concurrency must be an integer >= 1, got {concurrency!r}")
    require(isinstance(retries, int) and retries >= 0, f"retries must be an integer >= 0, got {retries!r}")
    require(retry_wait >= 0 and retry_max_wait >= 0, f"retry waits must be >= 0 seconds, got {retry_wait}, "
                                                     f"{retry_max_wait}")
    require(grace is None or grace >= 0, f"grace must be >= 0 seconds, got {grace}")


def _stopped_early(selector: Selector, in_flight: deque, stop: "_Stop", grace, logged_before: int,
                   kept: set = frozenset()) -> BaseException:
    """Log the batches still in flight as they return (`_settle_in_flight`), then the error that ends the run,
    with what was logged and what the next run asks again."""
    stop.halt()
    kept, abandoned = _settle_in_flight(selector, in_flight, stop, grace, kept)
    again = abandoned + stop.lost
    if stop.signal is not None:
        logged = selector.spent - logged_before + kept
        return Interrupted(stop.signal, max(stop.paid, logged + again), logged, again, selector.log_path,
                           inside=stop.scorer_interrupt)
    if stop.failure is not None:
        return _with_counts(stop.failure, kept, again, selector)
    return selector.ledger.full_error(selector.spent, again)


class _Stop:
    """What has ended (or is ending) a run, shared by the main thread, the signal handler and the workers."""

    def __init__(self):
        self.signal = None                  # SIGINT / SIGTERM, or SIGINT for a KeyboardInterrupt in the scorer
        self.scorer_interrupt = False       # that SIGINT was a KeyboardInterrupt raised inside the scorer
        self.abandon = False                # a second signal: stop waiting for the calls in flight
        self.failure = None                 # the error that ended the run (a failed call or log write)
        self.lost = 0                       # cells of the failed batch (asked again by the next run)
        self.event = threading.Event()      # set once anything has stopped the run: no new asks, no new attempts
        self.paid = self.failed_attempts = self.retries = 0
        self._lock = threading.Lock()

    @property
    def halted(self) -> bool:
        return self.event.is_set()

    def halt(self) -> None:
        self.event.set()

    def signalled(self, signum: int) -> None:
        if self.signal is None:
            self.signal = signum
        else:
            self.abandon = True
        self.event.set()

    def fail(self, error: BaseException) -> None:
        """Stop the run for ``error`` (the first one is the one reported)."""
        with self._lock:
            if isinstance(error, _ScorerInterrupt):
                self.scorer_interrupt = True
                if self.signal is None:
                    self.signal = signal.SIGINT
            elif self.failure is None and not self.scorer_interrupt:
                self.failure = error
        self.event.set()

    def count(self, **amounts) -> None:
        with self._lock:
            for name, amount in amounts.items():
                setattr(self, name, getattr(self, name) + amount)


class _ScorerInterrupt(Exception):
    """A ``KeyboardInterrupt`` raised inside the scorer (in a worker): it stops the run like SIGINT."""


_POLL = 0.05   # seconds between checks for a signal while waiting on the scorer


def _drive(selector: Selector, workers, call, in_flight: deque, concurrency: int, stop: _Stop, *, progress,
           allow=None, kept: set | None = None, queued: deque | None = None, call_timeout: float | None = None):
    """Ask, evaluate and tell in ask order until the selector asks nothing more (or ``allow`` refuses
    the next batch), or something stops the run (``stop``; ``in_flight`` keeps what is still out).

    Each batch is committed to the log as *paid* by its worker the moment it returns (`_caller`; its
    ticket goes into ``kept``) and told when its turn comes: a ``kill -9`` loses only the calls still
    running."""
    kept = set() if kept is None else kept
    queued = deque() if queued is None else queued    # asked, not yet paid for: these go before any new ask
    start = time.perf_counter()
    while not stop.halted and not selector.ledger.full:
        while len(in_flight) < concurrency and not stop.halted:
            if not selector.ledger.can_pay():      # no room kept for the scores: pay for nothing more
                stop.halt()
                return
            request = _next_to_pay(selector, queued, allow)
            if request is None:
                if allow is not None and queued and not in_flight:
                    return                  # refused with nothing in flight: the budget ends the run
                break
            selector.ledger.record_asked(request)      # the ledger counts it before the scorer is called
            in_flight.append((request, workers.submit(call, request)))
        if stop.halted:
            # The asks were cut short: telling now would tell a batch before asks an uninterrupted run
            # makes first, which a resumed run (replaying asks up to each told batch) could not repeat.
            # What is in flight is logged as paid instead (`_settle_in_flight`) and told on resume in order.
            return
        if not in_flight:
            return
        request, future = in_flight[0]
        if not _wait_unless_stopped(future, stop, request if progress is True else None,
                                    hung=None if call_timeout is not None else request):
            return                          # a signal while waiting: the batch stays in flight
        in_flight.popleft()
        was_kept = request.ticket in kept       # its scores are in the log as paid already
        kept.discard(request.ticket)
        error = future.exception()
        if error is None:
            try:
                selector.tell(request, future.result())
            except PulseInputError as err:  # an invalid answer, or scores that cannot be logged: asked again
                error = err
        if error is not None:           # the worker has stopped the run (`_caller`); a failed write, here
            stop.lost += 0 if was_kept else len(request.example_ids)
            stop.fail(error)
            return
        if callable(progress):
            progress(selector, len(in_flight), time.perf_counter() - start)
        elif progress:
            _progress(selector, len(in_flight), time.perf_counter() - start)


def _next_to_pay(selector: Selector, queued: deque, allow) -> Request | None:
    """The next batch to pay for: the oldest asked and not yet paid for (``queued``), else a new ask;
    None when nothing can be asked now, or ``allow`` refuses it. A refused batch stays first in
    ``queued``, asked and unpaid: it waits for the batches in flight to return (their measured cost
    may be less than expected), and if it still does not fit with nothing in flight the run ends, the
    batch untold like one in flight at a kill (a run with a larger budget asks it again)."""
    if not queued:
        request = selector.ask()
        if request is None:
            return None
        queued.append(request)
    request = queued[0]
    if allow is not None and request.example_ids and selector.ledger.paid_scores(request) is None and not allow(request):
        return None
    return queued.popleft()


def _wait_unless_stopped(future, stop: _Stop, request: Request | None = None, hung: Request | None = None) -> bool:
    """Wait for ``future``; False as soon as a signal has arrived first (the call keeps running). Given
    ``request``, a wait longer than `SLOW_CALL` seconds is named on the status line; given ``hung`` (no
    ``call_timeout``), a wait longer than `HUNG_CALL` seconds is said once on stderr, progress or not."""
    start, said = time.monotonic(), False
    while True:
        done, _ = futures_wait([future], timeout=_POLL)
        if done:
            return True
        if stop.signal is not None:
            return False
        waited = time.monotonic() - start
        if hung is not None and not said and waited >= HUNG_CALL:
            said = True
            sys.stderr.write(f"\npulse-jax: the oldest call, model {hung.model!r} (request {hung.ticket}), has run for "
                             f"{waited:.0f} s with no answer and no --call-timeout: the run waits for it (Ctrl-C "
                             "stops it, keeping what was paid; --call-timeout SECONDS retries such calls)\n")
            sys.stderr.flush()
        if request is not None and waited >= SLOW_CALL:
            sys.stderr.write(f"\r  waiting {waited:.0f} s for model {request.model!r} (request {request.ticket}, "
                             f"{len(request.example_ids)} examples)   ")
            sys.stderr.flush()


class _Backoff:
    """How long to wait before retry ``k`` (0-based) of a failed call: exponential with jitter, capped,
    or the scorer's own retry-after hint."""

    def __init__(self, retries: int, wait: float, max_wait: float):
        self.retries, self.wait, self.max_wait = retries, float(wait), float(max_wait)

    def delay(self, attempt: int, error: BaseException) -> float:
        hint = retry_after(error)
        if hint is not None:
            return min(hint, RETRY_AFTER_CAP)
        return min(self.max_wait, self.wait * 2.0 ** attempt) * random.uniform(0.5, 1.0)


def retry_after(error: BaseException) -> float | None:
    """The seconds an exception asks to wait before a retry, if it says: a ``retry_after`` attribute
    (seconds), or a ``Retry-After`` header (seconds or an HTTP date) on its ``response`` (as HTTP
    clients' errors carry); None otherwise."""
    value = getattr(error, "retry_after", None)
    if value is None:
        headers = getattr(getattr(error, "response", None), "headers", None)
        try:
            value = headers.get("retry-after") or headers.get("Retry-After") if headers is not None else None
        except (AttributeError, TypeError):
            value = None
    if value is None or isinstance(value, bool):
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        try:
            when = email.utils.parsedate_to_datetime(str(value))
            seconds = when.timestamp() - time.time()
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _timed(evaluate, timeout: float | None):
    """``evaluate`` with a time limit: the call runs in its own daemon thread, and one still running after
    ``timeout`` seconds raises `CallTimeout` here (the thread is abandoned; it ends with the process)."""
    if timeout is None:
        return evaluate

    def limited(model, example_ids):
        box: dict = {}
        done = threading.Event()

        def target():
            try:
                box["value"] = evaluate(model, example_ids)
            except BaseException as err:   # noqa: BLE001 -- handed to the waiting worker
                box["error"] = err
            finally:
                done.set()

        threading.Thread(target=target, daemon=True, name="pulse-jax-scorer-call").start()
        if not done.wait(timeout):
            raise CallTimeout(f"no answer within --call-timeout {timeout:g} s")
        if "error" in box:
            raise box["error"]
        return box["value"]

    return limited


def _describe(err: BaseException) -> str:
    """``Type: message``, or the type alone for an exception without a message (a cancelled call)."""
    text = str(err).strip()
    return f"{type(err).__name__}: {text}" if text else f"{type(err).__name__} (no message)"


def _caller(evaluate, selector: Selector, backoff: _Backoff, stop: _Stop, call_timeout: float | None = None,
            kept: set | None = None):
    """``call(request) -> scores``: the scores logged as paid if there are any (never asked again), else
    ``evaluate`` with retries (none once the run is stopping), its scores committed to the log as paid
    before the call returns (``kept`` gets the ticket); counts the cells sent to the scorer. A
    cancelled call (``asyncio.CancelledError``, which is no ``Exception``) and a call past
    ``call_timeout`` are failures like any other."""
    evaluate = _timed(evaluate, call_timeout)
    kept = set() if kept is None else kept

    def call(request: Request):
        if not request.example_ids:     # a hold (`Selector.ask`): nothing to evaluate
            return []
        known = selector.ledger.paid_scores(request)
        if known is not None:
            kept.add(request.ticket)
            return known
        scores = attempts(request)
        if selector.log_path is not None:
            # Durable the moment it returns, whatever order the batches are told in (the transaction that
            # tells it removes the row). Not waiting for the disk keeps this short; the next told batch's
            # commit syncs it (a power cut asks it again). An invalid answer raises here, and stops the
            # run when its batch's turn comes.
            selector.log_paid(request, scores, synced=False)
            kept.add(request.ticket)
        return scores

    def attempts(request: Request):
        attempt = 0
        while True:
            try:
                stop.count(paid=len(request.example_ids))
                return evaluate(request.model, list(request.example_ids))
            except KeyboardInterrupt:
                interrupt = _ScorerInterrupt()
                stop.fail(interrupt)
                raise interrupt from None
            except PulseInputError as err:   # the scorer refuses the request itself: no retry can change that
                stop.count(failed_attempts=1)
                failure = EvaluationError(f"evaluate refused model {request.model!r} on {len(request.example_ids)} "
                                          f"examples (request {request.ticket}), not retried: {err}")
                stop.fail(failure)
                raise failure from None
            except (Exception, SystemExit, asyncio.CancelledError) as err:   # noqa: BLE001 -- user code
                stop.count(failed_attempts=1)
                what = (f"evaluate failed for model {request.model!r} on {len(request.example_ids)} examples (request "
                        f"{request.ticket}) after {attempt + 1} attempt(s): {_describe(err)}")
                if attempt == backoff.retries:
                    failure = EvaluationError(what)
                    stop.fail(failure)
                    raise failure from err
                if stop.halted or stop.event.wait(backoff.delay(attempt, err)):   # stopping: no new attempt
                    raise EvaluationError(what + " (not retried: the run was stopping)") from err
                stop.count(retries=1)
                attempt += 1

    return call


def _with_counts(error: BaseException, kept: int, again: int, selector: Selector) -> BaseException:
    """The error that ended the run, saying what is safe and what the next run asks again."""
    tail = (f"; {kept:,} cells of batches that came back meanwhile are logged as paid" if kept else "") + \
           f"; {again:,} cells will be asked again"
    if isinstance(error, PulseInputError):      # an invalid answer, a log that cannot be written
        return type(error)(f"{error}{tail}")
    if isinstance(error, EvaluationError):
        return EvaluationError(f"{error}{tail}")
    return EvaluationError(f"the run stopped: {_describe(error)}{tail}")


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


def _settle_in_flight(selector: Selector, in_flight: deque, stop: _Stop, grace,
                      kept: frozenset | set = frozenset()) -> tuple[int, int]:
    """Log the batches in flight as paid as their results arrive, until all have, a second signal, or
    ``grace`` seconds; returns ``(cells logged, cells abandoned)``. Results that arrived are always logged;
    only calls still running (or failed, or whose scores cannot be logged) are abandoned."""
    deadline = None if grace is None else time.monotonic() + grace
    remaining, logged, again = list(in_flight), 0, 0
    while remaining:
        for item in [item for item in remaining if item[1].done()]:
            remaining.remove(item)
            request, future = item
            if future.exception() is not None:
                again += len(request.example_ids)
                continue
            if request.ticket in kept:          # committed the moment it returned
                logged += len(request.example_ids)
                continue
            try:
                selector.log_paid(request, future.result())
                logged += len(request.example_ids)
            except (LogWriteError, PulseInputError):
                again += len(request.example_ids)
        if not remaining or stop.abandon or (deadline is not None and time.monotonic() >= deadline):
            break
        futures_wait([future for _, future in remaining], timeout=_POLL, return_when=FIRST_COMPLETED)
    for request, future in remaining:
        future.cancel()
        again += len(request.example_ids)
    return logged, again


def _progress(selector: Selector, in_flight: int, seconds: float):
    report = selector.result() if selector.initialized else None
    leader = f"leader {report.leader!r} ({report.estimates[report.models.index(report.leader)]:.3f})" if report else \
        "initializing"
    sys.stderr.write(f"\r  {selector.spent:,}/{selector.config.budget:,} cells, {leader}, {in_flight} in flight, "
                     f"{seconds:.0f} s   ")
    sys.stderr.flush()
