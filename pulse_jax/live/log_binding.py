"""A `pulse_jax.live.Selector` bound to its SQLite log (`pulse_jax.live.journal`): the header that
decides the run's requests, the verified replay of a resumed log, batches logged as paid, writes that
survive a full disk, and the scorer's failures over every run of the log."""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import sqlite3
import time

from pulse_jax import registry
from pulse_jax.errors import PulseInputError, note, require
from pulse_jax.live import journal, log_schema, returned
from pulse_jax.live.chain import canonical
from pulse_jax.live.request import Request, check_scores

#: A failed log write is retried this many times, waiting ``WRITE_RETRY_WAIT * 2**k`` seconds.
WRITE_RETRIES, WRITE_RETRY_WAIT = 2, 0.05


class LogWriteError(PulseInputError):
    """The log cannot be written (e.g. a full disk); the message says which cells, if any, are asked again."""



def _plugin_numbers(numbers: dict) -> dict:
    """The estimator's and the rule's own numbers as header fields ``estimator.x``, ``rule.y`` (the
    stopping rule's are left out: a resumed run may stop by another rule)."""
    return {f"{part}.{name}": value for part in ("estimator", "rule") for name, value in numbers[part].items()}



class LogBinding:
    """The log side of `pulse_jax.live.Selector` (a base class: the selector's state is its own)."""

    def _make_header(self) -> dict:
        """Everything that decides the run's requests: a resume with any difference is refused, naming it."""
        c = self.config
        return {"type": "header", "version": log_schema.LOG_VERSION, "method": self.method,
                "method_settings": registry.describe(self.estimator)["settings"], "seed": self.seed,
                "models": list(self.models), "examples": list(self.example_ids), "budget": c.budget,
                "batch_size": c.batch_size, "init_batches": c.init_batches, "refit_every": c.refit_every,
                "init_refit_epochs": c.init_refit_epochs, "refit_epochs": c.refit_epochs, "interval": c.interval,
                "cs_grid": c.cs_grid,
                "rule": c.rule.name, "rule_settings": registry.describe(c.rule)["settings"],
                # The engine's numbers and the estimator's and rule's own (the stopping rule may change on resume).
                **self.params.engine.to_dict(), **_plugin_numbers(self.params.to_dict()),
                "side_information": log_schema.fingerprint(self.V) if self.estimator.uses_predictions else None,
                "example_order": "drawn" if self._order is None else "given", "concurrency": c.concurrency}

    def _open_log(self):
        """Lock the log, cut a torn tail, and replay what it holds (or start it with the header)."""
        header, records = self._journal.open()
        if header is None:
            self._journal.claim()
            self._journal.append({**self._header, "train": self._train_fingerprint,
                                  **({} if self.plan is None else {"plan": self.plan})})
            self._journal.start_asked({m: 0 for m in self.models})
            self._adopt_returned()       # a file left by another log of this name is ignored and emptied
            return
        self.plan = header.get("plan", self.plan)
        self._failures = list(self._journal.failures())
        log_schema.check_header(self.log_path, self._grown_budget(header), self._header)
        logged_train = header.get("train")
        require(self._train_fingerprint is None or logged_train in (None, self._train_fingerprint),
                f"train: these historical scores differ from the ones {self.log_path} was started with; resume "
                "with the same --train, or without --train (the run keeps its first embeddings)")
        records = list(records)            # verified whole before anything is replayed
        held = sum(len(r["examples"]) for _, r in records if r.get("type") == "tell" and isinstance(r.get("examples"), list))
        require(held <= self.config.budget, f"--budget {self.config.budget:,}: {self.log_path} already holds {held:,} "
                                            f"evaluated cells; give --budget {held:,} or more to continue it")
        self._replay(records)
        self._journal.claim()          # accepted: only now is anything written to it
        self._pool_paid_rows()
        self._adopt_returned()
        self._load_asked()
        self._after_stop = self._journal.counter("after_stop")   # told after an earlier run's stop fired

    def _adopt_returned(self) -> None:
        """Add the batches kept in ``<log>.returned`` (`pulse_jax.live.returned`) that the log does not
        hold as paid cells, then keep this run's returns there from an empty file."""
        path, log_id = returned.path_of(self.log_path), self._journal.run_id
        for model, cells in returned.read(path, log_id):
            if model in self.models:
                self.log_scored(model, cells)      # told or held cells are left out
        self._spool = returned.Spool(path, log_id)
        self._spool.clear()

    def _grown_budget(self, logged: dict) -> dict:
        """A log continues with a larger budget: the requests of a rule that does not plan on the budget
        (``SamplingRule.plans_on_budget``; successive halving does) do not depend on it until it runs out
        (tested: a run extended from B to B' asks what a run started with B' asks), so the logged budget
        is read as this run's. A rule that plans on it without saying so is still caught: the replay
        refuses a logged request that differs from what this selector asks."""
        have, want = logged.get("budget"), self._header["budget"]
        if not (isinstance(have, int) and not isinstance(have, bool) and have < want):
            return logged
        rule = self.config.rule
        require(not rule.plans_on_budget,
                f"--budget {want:,}: {self.log_path} was started with --budget {have:,}, and the sampling rule "
                f"{rule.name!r} plans on the budget, so the log continues only with --budget {have:,}")
        note(f"{self.log_path} was started with a budget of {have:,} cells; it continues with {want:,}")
        return {**logged, "budget": want}

    def _replay(self, records):
        told_on = {}
        self._logged_holds = {r.get("ticket") for _, r in records if r.get("type") == "tell" and r.get("examples") == []}
        for where, record in records:
            log_schema.check_record_fields(where, record)
            if record.get("type") == "paid":
                self._keep_paid(record)
                continue
            require(record["ticket"] not in told_on, f"{where}: ticket {record['ticket']} was already told in "
                                                     f"{told_on.get(record['ticket'])} (a duplicated batch)")
            require(record["model"] in self.models, f"{where}: unknown model {record['model']!r}")
            require(0 <= record["ticket"] < record["asks_issued"],
                    f"{where}: ticket {record['ticket']} was never asked (asks_issued {record['asks_issued']})")
            while self._asks < record["asks_issued"]:
                if self.ask() is None:
                    raise PulseInputError(f"{where}: this selector cannot reproduce the logged requests (was the "
                                          "log edited?)")
            request = self._pending.get(record["ticket"])
            if self._order is not None and request is not None and request.model == record["model"]:
                request = self._logged_batch(request, record, where)
            if (request is None or request.model != record["model"]
                    or list(request.example_ids) != record["examples"]):
                raise PulseInputError(f"{where}: logged batch (model {record['model']!r}, ticket "
                                      f"{record['ticket']}) differs from what this selector asks; the log belongs "
                                      "to another run")
            self._apply(request, check_scores(request, record["scores"], where))
            told_on[record["ticket"]] = where.rsplit(": ", 1)[-1]

    def _logged_batch(self, request: Request, record: dict, where: str) -> Request:
        """With given orders a resumed run may see another order: a logged batch of the right model and
        size whose examples the model has not seen replaces the one this selector would ask."""
        column = {str(e): j for j, e in enumerate(self.example_ids)}
        index = [column.get(str(e)) for e in record["examples"]]
        require(None not in index and len(set(index)) == len(index) == len(request.example_index)
                and not set(index) & set(self._told[request.model_index]),
                f"{where}: logged batch (model {record['model']!r}, ticket {record['ticket']}) is not a batch of "
                "unseen examples of this run; the log belongs to another run")
        logged = dataclasses.replace(request, example_ids=tuple(self.example_ids[j] for j in index),
                                     example_index=tuple(index))
        self._pending[request.ticket] = logged
        return logged

    # ------------------------------------------------------------------ the ledger of paid cells

    def _load_asked(self) -> None:
        """The ledger of cells sent to the scorer, as the log keeps it; a log written before it was kept
        starts it at the cells it holds (told or paid)."""
        counts = self._journal.asked()
        if counts is None:
            counts = {m: len(self._told[i]) + len(self._paid.get(m, {})) for i, m in enumerate(self.models)}
            self._journal.start_asked(counts)
        self._asked = {m: int(counts.get(m, 0)) for m in self.models}

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
                raise LogWriteError(f"{self.log_path}: cannot write the log ({err.strerror}): the {cells} cells of "
                                    f"model {request.model!r} (request {request.ticket}) were not sent. To go on, "
                                    f"{journal.fix_for(err)}") from None
        self._asked[request.model] += int(cells)

    def asked_cells(self) -> dict:
        """``{model: cells}`` sent to the scorer over every run of the log: what was paid for, returned or
        not (a failed attempt that was retried counts once: the retry's call is the one paid)."""
        return dict(self._asked)

    def unreturned_cells(self) -> int:
        """Cells paid for whose scores are neither told nor logged as paid, including this run's calls in
        flight; at a resume, the cells of calls that never came back (asked again)."""
        return max(0, sum(self._asked.values()) - self.spent - self.paid_held)

    # ------------------------------------------------------------------ paid, not yet told

    def _keep_paid(self, record: dict) -> None:
        """Add a paid record's returned cells to the pool of paid cells: ``{model: {str(example id): score}}``."""
        with self._pool_lock:
            pool = self._paid.setdefault(record["model"], {})
            for e, x in zip(record["examples"], record["scores"]):
                if x is not None:
                    pool[str(e)] = float(x)

    def _pool_paid_rows(self) -> None:
        """Rewrite a resumed log's paid rows as one row per model holding its paid cells not yet told
        (tickets ``-1, -2, ...``, which no request of this run has): a request of this run may be told
        them whatever its ticket (its asks need not repeat the earlier run's tickets, e.g. under Inspect,
        where batches are told as samples finish), and the rows this run writes under its own tickets
        never replace them."""
        if self._journal is None or not self._journal.paid_rows():
            return
        records = []
        for i, model in enumerate(self.models):
            told = {str(self.example_ids[j]) for j in self._told[i]}
            cells = {e: x for e, x in self._paid.get(model, {}).items() if e not in told}
            self._paid[model] = cells
            if cells:
                column = {str(e): e for e in self.example_ids}
                records.append({"type": "paid", "ticket": -(i + 1), "step": 0, "asks_issued": 0, "model": model,
                                "examples": [column[e] for e in cells], "scores": list(cells.values())})
        try:
            self._journal.replace_paid(records)
        except journal.LogFull as err:
            raise LogWriteError(f"{self.log_path}: cannot write the log ({err.strerror}); nothing was asked. To go "
                                f"on, {journal.fix_for(err)}") from None

    def paid_cells(self, request: Request) -> dict:
        """``{example id: score}`` of ``request``'s cells that the log holds as paid and not yet told, from
        any batch of any run (matched by model and example, not by ticket: the cell's score is the same
        whichever batch asks it)."""
        pool = self._paid.get(request.model)
        if not pool:
            return {}
        told = self._told[request.model_index]
        return {e: pool[str(e)] for e, j in zip(request.example_ids, request.example_index)
                if str(e) in pool and j not in told}

    def paid_scores(self, request: Request):
        """The scores of ``request`` if the log holds every one of its cells as paid (`paid_cells`), else
        None: the run tells them without asking the scorer again."""
        known = self.paid_cells(request)
        if not request.example_ids or len(known) < len(request.example_ids):
            return None
        return check_scores(request, [known[e] for e in request.example_ids],
                            f"{self.log_path}: paid batch {request.ticket}")

    @property
    def paid_held(self) -> int:
        """Cells paid for and logged but not yet told (a resumed run tells them without paying again)."""
        return sum(len(cells) for cells in self._paid.values())

    def log_paid(self, request: Request, scores, synced: bool = True) -> None:
        """Log the scores of a batch in flight as paid (not told): a resumed run tells them where an
        uninterrupted run would have, without paying for them again. ``synced=False`` commits without
        waiting for the disk (the row outlives a ``kill -9``, not a power cut)."""
        self._check_request(request)
        scores = check_scores(request, scores)
        record = {"type": "paid", "ticket": request.ticket, "step": request.step, "asks_issued": self._asks,
                  "model": request.model, "examples": list(request.example_ids), "scores": scores.tolist()}
        if self.log_path is not None:
            if self._spool is not None:      # kept before the commit, which may wait for the log
                self._spool.keep(request.model, record["examples"], record["scores"])
            self._write(record, synced)
        self._keep_paid(record)

    def log_scored(self, model: str, cells: dict) -> int:
        """Commit ``{example id: score}`` of ``model``, scored outside any request of this selector (an
        earlier eval's own logs), as paid: told from the log whichever batch asks them. Cells already
        told or held are left out; returns how many were added."""
        i = self.models.index(model)
        column = {str(e): j for j, e in enumerate(self.example_ids)}
        with self._pool_lock:
            pool = dict(self._paid.get(model, {}))
        new = {str(e): x for e, x in cells.items()
               if str(e) in column and column[str(e)] not in self._told[i] and str(e) not in pool}
        if not new:
            return 0
        checked = check_scores(Request(-(i + 1), 0, model, i, tuple(new), tuple(column[e] for e in new), ""),
                               list(new.values()), f"{model}: scores from earlier evals")
        merged = {**pool, **dict(zip(new, map(float, checked)))}
        record = {"type": "paid", "ticket": -(i + 1), "step": 0, "asks_issued": 0, "model": model,
                  "examples": [self.example_ids[column[e]] for e in merged], "scores": list(merged.values())}
        if self.log_path is not None:
            self._write(record)
        self._keep_paid(record)
        return len(new)

    def log_partial(self, request: Request, scores) -> None:
        """Log the scores that have come back of a batch in flight (None for the others) as paid: a resumed
        run is told these without evaluating them again, whichever of its batches asks them."""
        self._check_request(request)
        values = [None if x is None else x for x in scores]
        require(len(values) == len(request.example_ids), f"log_partial: {len(values)} scores for "
                                                           f"{len(request.example_ids)} examples")
        known = [k for k, x in enumerate(values) if x is not None]
        checked = check_scores(dataclasses.replace(request, example_ids=tuple(request.example_ids[k] for k in known)),
                                 [values[k] for k in known]) if known else []
        for k, x in zip(known, checked):
            values[k] = float(x)
        record = {"type": "paid", "ticket": request.ticket, "step": request.step, "asks_issued": self._asks,
                  "model": request.model, "examples": list(request.example_ids), "scores": values}
        if self.log_path is not None:
            # not synced to the disk: it outlives a killed process; a power cut re-asks these samples
            self._write(record, synced=False)
        self._keep_paid(record)

    def _write(self, record: dict, synced: bool = True, drop_paid: tuple = (), counts: dict | None = None) -> None:
        """Commit ``record`` to the log, retrying a failed commit (each failure is rolled back whole).

        If it still fails, the log's reserve is freed and the record committed into it: the selector is
        then *log full* (`log_full`): it asks nothing more, the batches in flight can still be told
        (into the reserve), and the run stops with one line naming the log and the fix, no cell paid
        twice. When even that fails, `LogWriteError` names the cells that will be asked again.
        """
        with self._write_lock:      # one write (with its retries and the reserve) at a time
            self._write_once(record, synced, drop_paid, counts)

    def _write_once(self, record: dict, synced: bool, drop_paid: tuple, counts: dict | None) -> None:
        failure = None
        for attempt in range(WRITE_RETRIES + 1):
            try:
                self._journal.append(record, synced, drop_paid, counts)
                return
            except journal.LogFull as err:
                failure = err
                if err.errno == errno.ENOENT:      # the log is gone: no retry or reserve brings it back
                    break
                time.sleep(WRITE_RETRY_WAIT * 2**attempt)
        if failure.errno != errno.ENOENT and self._journal.release_reserve():
            try:
                self._journal.append(record, drop_paid=drop_paid, counts=counts)
                self._log_full = True
                return
            except journal.LogFull as err:
                failure = err
        raise LogWriteError(f"{self.log_path}: cannot write the log ({failure.strerror}): the "
                            f"{len(record['examples'])} cells of model {record['model']!r} (request {record['ticket']}) "
                            f"were paid for but will be asked again. To go on, {journal.fix_for(failure)}") from None

    def can_pay(self) -> bool:
        """Whether a new batch may be paid for: the log keeps its reserve (`pulse_jax.live.journal`), so
        the scores of every batch in flight can be saved even if the disk fills up. Without one (a disk
        too full to put it back), the selector is *log full*: nothing more is asked."""
        if self._log_full:
            return False
        if self._journal is not None and self._journal.replaced:     # saved beside it: stop asking, say why
            raise LogWriteError(self._journal.replaced)
        try:
            if self._journal is None or self._journal.has_reserve() or self._journal.keep_reserve():
                return True
        except journal.LogFull as err:     # the log was deleted or replaced under the run
            raise LogWriteError(f"{self.log_path}: cannot write the log ({err.strerror}); nothing more is asked. "
                                f"To go on, {journal.fix_for(err)}") from None
        self._log_full = self._no_room = True
        return False

    @property
    def log_full(self) -> bool:
        """The log's disk is full: nothing more is asked; the batches in flight can still be told."""
        return self._log_full

    def log_full_error(self, again: int = 0) -> LogWriteError:
        """The error that ends a run whose log's disk is full (``again``: cells abandoned in flight)."""
        saved = ("every cell paid for is in the log" if not again else
                 f"{again:,} cells in flight could not be saved and will be asked again")
        why = (f"no room to keep the log's reserve of {journal.RESERVE_BYTES // 1024} KiB (space for the scores of "
               "the batches in flight), so nothing more was asked" if self._no_room else "stopped asking")
        return LogWriteError(f"{self.log_path}: the disk is full: {why}, {saved} ({self.spent:,} told). "
                             "Free space there, then run the same command again")

    def failures(self) -> tuple[int, int]:
        """``(failed attempts, retries)`` of the scorer over every run of this selector's log (this
        selector's alone without a log)."""
        return tuple(self._failures)

    def add_failures(self, failed_attempts: int, retries: int) -> None:
        """Count a run's scorer failures (`pulse_jax.live.run` calls it as it ends): kept in the log, so
        a resumed run reports the failures of every run before it too."""
        self._failures[0] += int(failed_attempts)
        self._failures[1] += int(retries)
        if self._journal is not None:
            self._journal.add_failures(failed_attempts, retries)

    def close(self) -> None:
        """Release the log's lock (a finished or abandoned run); the log stays resumable. A log copied over
        after the last commit is found here: `log_replaced` then says where this run's log is."""
        if getattr(self, "_journal", None) is not None:
            healthy = not (self._log_full or self._no_room or self._journal.replaced)
            self._journal.close()
            if self._spool is not None:    # every line is in the log unless a write failed or it was replaced
                self._spool.close(remove=healthy and not self._journal.replaced)

    def mark_finished(self, key: dict) -> None:
        """Record in the log, before it is let go, that its selection finished as ``key`` says (the command's
        plan and inputs): the same command run again says so instead of resuming
        (`pulse_jax.live.log_file.finished_mark`). A mark that cannot be written is left out."""
        if self._journal is not None:
            with contextlib.suppress(journal.LogFull, sqlite3.Error):
                self._journal.set_meta("finished", canonical(key))

    @property
    def log_replaced(self) -> str | None:
        """The line saying the log was replaced under this run and where its own log is saved (None: it was not)."""
        return None if getattr(self, "_journal", None) is None else self._journal.replaced

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
