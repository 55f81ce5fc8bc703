"""Ask/tell best-model selection on real evaluations, on the simulation's own kernel.

``Selector`` drives the pure pieces of `pulse_jax.engine.build_kernel`
(``init``, ``stop_status``, ``ask``, ``tell``) one batch at a time,
so a selector fed the scores of a full matrix makes exactly the choices of
``simulate(..., seed)``'s first repetition. The told scores go into the
kernel's state (its pull log); nothing else is written.

Pending batches (``ask`` several times before ``tell``): each ask counts the batches in flight as
allocated (`pulse_jax.engine.InFlight`): the sampling rule sees their cells in the counts and
bounds it chooses by (widths shrink for what is on its way, the estimates do not move), a model may
have several batches in flight, and each new batch is drawn uniformly from the model's examples
neither observed nor in flight, with the draw key of the count that includes them, so a model's
draws are the one uniform permutation a sequential run draws (`draw_order`). A model's batches are
told in the order they were asked (the runner and the Inspect manager do so); a refit step waits
until nothing is in flight. Everything a batch's estimate and confidence sequence use is computed
when it is told, from the cells observed before it, and the batch is a uniform draw from the
examples unobserved at that moment given everything observed (docs/live.md, "Asking while
batches are in flight"); an estimator that draws by weights keeps one batch per model in flight.

Durability (`pulse_jax.live.journal`): every told batch is committed to
an SQLite log in its own transaction before it changes the selector. A selector created with
an existing log replays it, checks every replayed request against the log,
and continues; batches in flight when the process died are asked again (the
only loss). The example embeddings are saved next to the log, so a resumed
run uses exactly the same side information.

Stopping: the selector's `pulse_jax.stopping.StoppingRule` (``stop=``),
checked before every ask by the same `pulse_jax.engine.Kernel.stop_status` that
stops a simulated run, on the kernel's anytime-valid confidence sequences
(`pulse_jax.stats.confidence.ConfSeq`): they are valid at every look, so
checking them after every batch is valid. The rule declares what its stop
certifies, and `Selector.result` states it. Naive-Pooling has no
interval, so it spends its budget.
"""
from __future__ import annotations

import dataclasses
import secrets
from pathlib import Path
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from pulse_jax import choices, engine, stopping
from pulse_jax.engine import BanditConfig
from pulse_jax.engine.params import BanditParams, declared_params
from pulse_jax.errors import PulseInputError, require
from pulse_jax.live.compiled import Waiting, compiled, first_draws
from pulse_jax.live import inputs, log_schema
from pulse_jax.live.ledger import Ledger
from pulse_jax.fileio.jsonable import plain_number
from pulse_jax.live.report import Report
from pulse_jax.live.request import Request, check_scores
from pulse_jax.live import side_information
from pulse_jax.stats import factorization
from pulse_jax.stats.seeds import check_seed, seed_key

CONCURRENCY = choices.CONCURRENCY


class Selector:
    """Ask/tell best-model identification with PULSE, UCB-E or Naive-Pooling.

    Every choice left out takes the live default, the same as a `pulse_jax.live.Plan`'s and
    ``pulse-jax select``'s (`pulse_jax.choices`): PULSE hedged with side information (UCB-E
    without), the interval Top-Two rule, certification bounds, betting sequences, delta 0.05.
    ``Plan(...).selector(models, examples)`` makes the same selector from a plan with a log.

    Args:
      models: candidate names (unique).
      examples: the number of examples, or their ids (unique).
      budget: total cells, initialization included.
      method: the estimator: an `pulse_jax.Estimator` (e.g. ``pulse(variance_bound=...)`` or your own) or
        its name, "pulse_hedged", "pulse", "ucbe", "naive", "package.module:attribute" (None: "pulse_hedged"
        with ``train``, ``V`` or a log's saved embeddings, "ucbe" without).
      batch_size: examples per batch, as in `pulse_jax.BanditConfig`.
      init_batches: batches per model in the first look.
      exploration: the index rule's ``exploration`` (``rule.exploration``; None: the rule's default; refused
        beside ``params``).
      refit_every: bandit steps between refits of the factorization (0: none after the first).
      delta: a wrong certificate has chance at most ``delta`` (None: 0.05; refused beside ``params``, which then
        holds it).
      bounds: ``"certification"`` (None: the default; only the certificate's bounds hold at once, and certify
        with fewer cells) or ``"all"`` (every model's interval holds at every look at once); refused beside
        ``params``. A top-k or cost certificate raises the level its claim rests on, as a `Plan` does.
      seed: the run's seed (the same as ``simulate(..., seed)``'s first repetition).
      train: side information, a (n_train, n) matrix with NaN for missing cells (or a ``ScoreMatrix``
        whose examples are aligned by id).
      V: example embeddings (n, r) fitted earlier, instead of ``train`` (PULSE and Naive need one).
      rank: the rank of the embeddings fitted on ``train``.
      log: path of the log (an SQLite database, `pulse_jax.live.journal`); an existing log is
        resumed (a JSONL log of an earlier version is converted in place first).
      rule: a sampling rule or its name (None: ``top_two_interval``; ``lucb_top_k(k)`` for a top-k stop,
        ``focus`` for a stop about cost, ``ucbe`` for a method without an interval).
      params: instead of ``exploration`` and ``delta``: a dict ``{name or path: value}``, a
        `pulse_jax.RunParams`, or a `pulse_jax.BanditParams`.
      cs_grid: ``> 0``: betting confidence sequences on a grid of that many bets; 0: Bernstein (None: betting on
        `pulse_jax.stats.confidence.BETTING_GRID` bets).
      stop: the stopping rule (`pulse_jax.stopping.StoppingRule` or its name, as in
        `pulse_jax.BanditConfig`), checked before every ask: ``"certified"`` stops once a model
        is certified best; ``"budget"`` spends the whole budget. Default: ``"certified"`` for a method
        with an interval, ``"budget"`` otherwise.
      order: ``{model: example ids}``, each a permutation of the examples: every batch of a model takes
        its next unseen examples in that order instead of the kernel's own uniform draw (an Inspect
        task's per-model sample order, `pulse_jax.harnesses.inspect_select`). Valid when each order is uniformly random,
        independent across models and seen by nothing the selection uses (docs/harness.md). A log
        started with orders is resumed with orders (any: a resumed run may see a fresh shuffle); a
        batch in flight whose scores were partly logged (`log_partial`) is asked again as it was.
      concurrency: the batches `pulse_jax.live.run` keeps in flight (default `pulse_jax.live.CONCURRENCY`,
        16), as ``BanditConfig.concurrency``: an ask holds back (a request with no examples, told
        with ``[]``) while the batches in flight may settle the stop, within the spare steps that
        the concurrency gives the run. A log is resumed with the concurrency it was started with.
      plan: the `pulse_jax.live.Plan` this selector runs, as ``Plan.to_dict()`` (`Plan.selector` gives
        it): recorded in a new log's header; ``Selector.plan`` is the logged one when resuming.
      cost: each model's cost per cell, ``(m,)`` (e.g. the `pulse_jax.live.money.Meter`'s expected dollars):
        the sampling rules spend by it and the certificates about cost (``cheapest_within``,
        ``cost_front``) rank the models by it. None: every cell costs the same.
    """

    def __init__(self, models: Sequence[str], examples, budget: int, *, method=None,
                 batch_size: int = 8, init_batches: int = 1, exploration: float | None = None, refit_every: int = 1000,
                 delta: float | None = None, bounds: str | None = None, seed: int = 0, train=None, V=None,
                 rank: int = factorization.DEFAULT_RANK, log=None, rule=None, params: BanditParams | None = None,
                 cs_grid: int | None = None, stop=None, order=None, concurrency: int | None = None,
                 plan: dict | None = None, cost=None):
        self.models, self.example_ids = inputs.names_of(models, examples)
        m, n = len(self.models), len(self.example_ids)
        self.estimator, rule, stop = inputs.plugins_of(method, rule, stop, train is not None or V is not None
                                                       or (log is not None and side_information.saved_path(log).exists()))
        cs_grid = choices.cs_grid(choices.DEFAULT_SEQUENCE, choices.keyword) if cs_grid is None else cs_grid
        self.config = BanditConfig(n_models=m, n_examples=n, budget=int(budget), batch_size=batch_size,
                                   init_batches=init_batches, refit_every=refit_every, rule=rule, cs_grid=cs_grid,
                                   stop=stop, concurrency=CONCURRENCY if concurrency is None else concurrency)
        params = inputs.params_of(params, delta, exploration, bounds, stop, m)
        engine.check_compatible(self.config, self.estimator)
        self.cost = inputs.check_cost(cost, self.models, engine.plugins_of(self.config, self.estimator).stop)
        self.params = engine.resolve_params(params, engine.plugins_of(self.config, self.estimator))
        engine.check_levels(self.config, engine.plugins_of(self.config, self.estimator), self.params)
        check_seed(seed)
        self.method, self.seed = self.estimator.name, int(seed)
        self._order = inputs.check_order(order, self.models, self.example_ids, self.estimator)
        self.log_path = Path(log) if log is not None else None
        self._identity, self.plan = secrets.token_hex(8), plan
        # model row -> {example column: score}, in evaluation order: the audit trail and paired differences
        self._told: dict[int, dict[int, float]] = {i: {} for i in range(m)}
        # The ledger locks the log before anything of it is read (sidecar included): a second process stops here.
        self.ledger = Ledger(self.log_path, self.models, self.example_ids, self._told.__getitem__)
        self._train_fingerprint = side_information.fingerprint_of(train)
        self.V = side_information.embeddings(self.estimator, self.example_ids,
                                             side_information.Given(train, V, rank, self.seed), self.log_path,
                                             self.ledger.has_run)
        self._header = log_schema.run_header(self.config, self.params, self.estimator, self.seed,
                                             (self.models, self.example_ids), self.V,
                                             order_given=self._order is not None)
        self._first_look(m, n)
        self._episode = self._state = None
        self._asks = 0              # requests issued
        self._t = 1                 # next bandit step
        self._pending: dict[int, Request] = {}
        self._finished = False
        self._stopped = False       # the stopping rule fired (final, like a simulated run's stop)
        self._after_stop = 0        # cells told after the stop fired (asked before it, in flight)
        self._replaying = False
        self._compile()
        self._logged_holds: set = set()    # tickets the log holds as holds (told with no examples)
        self._logged_tickets: set = set()  # every ticket the log holds as told
        self.resumed = False               # set by `_open_log`: the log already held a run
        if self.log_path is not None:
            self._replaying = True
            try:
                self._open_log()
            finally:
                self._replaying = False

    def _first_look(self, m: int, n: int) -> None:
        """The first look's draws, those of ``simulate(..., seed)``'s repetition 0; nothing told yet."""
        self._key = jax.random.fold_in(seed_key(self.seed), 0)
        self._initial_examples = np.asarray(first_draws(self.config)(self._key))
        self._initial_scores = np.zeros((m, n), np.float32)   # the initial batches, until init runs
        self._init_told = np.zeros(m, bool)

    def _compile(self) -> None:
        (self._kernel, self._init_fn, self._status_fn, self._ask_fn, self._tell_fn,
         self._summary_fn) = compiled(self.config, self.estimator)
        self._params = self.params.as_arrays()

    @property
    def stop(self):
        """The stopping rule checked before every ask (`pulse_jax.stopping.StoppingRule`)."""
        return self.config.stop

    def use_stop(self, stop, params=None) -> None:
        """Check ``stop`` (a stopping rule or its name) before every later ask instead of the current rule;
        ``params`` its numbers (``{"epsilon": 0.02}`` or ``{"stop.epsilon": 0.02}``; default: its own).

        Requests already made and the log are unaffected (the log records no stopping rule), so a
        certified run can go on to spend its budget, and a resumed run may stop by another rule.
        """
        config = dataclasses.replace(self.config, stop=stop)
        engine.check_compatible(config, self.estimator)
        require(self.cost is not None or not engine.plugins_of(config, self.estimator).stop.uses_cost,
                f"stopping rule {getattr(stop, 'name', stop)!r} ranks the models by cost; this selector has none "
                "(pass cost= when making it)")
        plugins = engine.plugins_of(config, self.estimator)
        new = engine.resolve_params(self.params._replace(stop=declared_params(config.stop)), plugins)
        if params:
            new = engine.resolve_params(new.replace({k if "." in k else f"stop.{k}": v for k, v in params.items()}),
                                        plugins, "use_stop params")
        engine.check_levels(config, plugins, new)
        self.params = new
        self.config = config
        self._stopped = False
        self._finished = False
        self._compile()

    @property
    def delta(self) -> float:
        return float(self.params.delta)

    # ------------------------------------------------------------------ setup

    # ------------------------------------------------------------------ the log

    def _open_log(self) -> None:
        """Read the log (locked by the ledger), check its header, replay it (verified whole first), then
        let the ledger take it; a new log starts with this run's header."""
        header, records = self.ledger.read()
        self.resumed = header is not None      # the log held a run: this one continues it (told batches or not)
        if header is None:
            self.ledger.start({**self._header, "train": self._train_fingerprint,
                               **({} if self.plan is None else {"plan": self.plan})})
            return
        self.plan = header.get("plan", self.plan)
        log_schema.check_header(self.log_path, log_schema.grown_budget(self.log_path, header, self._header,
                                                                       self.config.rule), self._header)
        logged_train = header.get("train")
        require(self._train_fingerprint is None or logged_train in (None, self._train_fingerprint),
                f"train: these historical scores differ from the ones {self.log_path} was started with; resume "
                "with the same --train, or without --train (the run keeps its first embeddings)")
        records = list(records)            # verified whole before anything is replayed
        held = sum(len(r["examples"]) for _, r in records if r.get("type") == "tell" and isinstance(r.get("examples"), list))
        require(held <= self.config.budget, f"--budget {self.config.budget:,}: {self.log_path} already holds {held:,} "
                                            f"evaluated cells; give --budget {held:,} or more to continue it")
        self._replay(records)
        self._after_stop = self.ledger.settle()   # told after an earlier run's stop fired

    def _replay(self, records):
        told_on = {}
        self._logged_holds = {r.get("ticket") for _, r in records if r.get("type") == "tell" and r.get("examples") == []}
        self._logged_tickets = {r.get("ticket") for _, r in records if r.get("type") == "tell"}
        for where, record in records:
            log_schema.check_record_fields(where, record)
            if record.get("type") == "paid":
                self.ledger.keep_paid(record)
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

    def log_paid(self, request: Request, scores, synced: bool = True) -> None:
        """Log the scores of a batch in flight as paid (not told): a resumed run tells them where an
        uninterrupted run would have, without paying for them again (`pulse_jax.live.ledger.Ledger.log_paid`)."""
        self._check_request(request)
        self.ledger.log_paid(request, check_scores(request, scores).tolist(), self._asks, synced)

    def log_partial(self, request: Request, scores) -> None:
        """Log the scores that have come back of a batch in flight (None for the others) as paid: a resumed
        run is told these without evaluating them again, whichever of its batches asks them."""
        self._check_request(request)
        values = list(scores)
        require(len(values) == len(request.example_ids), f"log_partial: {len(values)} scores for "
                                                           f"{len(request.example_ids)} examples")
        known = [k for k, x in enumerate(values) if x is not None]
        checked = check_scores(dataclasses.replace(request, example_ids=tuple(request.example_ids[k] for k in known)),
                               [values[k] for k in known]) if known else []
        for k, x in zip(known, checked):
            values[k] = float(x)
        # not synced to the disk: it outlives a killed process; a power cut re-asks these samples
        self.ledger.log_paid(request, values, self._asks, synced=False)

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

    # ------------------------------------------------------------------ ask / tell

    @property
    def initialized(self) -> bool:
        return self._state is not None

    def pending(self) -> list[Request]:
        """Requests asked but not told, in ask order."""
        return [self._pending[k] for k in sorted(self._pending)]

    def _in_flight(self) -> tuple[engine.InFlight, np.ndarray]:
        """The pending requests as the kernel's `pulse_jax.engine.InFlight` (cells, batches and the mask of
        examples observed or in flight, per model), and the models that may not be asked now: those with
        a batch in flight when the estimator draws by weights (its design is recomputed at the tell)."""
        m = len(self.models)
        cells, batches = np.zeros(m, np.int32), np.zeros(m, np.int32)
        rows = np.array(self._state.observed, dtype=np.uint32)
        for request in self._pending.values():
            if not request.example_index:       # a hold: nothing in flight
                continue
            i, index = request.model_index, np.asarray(request.example_index, np.int64)
            cells[i] += len(index)
            batches[i] += 1
            np.bitwise_or.at(rows[i], index // 32, (np.uint32(1) << (index % 32).astype(np.uint32)))
        blocked = engine.blocked_by_flight(self.estimator, batches)
        blocked = np.zeros(m, bool) if blocked is None else blocked     # the compiled ask takes an array
        # NumPy into the compiled programs: a jnp array here is an eager device operation per ask.
        return engine.InFlight(cells, batches, rows), blocked

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
        if self._finished:
            return None
        config = self.config
        if not self.initialized:
            asked = {r.model_index for r in self._pending.values()}
            for i in range(len(self.models)):
                if not self._init_told[i] and i not in asked:
                    first = self._initial_examples[i]
                    return self._issue(0, i, first if self._order is None else self._next_in_order(i, len(first)))
            return None
        in_flight, blocked = self._in_flight()
        status = self._status_fn(self._state, self._params, np.int32(self._t), in_flight)
        done, hold_now = jax.device_get((status.done, status.hold))     # one transfer for both
        if self._stopped or (not self._replaying and bool(done)):
            # The stopping rule says done: nothing more is asked (the batches in flight are still told).
            self._stopped = True
            if not self._pending:
                self._finished = True
            return None
        due = bool(engine.refit_due(config, self._kernel.plugins, self._t))
        if due and self._pending:
            return None
        # Hold (`pulse_jax.engine.Status.hold`: the run's stopping rule would fire once the batches in
        # flight return): a request with no examples, told with []. A replayed log repeats the holds it
        # logged (a resumed run may stop by another rule); a request it never told (in flight at the
        # end, e.g. a hold queued behind a batch of its model that never returned) is asked as the
        # kernel says now: with the same batches in flight as when it was first asked, the same.
        logged = self._replaying and self._asks in self._logged_tickets
        hold = self._asks in self._logged_holds if logged else bool(hold_now)
        status = status._replace(done=np.bool_(False), hold=np.bool_(hold))
        state, i, size, examples = self._ask_fn(self._episode, self._state, self._params, np.int32(self._t), status,
                                                Waiting(in_flight, blocked, np.bool_(due)))
        i, size, examples = jax.device_get((i, size, examples))
        i, size = int(i), int(size)
        if hold:
            self._state = state
            request = self._issue(self._t, i, np.zeros(0, np.int64))
            self._t += 1
            return request
        unobserved = self._unobserved(i, in_flight) if size else 0
        if size == 0 or size < min(config.batch_size, unobserved):
            # No full batch fits: stop here rather than shorten it (the stopping bound needs full batches).
            if not self._pending:
                self._finished = True
            return None
        self._state = state
        examples = examples[:size] if self._order is None else self._next_in_order(i, size)
        request = self._issue(self._t, i, examples)
        self._t += 1
        return request

    def _unobserved(self, i: int, in_flight: engine.InFlight) -> int:
        """Model ``i``'s examples neither observed nor in flight."""
        population, n_obs = jax.device_get((self._state.ledger.population, self._state.ledger.n_obs))
        return int(population[i]) - int(n_obs[i]) - int(in_flight.cells[i])

    def _next_in_order(self, i: int, size: int) -> np.ndarray:
        """The examples of model ``i``'s next batch in its given order: its next ``size`` examples neither
        told nor in flight (cells logged as paid are among them, and told from the log)."""
        asked = {j for r in self._pending.values() if r.model_index == i for j in r.example_index}
        return np.asarray([j for j in self._order[i] if j not in self._told[i] and j not in asked][:size])

    def tell(self, request: Request, scores) -> None:
        """Record the scores of ``request`` (one per example, in [0, 1]); logged before it counts."""
        self._check_request(request)
        scores = check_scores(request, scores)
        self.ledger.log_told(request, scores.tolist(), self._asks, self._stopped)
        self._apply(request, scores)

    def _check_request(self, request) -> None:
        """Refuse, before anything is written, a request this selector did not hand out as it is."""
        require(isinstance(request, Request), f"tell: expected a Request from ask(), got {type(request).__name__}")
        require(request.selector == self._identity,
                f"tell: request {request.ticket} was made by another selector; tell each selector its own requests")
        mine = self._pending.get(request.ticket)
        require(mine is not None, f"tell: request {request.ticket} is not in flight (already told, or never asked)")
        if mine != request:
            field = next(f.name for f in dataclasses.fields(Request) if getattr(mine, f.name) != getattr(request, f.name))
            raise PulseInputError(f"tell: request {request.ticket} was changed after ask() (its {field} differs); "
                                  "tell the request exactly as asked")

    def _apply(self, request: Request, scores: np.ndarray):
        del self._pending[request.ticket]
        if self._stopped:
            self._after_stop += len(request.example_index)
        i, index = request.model_index, np.asarray(request.example_index)
        self._told[i].update(zip(index.tolist(), scores.tolist()))
        if request.step == 0:
            self._initial_scores[i, index] = scores
            self._init_told[i] = True
            if self._init_told.all():
                start = engine.Start() if self.cost is None else engine.Start(
                    cost=jnp.broadcast_to(jnp.asarray(self.cost, jnp.float32)[:, None], self._initial_scores.shape))
                self._episode, self._state = self._init_fn(self._key, jnp.asarray(self._initial_scores),
                                                           jnp.asarray(self.V), self._params, start)
            return
        padded = np.zeros(self.config.batch_size, np.int32)
        padded[:len(index)] = index
        values = np.zeros(self.config.batch_size, np.float32)
        values[:len(index)] = scores
        batch = engine.Batch(np.int32(i), np.int32(len(index)), padded, np.arange(self.config.batch_size) < len(index),
                             values)
        self._state = self._tell_fn(self._episode, self._state, self._params, np.int32(request.step), batch)

    # ------------------------------------------------------------------ results

    def _stopping_now(self) -> tuple[bool, np.ndarray]:
        """``(done, claim)`` of the stopping rule now (before step ``self._t``), as a simulation checks it."""
        status = self._status_fn(self._state, self._params, np.int32(self._t), self._in_flight()[0])
        return bool(status.done), np.asarray(status.claim, bool)

    @property
    def stopped(self) -> bool:
        """Whether the stopping rule has ended the run (no more asks)."""
        return self._stopped

    @property
    def spent(self) -> int:
        return sum(len(v) for v in self._told.values())

    def evaluated(self) -> dict:
        """``{model: [example ids told]}``: every cell the log holds a score for."""
        return self._evaluated()

    def _evaluated(self) -> dict:
        """Model name -> the example ids it was evaluated on, in evaluation order."""
        return {name: [self.example_ids[j] for j in self._told[i]] for i, name in enumerate(self.models)}

    def result(self) -> Report:
        """Ranking, estimates with intervals, separation and the audit trail, at any time."""
        c, m = self.config, len(self.models)
        if self.initialized:
            est, ledger, low, high, (ok, certified) = jax.device_get(self._summary_fn(self._state, self._params))
            est, n_obs, n_pulls = np.asarray(est, np.float64), np.asarray(ledger.n_obs), np.asarray(ledger.n_pulls)
            low, high = np.asarray(low, np.float64), np.asarray(high, np.float64)
        else:   # during initialization: sample means of what has been seen, no bound yet
            n_obs = np.array([len(self._told[i]) for i in range(m)])
            n_pulls = (n_obs > 0).astype(int)
            sums = self._initial_scores.sum(axis=1)
            est = np.where(n_obs > 0, sums / np.maximum(n_obs, 1), np.nan)
            low, high = np.zeros(m), np.ones(m)
            ok = certified = False
        if not self.estimator.has_interval:
            low, high = np.full(m, np.nan), np.full(m, np.nan)
        seen = np.where(n_obs > 0, est, -np.inf)
        leader = int(np.argmax(seen))
        if not self.estimator.has_interval:
            separated, tied = None, ()
        else:
            separated = bool(ok) and self.initialized
            if separated:
                leader = int(certified)
            tied = tuple(self.models[j] for j in range(m) if j != leader and not high[j] < low[leader])
        claim = self._stopping_now()[1] if self.initialized else np.zeros(m, bool)
        names = [self.models[i] for i in np.flatnonzero(claim)]
        return Report(self.method, self.seed, self.models, est, low, high, n_obs,
                      n_pulls, self.spent, c.budget, self.delta, self.models[leader], separated, tied,
                      self._evaluated(), bool(float(self.params.cs_simultaneous) >= 1.0), stop=self.stop.name,
                      stopped=self._stopped, claimed=tuple(names),
                      certificate=self.stop.statement(names, self.delta, self.params.stop),
                      finished=self._finished or self.spent >= c.budget, groups=self._groups(est, low, high),
                      failed_attempts=self.ledger.failures()[0], retries=self.ledger.failures()[1],
                      after_stop=self._after_stop, stops_early=self.stop.stops_early)

    def _groups(self, est, low, high) -> tuple:
        """The models in groups whose intervals overlap, best first (none for a method without an interval)."""
        if not self.estimator.has_interval or not self.initialized:
            return ()
        return tuple(tuple(self.models[i] for i in g) for g in stopping.groups(est, low, high))

    def paired_difference(self, a: str, b: str) -> dict:
        """``mu_a - mu_b`` with an anytime-valid interval, and the mean of ``S_a - S_b`` on the shared examples.

        The interval is the difference of the two confidence sequences,
        ``[low_a - high_b, high_a - low_b]``: it holds at every look, for every
        pair at once, with probability >= 1 - delta when the sequences are
        simultaneous (``cs_simultaneous = 1``). At certification levels
        (``cs_simultaneous = 0``) one pair's interval holds on its own with
        probability >= 1 - delta (1 + 1/m): each model's lower sides fail with at
        most delta / (2 m), each upper side with at most delta / 2.
        ``common_mean`` (over the examples both models have
        seen) is descriptive only: it carries no guarantee of its own.
        """
        require(a in self.models and b in self.models, f"unknown model {a if a not in self.models else b!r}")
        ia, ib = self.models.index(a), self.models.index(b)
        report = self.result()
        common = sorted(set(self._told[ia]) & set(self._told[ib]))
        common_mean = None
        if common:
            common_mean = float(np.mean([float(self._told[ia][j]) - float(self._told[ib][j]) for j in common]))
        return {"models": (a, b), "estimate": plain_number(report.estimates[ia] - report.estimates[ib]),
                "low": plain_number(report.low[ia] - report.high[ib]), "high": plain_number(report.high[ia] - report.low[ib]),
                "n_common": len(common), "common_mean": common_mean}
