"""Ask/tell best-model selection on real evaluations, on the simulation's own kernel.

`Selector` holds a live selection's state (`pulse_jax.live.core.LiveState`), its log and its names;
what is asked next is decided by `pulse_jax.live.core` on the kernel of `pulse_jax.engine.build_kernel`,
so a selector fed the scores of a full matrix makes exactly the choices of ``simulate(..., seed)``'s
first repetition, and its stopping rule is checked before every ask on the kernel's anytime-valid
confidence sequences. Batches may be asked before earlier ones are told (their cells count as
allocated, and each is a uniform draw from the examples neither observed nor in flight); every told
batch is committed to the log (`pulse_jax.live.ledger`) before it changes the selector, and a selector
made with an existing log resumes it (`pulse_jax.live.replay`). docs/live.md derives each rule.
"""
from __future__ import annotations

import secrets
from pathlib import Path
from typing import Sequence

import numpy as np

from pulse_jax import engine
from pulse_jax.engine.params import BanditParams
from pulse_jax.live import core, inputs, log_schema, replay, results, side_information
from pulse_jax.live.compiled import compiled
from pulse_jax.live.ledger import Ledger
from pulse_jax.live.report import Report
from pulse_jax.live.request import Request, check_request, check_scores
from pulse_jax.stats import factorization
from pulse_jax.stats.seeds import check_seed


class Selector:
    """Ask/tell best-model identification with PULSE, UCB-E or Naive-Pooling.

    Every choice left out takes the live default, the same as a `pulse_jax.live.Plan`'s and
    ``pulse-jax select``'s (`pulse_jax.choices`): PULSE hedged with side information (UCB-E
    without), the interval Top-Two rule, certification bounds, betting sequences, delta 0.05.
    ``Plan(...).selector(models, examples)`` makes the same selector from a plan with a log.

    Args (docs/live.md, "The selector's options", says more of each):
      models, examples: candidate names (unique); the number of examples, or their ids (unique).
      budget: total cells, initialization included.
      method: the estimator, an `pulse_jax.Estimator` or its name ("pulse_hedged", "pulse", "ucbe",
        "naive", "package.module:attribute"; None: "pulse_hedged" with side information, else "ucbe").
      batch_size, init_batches: examples per batch; batches per model in the first look.
      exploration, delta, bounds: the index rule's exploration, the error level (0.05) and which bounds
        hold at once ("certification" or "all"); each refused beside ``params``.
      refit_every: bandit steps between refits of the factorization (0: none after the first).
      seed: the run's seed (the same as ``simulate(..., seed)``'s first repetition).
      train, V, rank: side information: a history matrix (NaN where missing) fitted at ``rank``, or
        example embeddings (n, r) fitted earlier.
      log: the log (an SQLite database, `pulse_jax.live.journal`); an existing log is resumed.
      rule, stop: the sampling and stopping rules or their names (None: the live defaults).
      params: a dict ``{name or path: value}``, a `pulse_jax.RunParams` or a `pulse_jax.BanditParams`.
      cs_grid: betting sequences on that many bets (0: Bernstein; None: the default grid).
      order: ``{model: example ids}``: each model's batches take its next unseen examples in that order
        (an Inspect task's sample order; valid when each is a uniform shuffle seen by nothing else).
      concurrency: the batches `pulse_jax.live.run` keeps in flight (default 16), as
        ``BanditConfig.concurrency`` (an ask holds back while they may settle the stop).
      plan: the `pulse_jax.live.Plan` this selector runs, as ``Plan.to_dict()`` (recorded in a new log).
      cost: each model's cost per cell, ``(m,)``: the rules spend by it, the cost certificates rank by it.
      gap_horizon: ``BanditConfig.gap_horizon`` (None: 0.5 for a best-model claim, `pulse_jax.choices.claim_gap_horizon`).
    """

    def __init__(self, models: Sequence[str], examples, budget: int, *, method=None,
                 batch_size: int = 8, init_batches: int = 1, exploration: float | None = None, refit_every: int = 1000,
                 delta: float | None = None, bounds: str | None = None, seed: int = 0, train=None, V=None,
                 rank: int = factorization.DEFAULT_RANK, log=None, rule=None, params: BanditParams | None = None,
                 cs_grid: int | None = None, stop=None, order=None, concurrency: int | None = None,
                 plan: dict | None = None, cost=None, gap_horizon: float | None = None):
        self.models, self.example_ids = inputs.names_of(models, examples)
        history = train is not None or V is not None or (log is not None and side_information.saved_path(log).exists())
        options = dict(method=method, batch_size=batch_size, init_batches=init_batches, exploration=exploration,
                       refit_every=refit_every, delta=delta, bounds=bounds, rule=rule, params=params, cs_grid=cs_grid,
                       stop=stop, order=order, concurrency=concurrency, cost=cost, gap_horizon=gap_horizon)
        self.plugins, self.config, self.params, self.cost, self._order = inputs.prepare(
            self.models, self.example_ids, budget, history, options)
        check_seed(seed)
        self.method, self.seed = self.plugins.estimator.name, int(seed)
        self.log_path = Path(log) if log is not None else None
        self._identity, self.plan = secrets.token_hex(8), plan
        # model row -> {example column: score}, in evaluation order: the audit trail and paired differences
        self._told: dict[int, dict[int, float]] = {i: {} for i in range(len(self.models))}
        # The ledger locks the log before anything of it is read (sidecar included): a second process stops here.
        self.ledger = Ledger(self.log_path, self.models, self.example_ids, self._told.__getitem__)
        self._train_fingerprint = side_information.fingerprint_of(train)
        self.V = side_information.embeddings(self.plugins.estimator, self.example_ids,
                                             side_information.Given(train, V, rank, self.seed), self.log_path,
                                             self.ledger.has_run)
        self._header = log_schema.run_header(self.config, self.params, self.plugins, self.seed,
                                             (self.models, self.example_ids), self.V,
                                             order_given=self._order is not None)
        self._first = core.first_look(self.config, self.seed)     # simulate(..., seed)'s repetition 0's draws
        self._live, self._asks, self._pending = core.LiveState(), 0, {}     # requests issued; those in flight
        self._after_stop = 0        # cells told after the stop fired (asked before it, in flight)
        self._compile()
        self.resumed = False        # set by `replay.open_log`: the log already held a run
        if self.log_path is not None:
            replay.open_log(self)

    def _compile(self) -> None:
        self._programs = compiled(self.config, self.plugins)
        self._params = self.params.as_arrays()

    @property
    def stop(self):
        """The stopping rule checked before every ask (`pulse_jax.stopping.StoppingRule`)."""
        return self.plugins.stop

    def use_stop(self, stop, params=None) -> None:
        """Check ``stop`` (a stopping rule or its name) before every later ask instead of the current rule;
        ``params`` its numbers (``{"epsilon": 0.02}`` or ``{"stop.epsilon": 0.02}``; default: its own).

        Requests already made and the log are unaffected (the log records no stopping rule), so a
        certified run can go on to spend its budget, and a resumed run may stop by another rule.
        """
        self.plugins, self.params = inputs.with_stop(self.config, self.plugins, self.params, self.cost, stop, params)
        bandit = self._live.bandit
        self._live = self._live._replace(bandit=None if bandit is None else engine.resumed(bandit), finished=False)
        self._compile()

    @property
    def delta(self) -> float:
        return float(self.params.delta)

    def log_paid(self, request: Request, scores, synced: bool = True) -> None:
        """Log the scores of a batch in flight as paid (not told): a resumed run tells them where an
        uninterrupted run would have, without paying for them again (`pulse_jax.live.ledger.Ledger.log_paid`)."""
        check_request(request, self._identity, self._pending)
        self.ledger.log_paid(request, check_scores(request, scores).tolist(), self._asks, synced)

    def log_partial(self, request: Request, scores) -> None:
        """Log the scores that have come back of a batch in flight (None for the others) as paid: a resumed
        run is told these without evaluating them again, whichever of its batches asks them."""
        check_request(request, self._identity, self._pending)
        self.ledger.log_partial(request, scores, self._asks)

    def close(self) -> None:
        """Release the log's lock (a finished or abandoned run); the log stays resumable."""
        self.ledger.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def in_flight_cells(self) -> int:
        """Cells asked and not yet told (a resumed log: the batches in flight when its last run stopped,
        asked again unless logged as paid)."""
        return sum(len(r.example_ids) for r in self._pending.values() if self.ledger.paid_scores(r) is None)

    @property
    def initialized(self) -> bool:
        return self._live.bandit is not None

    def pending(self) -> list[Request]:
        """Requests asked but not told, in ask order."""
        return [self._pending[k] for k in sorted(self._pending)]

    def _flight(self):
        return core.in_flight(self._live, len(self.models), [(r.model_index, r.example_index)
                                                             for r in self._pending.values()], self.plugins.estimator)

    def _issue(self, step: int, i: int, index: np.ndarray) -> Request:
        request = Request(self._asks, step, self.models[i], i, tuple(self.example_ids[j] for j in index),
                          tuple(int(j) for j in index), self._identity)
        self._pending[self._asks] = request
        self._asks += 1
        return request

    def ask(self) -> Request | None:
        """The next batch to evaluate, or None when nothing can be asked now.

        None means: the budget is spent or every model is known exactly (the
        run is over), or the next request must wait for batches in flight (a
        refit step, or every remaining model already has a batch in flight).
        """
        if self.ledger.full:
            raise self.ledger.full_error(self.spent)
        self.ledger.check_writable()
        return self._ask(core.LIVE)

    def _ask(self, logged: int) -> Request | None:
        """`ask`, with what a replayed log did at this ask (``logged``, `pulse_jax.live.core.ask`)."""
        if self._live.finished:
            return None
        if not self.initialized:
            i = core.first_look_model(self._first, {r.model_index for r in self._pending.values()})
            first = None if i is None else self._first.examples[i]
            return None if i is None else self._issue(0, i, first if self._order is None
                                                      else self._next_in_order(i, len(first)))
        if self.stopped:      # the stopping rule has fired: nothing more is asked (what is in flight is told)
            self._live = self._live._replace(finished=not self._pending)
            return None
        asked = core.ask(self._programs, self._live, self._params, self._flight(), bool(self._pending), logged)
        self._live = asked.state
        if asked.model < 0:
            return None
        examples = asked.examples
        if self._order is not None and not asked.hold:
            examples = self._next_in_order(asked.model, len(examples))
        return self._issue(self._live.step - 1, asked.model, examples)

    def _next_in_order(self, i: int, size: int) -> np.ndarray:
        """The examples of model ``i``'s next batch in its given order: its next ``size`` examples neither
        told nor in flight (cells logged as paid are among them, and told from the log)."""
        asked = {j for r in self._pending.values() if r.model_index == i for j in r.example_index}
        return np.asarray([j for j in self._order[i] if j not in self._told[i] and j not in asked][:size])

    def tell(self, request: Request, scores) -> None:
        """Record the scores of ``request`` (one per example, in [0, 1]); logged before it counts."""
        check_request(request, self._identity, self._pending)
        scores = check_scores(request, scores)
        self.ledger.log_told(request, scores.tolist(), self._asks, self.stopped)
        self._apply(request, scores)

    def _apply(self, request: Request, scores: np.ndarray):
        del self._pending[request.ticket]
        if self.stopped:
            self._after_stop += len(request.example_index)
        i, index = request.model_index, np.asarray(request.example_index)
        self._told[i].update(zip(index.tolist(), scores.tolist()))
        if request.step > 0:
            self._live = core.tell(self._programs, self._live, self._params, request, scores)
            return
        if core.told_first(self._first, i, index, scores):
            self._live = core.start(self._programs, self._live, self._first, self.V, self._params, self.cost)

    @property
    def stopped(self) -> bool:
        """Whether the stopping rule has ended the run (no more asks): the kernel's ``BanditState.stopped``."""
        return core.stopped(self._live)

    @property
    def spent(self) -> int:
        return sum(len(v) for v in self._told.values())

    def evaluated(self) -> dict:
        """``{model: [example ids told]}``: every cell the log holds a score for, in evaluation order."""
        return {name: [self.example_ids[j] for j in self._told[i]] for i, name in enumerate(self.models)}

    def result(self) -> Report:
        """Ranking, estimates with intervals, separation and the audit trail, at any time."""
        return results.report(self)

    def paired_difference(self, a: str, b: str) -> dict:
        """``mu_a - mu_b`` with an anytime-valid interval (the difference of the two confidence sequences), and
        the mean of ``S_a - S_b`` on the examples both have seen (`pulse_jax.live.results.paired_difference`)."""
        return results.paired_difference(self, a, b)
