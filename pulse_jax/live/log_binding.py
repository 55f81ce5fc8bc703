"""A `pulse_jax.live.Selector` bound to its SQLite log (`pulse_jax.live.journal`): the header that
decides the run's requests, the verified replay of a resumed log, batches logged as paid, writes that
survive a full disk, and the scorer's failures over every run of the log."""
from __future__ import annotations

import dataclasses
import errno
import sys
import time

from pulse_jax import registry
from pulse_jax.errors import PulseInputError, require
from pulse_jax.live import journal, log_schema
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

    def _sidecar(self):
        return None if self.log_path is None else self.log_path.with_name(self.log_path.name + ".embeddings.npy")

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
        print(f"note: {self.log_path} was started with a budget of {have:,} cells; it continues with {want:,}",
              file=sys.stderr)
        return {**logged, "budget": want}

    def _replay(self, records):
        told_on = {}
        self._logged_holds = {r.get("ticket") for _, r in records if r.get("type") == "tell" and r.get("examples") == []}
        for where, record in records:
            log_schema.check_record_fields(where, record)
            if record.get("type") == "paid":
                self._paid[record["ticket"]] = record
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

    def paid_scores(self, request: Request):
        """The scores of ``request`` if they were paid for and logged before the run stopped (else None):
        a resumed run tells them without asking the scorer again."""
        record = self._paid.get(request.ticket)
        if (record is None or record["model"] != request.model or record["examples"] != list(request.example_ids)
                or any(x is None for x in record["scores"])):
            return None
        return check_scores(request, record["scores"], f"{self.log_path}: paid batch {request.ticket}")

    @property
    def paid_batches(self) -> int:
        """Batches paid for and logged but not yet told (a resumed run tells them without paying again)."""
        return len(self._paid)

    def log_paid(self, request: Request, scores) -> None:
        """Log the scores of a batch in flight as paid (not told): a resumed run tells them where an
        uninterrupted run would have, without paying for them again."""
        self._check_request(request)
        scores = check_scores(request, scores)
        if self.log_path is not None:
            self._write({"type": "paid", "ticket": request.ticket, "step": request.step, "asks_issued": self._asks,
                         "model": request.model, "examples": list(request.example_ids), "scores": scores.tolist()})
        self._paid[request.ticket] = {"model": request.model, "examples": list(request.example_ids),
                                      "scores": scores.tolist()}

    def log_partial(self, request: Request, scores) -> None:
        """Log the scores that have come back of a batch in flight (None for the others) as paid: a resumed
        run asks the same batch again (with given orders) and is told these without evaluating them again."""
        self._check_request(request)
        values = [None if x is None else x for x in scores]
        require(len(values) == len(request.example_ids), f"log_partial: {len(values)} scores for "
                                                           f"{len(request.example_ids)} examples")
        known = [k for k, x in enumerate(values) if x is not None]
        checked = check_scores(dataclasses.replace(request, example_ids=tuple(request.example_ids[k] for k in known)),
                                 [values[k] for k in known]) if known else []
        for k, x in zip(known, checked):
            values[k] = float(x)
        record = {"model": request.model, "examples": list(request.example_ids), "scores": values}
        if self.log_path is not None:
            # not synced to the disk: it outlives a killed process; a power cut re-asks these samples
            self._write({"type": "paid", "ticket": request.ticket, "step": request.step, "asks_issued": self._asks,
                         **record}, synced=False)
        self._paid[request.ticket] = record

    def paid_cells(self, request: Request) -> dict:
        """``{example id: score}`` of ``request``'s cells already logged as paid (`log_partial`)."""
        record = self._paid.get(request.ticket)
        if record is None or record["model"] != request.model or record["examples"] != list(request.example_ids):
            return {}
        return {e: float(x) for e, x in zip(request.example_ids, record["scores"]) if x is not None}

    def _write(self, record: dict, synced: bool = True) -> None:
        """Commit ``record`` to the log, retrying a failed commit (each failure is rolled back whole).

        If it still fails, the log's reserve is freed and the record committed into it: the selector is
        then *log full* (`log_full`): it asks nothing more, the batches in flight can still be told
        (into the reserve), and the run stops with one line naming the log and the fix, no cell paid
        twice. When even that fails, `LogWriteError` names the cells that will be asked again.
        """
        failure = None
        for attempt in range(WRITE_RETRIES + 1):
            try:
                self._journal.append(record, synced)
                return
            except journal.LogFull as err:
                failure = err
                if err.errno == errno.ENOENT:      # the log is gone: no retry or reserve brings it back
                    break
                time.sleep(WRITE_RETRY_WAIT * 2**attempt)
        if failure.errno != errno.ENOENT and self._journal.release_reserve():
            try:
                self._journal.append(record)
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
        """Release the log's lock (a finished or abandoned run); the log stays resumable."""
        if getattr(self, "_journal", None) is not None:
            self._journal.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
