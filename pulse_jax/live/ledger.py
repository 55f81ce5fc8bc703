"""The ledger of a live selection: every cell paid for, and the SQLite log that keeps it
(`pulse_jax.live.journal`).

A `Ledger` owns what money and durability depend on: the cells sent to the scorer (counted in the
log *before* each call), the cells returned but not yet told (the pool of paid cells, matched by model
and example), the told batches' rows, the scorer's failures over every run of the log, the
``<log>.returned`` spool (`pulse_jax.live.returned`) and the log's full-disk state. The selector owns
the choices (what is asked and told, in which order) and reads the ledger; the ledger reads the
selector's evaluated cells through the ``told`` view it is given, and writes nothing of the
selector's."""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from pulse_jax.errors import PulseInputError, note
from pulse_jax.live import journal, returned
from pulse_jax.live.chain import canonical
from pulse_jax.live.request import Request, check_scores

#: A failed log write is retried this many times, waiting ``WRITE_RETRY_WAIT * 2**k`` seconds.
WRITE_RETRIES, WRITE_RETRY_WAIT = 2, 0.05


class LogWriteError(PulseInputError):
    """The log cannot be written (e.g. a full disk); the message says which cells, if any, are asked again."""


class Ledger:
    """The cells paid for by one selection and the log that keeps them (None: no log, kept in memory).

    Args:
      log_path: the log (locked here, before anything of it is read), or None.
      models: the selection's candidates (their order is the log's).
      example_ids: the selection's examples (their order is the log's).
      told: ``told(i)`` is the collection of example columns told for model row ``i``: the
        selector's evaluation, read, never written.
    """

    def __init__(self, log_path: Path | None, models: Sequence[str], example_ids: Sequence,
                 told: Callable[[int], Collection[int]]):
        self.path, self.models, self.example_ids, self._told = log_path, tuple(models), tuple(example_ids), told
        self._column = {str(e): j for j, e in enumerate(self.example_ids)}
        self._journal = journal.Journal(log_path) if log_path is not None else None
        self._paid: dict[str, dict] = {}   # model -> {str(example id): score} paid for and logged, not yet told
        self._asked = {name: 0 for name in self.models}   # cells sent to the scorer (`record_asked`)
        self._failures = [0, 0]
        self._spool = None          # <log>.returned: each returned batch, kept before its commit
        self._full = False          # the disk filled up: the reserve is in use, nothing more is asked
        self._no_room = False       # ... or the reserve could not be put back: nothing more is paid for
        self._pool_lock, self._write_lock = threading.Lock(), threading.RLock()

    # ------------------------------------------------------------------ opening the log

    @property
    def has_run(self) -> bool:
        """Whether the log already holds a run (its saved side information is then the run's)."""
        return self._journal is not None and self._journal.has_run()

    def read(self):
        """``(header, records)`` of the log (``(None, ())`` for a new one): a torn tail cut, nothing written."""
        header, records = self._journal.open()
        if header is not None:
            self._failures = list(self._journal.failures())
        return header, records

    def start(self, header: dict) -> None:
        """Begin a new log with ``header``."""
        self._journal.claim()
        try:
            self._journal.append(header)
            self._journal.start_asked({m: 0 for m in self.models})
        except journal.LogFull as err:     # nothing was asked yet: nothing is lost, but say where and why
            room = (f" (a new log needs about {2 * journal.RESERVE_BYTES // 1024 + 64:,} KiB: its reserve of "
                    f"{journal.RESERVE_BYTES // 1024} KiB for a disk that fills up, and a rollback journal as large)"
                    if err.errno == errno.ENOSPC else "")
            raise LogWriteError(f"{self.path}: cannot start the log ({err.strerror}){room}; nothing was asked. "
                                f"To go on, {journal.fix_for(err)}, or give --log in another folder") from None
        self._adopt_returned()       # a file left by another log of this name is ignored and emptied

    def settle(self) -> int:
        """After a verified replay: take the log, pool its paid rows, adopt ``<log>.returned`` and load the
        count of cells asked. Returns the cells an earlier run told after its stop fired."""
        self._journal.claim()          # accepted: only now is anything written to it
        self._pool_paid_rows()
        self._adopt_returned()
        counts = self._journal.asked()
        if counts is None:       # a log written before the count was kept: the cells it holds
            counts = {m: len(self._told(i)) + len(self._paid.get(m, {})) for i, m in enumerate(self.models)}
            self._journal.start_asked(counts)
        self._asked = {m: int(counts.get(m, 0)) for m in self.models}
        return self._journal.counter("after_stop")

    def _adopt_returned(self) -> None:
        """Add the batches kept in ``<log>.returned`` that the log does not hold as paid cells, then keep
        this run's returns there from an empty file."""
        path, log_id = returned.path_of(self.path), self._journal.run_id
        mine, foreign = returned.read(path, log_id)
        if foreign:
            aside = returned.set_aside(path)
            note(f"{path}: {foreign} returned batch(es) there belong to another log (one deleted or replaced "
                 f"while this file stayed), not to {self.path.name}; set aside as {aside.name}, none of them told")
        for model, cells in mine:
            if model in self.models:
                self.log_scored(model, cells)      # told or held cells are left out
        self._spool = returned.Spool(path, log_id)
        self._spool.clear()

    def _pool_paid_rows(self) -> None:
        """Rewrite a resumed log's paid rows as one row per model holding its paid cells not yet told
        (tickets ``-1, -2, ...``, which no request of this run has): a request of this run may be told
        them whatever its ticket (its asks need not repeat the earlier run's tickets, e.g. under Inspect,
        where batches are told as samples finish), and the rows this run writes under its own tickets
        never replace them."""
        if not self._journal.paid_rows():
            return
        records = []
        for i, model in enumerate(self.models):
            told = {str(self.example_ids[j]) for j in self._told(i)}
            cells = {e: x for e, x in self._paid.get(model, {}).items() if e not in told}
            self._paid[model] = cells
            if cells:
                records.append(self._pooled_row(i, cells))
        try:
            self._journal.replace_paid(records)
        except journal.LogFull as err:
            raise LogWriteError(f"{self.path}: cannot write the log ({err.strerror}); nothing was asked. To go "
                                f"on, {journal.fix_for(err)}") from None

    def _pooled_row(self, i: int, cells: dict) -> dict:
        """Model row ``i``'s pooled paid row holding ``cells`` (``{str(example id): score}``)."""
        return {"type": "paid", "ticket": -(i + 1), "step": 0, "asks_issued": 0, "model": self.models[i],
                "examples": [self.example_ids[self._column[e]] for e in cells], "scores": list(cells.values())}

    # ------------------------------------------------------------------ cells sent to the scorer

    def record_asked(self, request: Request, cells: int | None = None) -> None:
        """Count ``cells`` of ``request`` (default: all of them, unless the log holds their scores as paid)
        as paid, in the log, *before* they are sent to the scorer: a run killed with calls in flight
        still counts what it paid for them (`asked_cells`)."""
        if cells is None:
            cells = 0 if self.paid_scores(request) is not None else len(request.example_ids)
        if not cells:
            return
        if self._journal is not None:
            try:
                self._journal.add_asked(request.model, cells)
            except journal.LogFull as err:
                raise LogWriteError(f"{self.path}: cannot write the log ({err.strerror}): the {cells} cells of "
                                    f"model {request.model!r} (request {request.ticket}) were not sent. To go on, "
                                    f"{journal.fix_for(err)}") from None
        self._asked[request.model] += int(cells)

    def asked_cells(self) -> dict:
        """``{model: cells}`` sent to the scorer over every run of the log: what was paid for, returned or
        not (a failed attempt that was retried counts once: the retry's call is the one paid)."""
        return dict(self._asked)

    def unreturned_cells(self, spent: int) -> int:
        """Cells paid for whose scores are neither told (``spent`` of them) nor logged as paid, including
        calls in flight; at a resume, the cells of calls that never came back (asked again)."""
        return max(0, sum(self._asked.values()) - spent - self.paid_held)

    # ------------------------------------------------------------------ paid, not yet told

    def keep_paid(self, record: dict) -> None:
        """Add a paid record's returned cells to the pool of paid cells: ``{model: {str(example id): score}}``."""
        with self._pool_lock:
            pool = self._paid.setdefault(record["model"], {})
            for e, x in zip(record["examples"], record["scores"]):
                if x is not None:
                    pool[str(e)] = float(x)

    def paid_cells(self, request: Request) -> dict:
        """``{example id: score}`` of ``request``'s cells that the log holds as paid and not yet told, from
        any batch of any run (matched by model and example, not by ticket: the cell's score is the same
        whichever batch asks it)."""
        pool = self._paid.get(request.model)
        if not pool:
            return {}
        told = self._told(request.model_index)
        return {e: pool[str(e)] for e, j in zip(request.example_ids, request.example_index)
                if str(e) in pool and j not in told}

    def paid_scores(self, request: Request):
        """The scores of ``request`` if the log holds every one of its cells as paid (`paid_cells`), else
        None: the run tells them without asking the scorer again."""
        known = self.paid_cells(request)
        if not request.example_ids or len(known) < len(request.example_ids):
            return None
        return check_scores(request, [known[e] for e in request.example_ids], f"{self.path}: paid batch {request.ticket}")

    @property
    def paid_held(self) -> int:
        """Cells paid for and logged but not yet told (a resumed run tells them without paying again)."""
        return sum(len(cells) for cells in self._paid.values())

    def log_paid(self, request: Request, scores, asks_issued: int, synced: bool = True) -> None:
        """Log the (checked) scores of a batch in flight as paid, not told (None: a cell not returned yet):
        a resumed run tells them where an uninterrupted run would have, without paying again.
        ``synced=False`` commits without waiting for the disk (the row outlives a ``kill -9``, not a
        power cut)."""
        record = {"type": "paid", "ticket": request.ticket, "step": request.step, "asks_issued": asks_issued,
                  "model": request.model, "examples": list(request.example_ids), "scores": list(scores)}
        if self._journal is not None:
            if self._spool is not None:      # kept before the commit, which may wait for the log
                known = [(e, x) for e, x in zip(record["examples"], record["scores"]) if x is not None]
                self._spool.keep(request.model, [e for e, _ in known], [x for _, x in known])
            self._write(record, synced)
        self.keep_paid(record)

    def log_partial(self, request: Request, scores, asks_issued: int) -> None:
        """Log the scores that have come back of a batch in flight (None for the others) as paid, each
        checked; not synced to the disk (it outlives a killed process; a power cut re-asks them)."""
        values = list(scores)
        if len(values) != len(request.example_ids):
            raise PulseInputError(f"log_partial: {len(values)} scores for {len(request.example_ids)} examples")
        known = [k for k, x in enumerate(values) if x is not None]
        checked = check_scores(dataclasses.replace(request, example_ids=tuple(request.example_ids[k] for k in known)),
                               [values[k] for k in known]) if known else []
        for k, x in zip(known, checked):
            values[k] = float(x)
        self.log_paid(request, values, asks_issued, synced=False)

    def log_scored(self, model: str, cells: dict) -> int:
        """Commit ``{example id: score}`` of ``model``, scored outside any request (an earlier eval's own
        logs, ``<log>.returned``), as paid: told from the log whichever batch asks them. Cells already
        told or held are left out; returns how many were added."""
        i = self.models.index(model)
        told = self._told(i)
        with self._pool_lock:
            pool = dict(self._paid.get(model, {}))
        new = {str(e): x for e, x in cells.items()
               if str(e) in self._column and self._column[str(e)] not in told and str(e) not in pool}
        if not new:
            return 0
        checked = check_scores(Request(-(i + 1), 0, model, i, tuple(new), tuple(self._column[e] for e in new), ""),
                               list(new.values()), f"{model}: scores from earlier evals")
        record = self._pooled_row(i, {**pool, **dict(zip(new, map(float, checked)))})
        if self._journal is not None:
            self._write(record)
        self.keep_paid(record)
        return len(new)

    def log_told(self, request: Request, scores, asks_issued: int, after_stop: bool) -> None:
        """Commit a told batch (its cells leave the pool of paid cells; the model's pooled paid row goes
        with its last cell). ``after_stop``: told after the stopping rule fired (counted in the log)."""
        with self._pool_lock:       # workers add to the pool as their batches return (`log_paid`)
            pool = self._paid.get(request.model, {})
            rest = {e: x for e, x in pool.items() if e not in set(map(str, request.example_ids))}
        if self._journal is not None:
            drop = (-(request.model_index + 1),) if pool and not rest else ()
            self._write({"type": "tell", "ticket": request.ticket, "step": request.step, "asks_issued": asks_issued,
                         "model": request.model, "examples": list(request.example_ids), "scores": list(scores)},
                        drop_paid=drop, counts={"after_stop": len(request.example_ids)} if after_stop else None)
        with self._pool_lock:
            for e in request.example_ids if pool else ():
                pool.pop(str(e), None)

    # ------------------------------------------------------------------ writes that survive a full disk

    def _write(self, record: dict, synced: bool = True, drop_paid: tuple = (), counts: dict | None = None) -> None:
        """Commit ``record`` to the log, retrying a failed commit (each failure is rolled back whole).

        If it still fails, the log's reserve is freed and the record committed into it: the ledger is
        then *full* (`full`): nothing more is asked, the batches in flight can still be told (into the
        reserve), and the run stops with one line naming the log and the fix, no cell paid twice. When
        even that fails, `LogWriteError` names the cells that will be asked again.
        """
        with self._write_lock:      # one write (with its retries and the reserve) at a time
            failure = self._append_retried(record, synced, drop_paid, counts)
            if failure is None:
                return
            if failure.errno != errno.ENOENT and self._journal.release_reserve():
                try:
                    self._journal.append(record, drop_paid=drop_paid, counts=counts)
                    self._full = True
                    return
                except journal.LogFull as err:
                    failure = err
        raise LogWriteError(f"{self.path}: cannot write the log ({failure.strerror}): the "
                            f"{len(record['examples'])} cells of model {record['model']!r} (request {record['ticket']}) "
                            f"were paid for but will be asked again. To go on, {journal.fix_for(failure)}") from None

    def _append_retried(self, record, synced, drop_paid, counts) -> journal.LogFull | None:
        """Append ``record``, retrying; the last failure (None: committed)."""
        failure = None
        for attempt in range(WRITE_RETRIES + 1):
            try:
                self._journal.append(record, synced, drop_paid, counts)
                return None
            except journal.LogFull as err:
                failure = err
                if err.errno == errno.ENOENT:      # the log is gone: no retry or reserve brings it back
                    break
                time.sleep(WRITE_RETRY_WAIT * 2**attempt)
        return failure

    def check_writable(self) -> None:
        """Refuse to ask when the log was replaced under the run (this run's log is then saved beside it)."""
        if self._journal is not None and self._journal.replaced:
            raise LogWriteError(self._journal.replaced)

    def can_pay(self) -> bool:
        """Whether a new batch may be paid for: the log keeps its reserve (`pulse_jax.live.journal`), so
        the scores of every batch in flight can be saved even if the disk fills up. Without one (a disk
        too full to put it back), the ledger is *full*: nothing more is asked."""
        if self._full:
            return False
        self.check_writable()
        try:
            if self._journal is None or self._journal.has_reserve() or self._journal.keep_reserve():
                return True
        except journal.LogFull as err:     # the log was deleted or replaced under the run
            raise LogWriteError(f"{self.path}: cannot write the log ({err.strerror}); nothing more is asked. "
                                f"To go on, {journal.fix_for(err)}") from None
        self._full = self._no_room = True
        return False

    @property
    def full(self) -> bool:
        """The log's disk is full: nothing more is asked; the batches in flight can still be told."""
        return self._full

    def full_error(self, spent: int, again: int = 0) -> LogWriteError:
        """The error that ends a run whose log's disk is full (``spent`` cells told, ``again`` abandoned in
        flight)."""
        saved = ("every cell paid for is in the log" if not again else
                 f"{again:,} cells in flight could not be saved and will be asked again")
        why = (f"no room to keep the log's reserve of {journal.RESERVE_BYTES // 1024} KiB (space for the scores of "
               "the batches in flight), so nothing more was asked" if self._no_room else "stopped asking")
        return LogWriteError(f"{self.path}: the disk is full: {why}, {saved} ({spent:,} told). "
                             "Free space there, then run the same command again")

    # ------------------------------------------------------------------ failures, the end of a run

    def failures(self) -> tuple[int, int]:
        """``(failed attempts, retries)`` of the scorer over every run of the log (this run's alone
        without a log)."""
        return tuple(self._failures)

    def add_failures(self, failed_attempts: int, retries: int) -> None:
        """Count a run's scorer failures (`pulse_jax.live.run` calls it as it ends): kept in the log, so
        a resumed run reports the failures of every run before it too."""
        self._failures[0] += int(failed_attempts)
        self._failures[1] += int(retries)
        if self._journal is not None:
            self._journal.add_failures(failed_attempts, retries)

    def mark_finished(self, key: dict) -> None:
        """Record in the log, before it is let go, that its selection finished as ``key`` says (the command's
        plan and inputs): the same command run again says so instead of resuming
        (`pulse_jax.live.log_file.finished_mark`). A mark that cannot be written is left out."""
        if self._journal is not None:
            with contextlib.suppress(journal.LogFull, sqlite3.Error):
                self._journal.set_meta("finished", canonical(key))

    @property
    def replaced(self) -> str | None:
        """The line saying the log was replaced under this run and where its own log is saved (None: it was not)."""
        return None if self._journal is None else self._journal.replaced

    def close(self) -> None:
        """Release the log's lock (a finished or abandoned run); the log stays resumable. A log copied over
        after the last commit is found here: `replaced` then says where this run's log is."""
        if self._journal is not None:
            healthy = not (self._full or self._no_room or self._journal.replaced)
            self._journal.close()
            if self._spool is not None:    # every line is in the log unless a write failed or it was replaced
                self._spool.close(remove=healthy and not self._journal.replaced)
