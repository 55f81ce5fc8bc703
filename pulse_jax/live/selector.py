"""Ask/tell best-model selection on real evaluations, on the simulation's own kernel.

``Selector`` drives the pure pieces of `pulse_jax.engine.build_kernel`
(``init``, ``select``, ``refit``, ``draw``, ``observe``) one batch at a time,
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
checked before every ask by the same `pulse_jax.engine.stop_status` that
stops a simulated run, on the kernel's anytime-valid confidence sequences
(`pulse_jax.stats.confidence.ConfSeq`): they are valid at every look, so
checking them after every batch is valid. The rule declares what its stop
certifies, and `Selector.result` states it. Naive-Pooling has no
interval, so it spends its budget.
"""
from __future__ import annotations

import dataclasses
import errno
import functools
import os
import secrets
import tempfile
import time
from pathlib import Path
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from pulse_jax.engine.compilation_cache import use_compilation_cache
from pulse_jax import engine, registry, stopping
from pulse_jax.stats import confidence, factorization
from pulse_jax.live import journal
from pulse_jax.engine import BanditConfig
from pulse_jax.errors import PulseInputError, require
from pulse_jax.engine.params import BanditParams, declared_params
from pulse_jax.stats.seeds import seed_key
from pulse_jax.live.report import Report, plain_number


#: Batches in flight by default (`pulse_jax.live.run`, ``select``, ``select_best``): on the built-in
#: example in ``select``'s configuration, 16 pay 1.03x the cells of one at a time in simulation and,
#: against a scorer that takes 50 ms a call, finish 15x sooner (docs/benchmarks/concurrency.md).
CONCURRENCY = 16

#: A failed log write is retried this many times, waiting ``WRITE_RETRY_WAIT * 2**k`` seconds.
WRITE_RETRIES, WRITE_RETRY_WAIT = 2, 0.05


class LogWriteError(PulseInputError):
    """The log cannot be written (e.g. a full disk); the message says which cells, if any, are asked again."""


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


def _save_atomically(path: Path, array) -> None:
    """Write ``array`` to ``path`` through a new temporary file and a rename, so a failed write (a full
    disk) leaves no truncated ``.npy`` behind; a failure is one line naming the file and the fix. The
    temporary file is created exclusively under a fresh name, so a link planted beside the log is never
    written through."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = None
    try:
        fd, partial = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
        with open(fd, "wb") as handle:
            np.save(handle, array)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, path)
    except OSError as err:
        if partial is not None:
            Path(partial).unlink(missing_ok=True)
        raise PulseInputError(f"{path}: cannot save the embeddings beside the log ({err.strerror or err}); free "
                              "space there or give --log in another folder, then run the same command again") from None


def draw_order(seed: int, model_index: int, n_examples: int, batch_size: int) -> np.ndarray:
    """Every example column in the order a selector with this seed draws them for model ``model_index``
    (batches of ``batch_size``; the same for the first look and later pulls): the draw key of a batch
    depends only on the seed, the model's index and how many examples it has seen (`sampling.draw_key`),
    so a model's draws form one uniform permutation fixed by the seed. An Inspect task ordered by it
    (`pulse_jax.harnesses.inspect_select`) is asked exactly what ``select`` asks."""
    from pulse_jax.stats import without_replacement as sampling

    examples_key = engine.draw_keys(jax.random.fold_in(seed_key(seed), 0), 1)[1]
    draw = _batch_draw(int(n_examples), int(batch_size))
    row, order = sampling.empty_mask(1, n_examples)[0], []
    while len(order) < n_examples:
        picked, row = draw(examples_key, jnp.int32(model_index), jnp.int32(len(order)), row)
        order += np.asarray(picked)[:min(batch_size, n_examples - len(order))].tolist()
    return np.asarray(order)


@functools.lru_cache(maxsize=8)
def _batch_draw(n_examples: int, batch_size: int):
    from pulse_jax.stats import without_replacement as sampling

    def draw(examples_key, i, seen, row):
        picked = sampling.draw(sampling.draw_key(examples_key, i, seen), row, seen, n_examples, batch_size)
        valid = jnp.arange(batch_size) < jnp.minimum(batch_size, n_examples - seen)
        return picked, sampling.mark(row, picked, valid)

    return jax.jit(draw)


class Asked(NamedTuple):
    """What an ask needs besides the state: the batches in flight (``in_flight``, an
    `pulse_jax.engine.InFlight`), the models that may not be asked now (``blocked``: with a batch in
    flight, for an estimator that draws by weights), the cells in flight (``reserved``) and whether the
    step refits (``due``)."""

    in_flight: engine.InFlight
    blocked: jax.Array
    reserved: jax.Array
    due: jax.Array


@functools.lru_cache(maxsize=16)
def _compiled(config: BanditConfig, estimator):
    """Jitted kernel pieces for one configuration and estimator object, shared by every selector that
    uses them (parameters are traced: selectors that differ only in them share the programs).

    The asking kernel never stops by itself (its stopping rule is the budget's): the selector checks
    its own rule with ``status`` before each ask, so a replayed log is followed to its end whatever the
    rule, and a resumed run may change the rule (e.g. spend the rest of the budget after a certificate).
    """
    kernel = engine.build_kernel(dataclasses.replace(config, stop="budget"), estimator)
    stopping = engine.build_kernel(config, estimator)
    status = jax.jit(stopping.stop_status)

    def ask(episode, state, params, t, asked: Asked):
        hold = stopping.held(state, params, t, asked.in_flight)    # by the run's own stopping rule
        state, choice = kernel.select(episode, state, params, t, asked.blocked, asked.reserved, in_flight=asked.in_flight)
        state = kernel.refit(episode, state, params, t, choice, due=asked.due)
        examples, _ = kernel.draw(episode, state, params, choice, asked.in_flight)
        return state, choice.model, choice.size, examples, hold

    def tell(episode, state, params, t, batch: engine.Batch):
        return kernel.observe(episode, state, params, t, batch)[0]

    def summary(state, params):
        estimates, low, high = kernel.bounds(state, params)
        return estimates, state.ledger, low, high

    return kernel, jax.jit(kernel.init), jax.jit(ask), jax.jit(tell), jax.jit(summary), status


def _plugin_numbers(numbers: dict) -> dict:
    """The estimator's and the rule's own numbers as header fields ``estimator.x``, ``rule.y`` (the
    stopping rule's are left out: a resumed run may stop by another rule)."""
    return {f"{part}.{name}": value for part in ("estimator", "rule") for name, value in numbers[part].items()}


class Selector:
    """Ask/tell best-model identification with PULSE, UCB-E or Naive-Pooling.

    Args:
      models: candidate names (unique).
      examples: the number of examples, or their ids (unique).
      budget: total cells, initialization included.
      method: the estimator: an `pulse_jax.Estimator` (e.g.
        ``pulse(variance_bound=...)`` or your own) or its name, "pulse"
        (default), "ucbe", "naive", "package.module:attribute".
      batch_size: examples per batch, as in `pulse_jax.BanditConfig`.
      init_batches: batches per model in the first look.
      exploration: the index rule's ``exploration`` (``rule.exploration``; None: the rule's default).
      refit_every: bandit steps between refits of the factorization (0: none after the first).
      delta: every interval holds with probability at least ``1 - delta``.
      seed: the run's seed (the same as ``simulate(..., seed)``'s first repetition).
      train: side information, a (n_train, n) matrix with NaN for missing cells (or a ``ScoreMatrix``
        whose examples are aligned by id).
      V: example embeddings (n, r) fitted earlier, instead of ``train`` (PULSE and Naive need one).
      rank: the rank of the embeddings fitted on ``train``.
      log: path of the log (an SQLite database, `pulse_jax.live.journal`); an existing log is
        resumed (a JSONL log of an earlier version is converted in place first).
      rule: a sampling rule or its name; ``"lucb"`` or ``"top_two"`` sample to certify the best model
        sooner.
      params: instead of ``exploration`` and ``delta``: a dict ``{name or path: value}``, a
        `pulse_jax.RunParams`, or a `pulse_jax.BanditParams`.
      cs_grid: ``> 0``: betting confidence sequences on a grid of that many bets; 0: Bernstein.
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
    """

    def __init__(self, models: Sequence[str], examples, budget: int, *, method="pulse",
                 batch_size: int = 8, init_batches: int = 1, exploration: float | None = None, refit_every: int = 1000,
                 delta: float = 0.05, seed: int = 0, train=None, V=None, rank: int = factorization.DEFAULT_RANK,
                 log=None, rule="ucbe", params: BanditParams | None = None, cs_grid: int = 0, stop=None,
                 order=None, concurrency: int | None = None, plan: dict | None = None):
        self.models = tuple(str(m) for m in models)
        require(len(set(self.models)) == len(self.models), "models: duplicate model names")
        ids = list(range(int(examples))) if isinstance(examples, (int, np.integer)) else list(examples)
        require(len(set(map(str, ids))) == len(ids), "examples: duplicate example ids")
        self.example_ids = tuple(ids)
        m, n = len(self.models), len(ids)
        self.estimator = engine.get_estimator(method)
        if stop is None:
            stop = "certified" if self.estimator.has_interval else "budget"
        self.config = BanditConfig(n_models=m, n_examples=n, budget=int(budget), batch_size=batch_size,
                                   init_batches=init_batches, refit_every=refit_every, rule=rule, cs_grid=cs_grid,
                                   stop=stop, concurrency=CONCURRENCY if concurrency is None else concurrency)
        if params is None:
            params = {"delta": delta, **({} if exploration is None else {"exploration": exploration})}
        engine.check_compatible(self.config, self.estimator)
        self.params = engine.resolve_params(params, engine.plugins_of(self.config, self.estimator))
        engine.check_levels(self.config, engine.plugins_of(self.config, self.estimator), self.params)
        seed_key(seed)
        self.method, self.seed = self.estimator.name, int(seed)
        self._order = self._check_order(order)
        self.log_path = Path(log) if log is not None else None
        self._identity = secrets.token_hex(8)
        self.plan = plan
        self._log_full = False      # the disk filled up: the reserve is in use, nothing more is asked
        self._no_room = False       # ... or the reserve could not be put back: nothing more is paid for
        # Lock the log before reading anything of it (sidecar included): a second process stops here.
        self._journal = journal.Journal(self.log_path) if self.log_path is not None else None
        self.V = self._side_information(train, V, rank)
        self._header = self._make_header()

        use_compilation_cache()
        self._key = jax.random.fold_in(seed_key(self.seed), 0)   # = simulate()'s repetition 0
        _, examples_key, _ = engine.draw_keys(self._key, m)
        self._initial_examples = np.asarray(engine.initial_draws(examples_key, self.config)[0])
        self._initial_scores = np.zeros((m, n), np.float32)   # the initial batches, until init runs
        self._init_told = np.zeros(m, bool)
        # model row -> {example column: score}, in evaluation order: the audit trail and paired differences
        self._told: dict[int, dict[int, float]] = {i: {} for i in range(m)}
        self._episode = self._state = None
        self._asks = 0              # requests issued
        self._t = 1                 # next bandit step
        self._pending: dict[int, Request] = {}
        self._paid: dict[int, dict] = {}   # ticket -> a paid record (model, examples, scores), not yet told
        self._finished = False
        self._stopped = False       # the stopping rule fired (final, like a simulated run's stop)
        self._after_stop = 0        # cells told after the stop fired (asked before it, in flight)
        self._replaying = False
        self._compile()
        self._failures = [0, 0]
        self._logged_holds: set = set()
        if self.log_path is not None:
            self._replaying = True
            try:
                self._open_log()
            finally:
                self._replaying = False

    def _compile(self) -> None:
        (self._kernel, self._init_fn, self._ask_fn, self._tell_fn, self._summary_fn,
         self._status_fn) = _compiled(self.config, self.estimator)
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

    def _check_order(self, order):
        """``order`` as one row of example columns per model (or None); refused in one line where it is
        not a permutation of the examples for every model, or the estimator draws by weights."""
        if order is None:
            return None
        require(self.estimator.draw_weights is None,
                f"order: {self.estimator.name!r} draws examples by weights; a given order needs a uniform draw")
        column = {str(e): j for j, e in enumerate(self.example_ids)}
        rows = []
        for name in self.models:
            require(name in order, f"order: no order for model {name!r}")
            ids = [str(e) for e in order[name]]
            missing = sorted(set(column) - set(ids))
            require(len(ids) == len(column) and not missing and len(set(ids)) == len(ids),
                    f"order of {name!r}: not a permutation of the {len(column)} examples"
                    + (f" ({len(missing)} missing, e.g. {missing[0]!r})" if missing else ""))
            rows.append([column[e] for e in ids])
        return rows

    def _side_information(self, train, V, rank):
        self._train_fingerprint = None
        if train is not None:
            raw = getattr(train, "scores", train)
            try:
                self._train_fingerprint = journal.fingerprint(np.asarray(raw, np.float32))
            except (TypeError, ValueError):
                pass                     # refused below, where train is checked
        if not self.estimator.uses_predictions:
            return np.zeros((self.config.n_examples, 1), np.float32)
        sidecar = self._sidecar()
        if sidecar is not None and sidecar.is_file() and self._journal.has_run():
            # resume with exactly the embeddings of the first run; refuse settings that contradict them
            try:
                first = np.load(sidecar, allow_pickle=False)
            except (OSError, ValueError) as err:
                raise PulseInputError(f"{sidecar}: cannot read the embeddings saved with the log: {err}") from None
            require(first.ndim != 2 or first.shape[0] == self.config.n_examples,
                    f"examples: this run has {self.config.n_examples} examples, but {self.log_path} was started with "
                    f"{first.shape[0]}; give the same examples (--examples) to resume, or a new log")
            require(first.ndim == 2 and np.isfinite(first).all(),
                    f"{sidecar}: not the (n_examples={self.config.n_examples}, rank) embeddings of this run")
            if V is not None:
                require(np.shape(V) == first.shape and np.allclose(np.asarray(V, np.float32), first),
                        f"V differs from the embeddings {self.log_path} was started with ({sidecar})")
            elif rank != first.shape[1]:
                raise PulseInputError(f"rank {rank} differs from rank {first.shape[1]}, which {self.log_path} was "
                                      f"started with ({sidecar}); use --rank {first.shape[1]} to resume")
            return first.astype(np.float32)
        require(train is not None or V is not None,
                f"method {self.estimator.name!r} needs side information: pass train= (historical scores on "
                "the same examples) or V= (example embeddings)")
        if V is None:
            from pulse_jax.io.data import ScoreMatrix

            if isinstance(train, ScoreMatrix):
                position = {str(e): k for k, e in enumerate(train.examples)}
                missing = [e for e in self.example_ids if str(e) not in position]
                require(not missing, f"{train.source}: no column for examples {missing[:3]} "
                                     f"({len(missing)} missing)")
                train = train.scores[:, [position[str(e)] for e in self.example_ids]]
            train = np.asarray(train, np.float32)
            require(train.ndim == 2 and train.shape[1] == self.config.n_examples,
                    f"train must have one column per example ({self.config.n_examples}), got shape {train.shape}")
            V = factorization.fit_example_embeddings(train, rank=rank, seed=self.seed)
        V = np.asarray(V, np.float32)
        require(V.ndim == 2 and V.shape[0] == self.config.n_examples and np.isfinite(V).all(),
                f"V must be a finite (n_examples={self.config.n_examples}, rank) array, got shape {V.shape}")
        if sidecar is not None:
            _save_atomically(sidecar, V)
        return V

    def _sidecar(self):
        return None if self.log_path is None else self.log_path.with_name(self.log_path.name + ".embeddings.npy")

    def _make_header(self) -> dict:
        """Everything that decides the run's requests: a resume with any difference is refused, naming it."""
        c = self.config
        return {"type": "header", "version": journal.LOG_VERSION, "method": self.method,
                "method_settings": registry.describe(self.estimator)["settings"], "seed": self.seed,
                "models": list(self.models), "examples": list(self.example_ids), "budget": c.budget,
                "batch_size": c.batch_size, "init_batches": c.init_batches, "refit_every": c.refit_every,
                "init_refit_epochs": c.init_refit_epochs, "refit_epochs": c.refit_epochs, "interval": c.interval,
                "cs_grid": c.cs_grid,
                "rule": c.rule.name, "rule_settings": registry.describe(c.rule)["settings"],
                # The engine's numbers and the estimator's and rule's own (the stopping rule may change on resume).
                **self.params.engine.to_dict(), **_plugin_numbers(self.params.to_dict()),
                "side_information": journal.fingerprint(self.V) if self.estimator.uses_predictions else None,
                "example_order": "drawn" if self._order is None else "given", "concurrency": c.concurrency}

    # ------------------------------------------------------------------ log

    def _open_log(self):
        """Lock the log, cut a torn tail, and replay what it holds (or start it with the header)."""
        header, records = self._journal.open()
        if header is None:
            self._journal.append({**self._header, "train": self._train_fingerprint,
                                  **({} if self.plan is None else {"plan": self.plan})})
            return
        self.plan = header.get("plan", self.plan)
        self._failures = list(self._journal.failures())
        journal.check_header(self.log_path, self._grown_budget(header), self._header)
        logged_train = header.get("train")
        require(self._train_fingerprint is None or logged_train in (None, self._train_fingerprint),
                f"train: these historical scores differ from the ones {self.log_path} was started with; resume "
                "with the same --train, or without --train (the run keeps its first embeddings)")
        records = list(records)            # verified whole before anything is replayed
        held = sum(len(r["examples"]) for _, r in records if r.get("type") == "tell" and isinstance(r.get("examples"), list))
        require(held <= self.config.budget, f"--budget {self.config.budget:,}: {self.log_path} already holds {held:,} "
                                            f"evaluated cells; give --budget {held:,} or more to continue it")
        self._replay(records)

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
        return {**logged, "budget": want}

    def _replay(self, records):
        told_on = {}
        self._logged_holds = {r.get("ticket") for _, r in records if r.get("type") == "tell" and r.get("examples") == []}
        for where, record in records:
            for field, kind in (("ticket", int), ("step", int), ("asks_issued", int), ("model", str),
                                ("examples", list), ("scores", list)):
                value = record.get(field)
                require(isinstance(value, kind) and not isinstance(value, bool),
                        f"{where}: field {field!r} is missing or not a{'n' if kind is int else ''} "
                        f"{kind.__name__} (was the log edited?)")
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
            self._apply(request, self._validate(request, record["scores"], where))
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
        return self._validate(request, record["scores"], f"{self.log_path}: paid batch {request.ticket}")

    @property
    def paid_batches(self) -> int:
        """Batches paid for and logged but not yet told (a resumed run tells them without paying again)."""
        return len(self._paid)

    def log_paid(self, request: Request, scores) -> None:
        """Log the scores of a batch in flight as paid (not told): a resumed run tells them where an
        uninterrupted run would have, without paying for them again."""
        self._check_request(request)
        scores = self._validate(request, scores)
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
        checked = self._validate(dataclasses.replace(request, example_ids=tuple(request.example_ids[k] for k in known)),
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

    @property
    def in_flight_cells(self) -> int:
        """Cells asked and not yet told (a resumed log: the batches in flight when its last run stopped,
        asked again unless logged as paid)."""
        return sum(len(r.example_ids) for r in self._pending.values() if self.paid_scores(r) is None)

    def close(self) -> None:
        """Release the log's lock (a finished or abandoned run); the log stays resumable."""
        if getattr(self, "_journal", None) is not None:
            self._journal.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

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
        blocked = batches > 0 if self.estimator.draw_weights is not None else np.zeros(m, bool)
        return engine.InFlight(jnp.asarray(cells), jnp.asarray(batches), jnp.asarray(rows)), blocked

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
        if self._log_full:
            raise self.log_full_error()
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
        if self._stopped or (not self._replaying and self._stop_status()[0]):
            # The stopping rule says done: nothing more is asked (the batches in flight are still told).
            self._stopped = True
            if not self._pending:
                self._finished = True
            return None
        due = bool(self._kernel.refit_due(self._t))
        if due and self._pending:
            return None
        in_flight, blocked = self._in_flight()
        asked = Asked(in_flight, jnp.asarray(blocked), jnp.sum(in_flight.cells), jnp.bool_(due))
        state, i, size, examples, hold = self._ask_fn(self._episode, self._state, self._params, jnp.int32(self._t),
                                                      asked)
        i, size = int(i), int(size)
        hold = self._asks in self._logged_holds if self._replaying else bool(hold)
        # Hold (`Kernel.held`: the run's stopping rule would fire once the batches in flight return): a
        # request with no examples, told with []. A replayed log repeats the holds it logged (a resumed
        # run may stop by another rule).
        if hold:
            self._state = state
            request = self._issue(self._t, i, np.zeros(0, np.int64))
            self._t += 1
            return request
        unobserved = (int(self._state.ledger.population[i]) - int(self._state.ledger.n_obs[i])
                      - int(in_flight.cells[i])) if size else 0
        if size == 0 or size < min(config.batch_size, unobserved):
            # No full batch fits: stop here rather than shorten it (the stopping bound needs full batches).
            if not self._pending:
                self._finished = True
            return None
        self._state = state
        examples = np.asarray(examples)[:size] if self._order is None else self._next_in_order(i, size)
        request = self._issue(self._t, i, examples)
        self._t += 1
        return request

    def _next_in_order(self, i: int, size: int) -> np.ndarray:
        """The examples of model ``i``'s next batch in its given order: the batch of a partly logged
        request with this ticket, as it was asked, else its next ``size`` unseen examples."""
        record = self._paid.get(self._asks)
        if record is not None and record["model"] == self.models[i] and len(record["examples"]) == size:
            column = {str(e): j for j, e in enumerate(self.example_ids)}
            index = [column.get(str(e)) for e in record["examples"]]
            if None not in index and not set(index) & set(self._told[i]):
                return np.asarray(index)
        asked = {j for r in self._pending.values() if r.model_index == i for j in r.example_index}
        return np.asarray([j for j in self._order[i] if j not in self._told[i] and j not in asked][:size])

    def tell(self, request: Request, scores) -> None:
        """Record the scores of ``request`` (one per example, in [0, 1]); logged before it counts."""
        self._check_request(request)
        scores = self._validate(request, scores)
        if self.log_path is not None:
            self._write({"type": "tell", "ticket": request.ticket, "step": request.step, "asks_issued": self._asks,
                         "model": request.model, "examples": list(request.example_ids), "scores": scores.tolist()})
        self._paid.pop(request.ticket, None)
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

    def _validate(self, request: Request, scores, where: str | None = None) -> np.ndarray:
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
                self._episode, self._state = self._init_fn(self._key, jnp.asarray(self._initial_scores),
                                                           jnp.asarray(self.V), self._params)
            return
        padded = np.zeros(self.config.batch_size, np.int32)
        padded[:len(index)] = index
        values = np.zeros(self.config.batch_size, np.float32)
        values[:len(index)] = scores
        batch = engine.Batch(jnp.int32(i), jnp.int32(len(index)), jnp.asarray(padded),
                             jnp.asarray(np.arange(self.config.batch_size) < len(index)), jnp.asarray(values))
        self._state = self._tell_fn(self._episode, self._state, self._params, jnp.int32(request.step), batch)

    # ------------------------------------------------------------------ results

    def _stop_status(self) -> tuple[bool, np.ndarray]:
        """``(done, claim)`` of the stopping rule now (before step ``self._t``), as a simulation checks it."""
        done, claim = self._status_fn(self._state, self._params, jnp.int32(self._t))
        return bool(done), np.asarray(claim, bool)

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
            est, ledger, low, high = self._summary_fn(self._state, self._params)
            est, n_obs, n_pulls = np.asarray(est, np.float64), np.asarray(ledger.n_obs), np.asarray(ledger.n_pulls)
            low, high = np.asarray(low, np.float64), np.asarray(high, np.float64)
        else:   # during initialization: sample means of what has been seen, no bound yet
            n_obs = np.array([len(self._told[i]) for i in range(m)])
            n_pulls = (n_obs > 0).astype(int)
            sums = self._initial_scores.sum(axis=1)
            est = np.where(n_obs > 0, sums / np.maximum(n_obs, 1), np.nan)
            low, high = np.zeros(m), np.ones(m)
        if not self.estimator.has_interval:
            low, high = np.full(m, np.nan), np.full(m, np.nan)
        seen = np.where(n_obs > 0, est, -np.inf)
        leader = int(np.argmax(seen))
        if not self.estimator.has_interval:
            separated, tied = None, ()
        else:
            ok, certified = confidence.certify(jnp.asarray(low), jnp.asarray(high))
            separated = bool(ok) and self.initialized
            if separated:
                leader = int(certified)
            tied = tuple(self.models[j] for j in range(m) if j != leader and not high[j] < low[leader])
        claim = self._stop_status()[1] if self.initialized else np.zeros(m, bool)
        names = [self.models[i] for i in np.flatnonzero(claim)]
        return Report(self.method, self.seed, self.models, est, low, high, n_obs,
                      n_pulls, self.spent, c.budget, self.delta, self.models[leader], separated, tied,
                      self._evaluated(), bool(float(self.params.cs_simultaneous) >= 1.0), stop=self.stop.name,
                      stopped=self._stopped, claimed=tuple(names),
                      certificate=self.stop.statement(names, self.delta, self.params.stop),
                      finished=self._finished or self.spent >= c.budget, groups=self._groups(est, low, high),
                      failed_attempts=self._failures[0], retries=self._failures[1], after_stop=self._after_stop)

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
