"""Live selection: pick the best real model, one batch of real evaluations at a time.

``Selector`` is an ask/tell front end to the *same* pure functions the
simulation engine runs (``bandit.reset/select/refit/draw/observe``), so a
selector fed the scores of a full matrix makes exactly the choices of
``simulate(..., seed)``'s first repetition. ``run`` drives it with the user's
``evaluate(model, example_ids) -> scores``.

Pending batches (``ask`` several times before ``tell``): a model has at most
one batch in flight, and ``ask`` skips models with one; a refit step waits
until nothing is in flight. Hence, for every batch, the observed set, the
predictions, lambda and the inclusion probability are fixed when it is asked
-- before its scores exist -- which is all Lemma 1 needs: each one-step
estimate stays unbiased whatever the order in which results come back. The
runner tells results in ask order, so a run is reproducible whatever the
timing of the evaluations.

Durability: every told batch is appended to a JSONL log (and fsynced) before
it changes the selector. A selector created with an existing log replays it,
checks every replayed request against the log, and continues; batches that
were in flight when the process died are asked again (they are the only
loss). The example embeddings are saved next to the log, so a resumed run
uses exactly the same side information.

Stopping bound: the engine's anytime-valid confidence sequences
(:class:`pulse_jax.confidence.ConfSeq`), simultaneous over the models and
valid at every look, so checking them after every batch is valid. A batch's
observations are taken in the order its examples were drawn, with the
predictions and lambda fixed when it was asked. Naive-Pooling has none.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from collections import deque
from pathlib import Path
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from pulse_jax import bandit, factorization
from pulse_jax.bandit import BanditConfig
from pulse_jax.errors import PulseInputError, require

LOG_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Request:
    """One batch to evaluate: ``model`` on ``example_ids``."""

    ticket: int                 # running number of the ask
    step: int                   # bandit step t (0 for initialization batches)
    model: str
    model_index: int
    example_ids: tuple
    example_index: tuple[int, ...]


class EvaluationError(RuntimeError):
    """The user's evaluate function failed (after its retries)."""


@dataclasses.dataclass
class Report:
    """A selector's state for people: ranking, intervals, separation, audit trail."""

    method: str
    seed: int
    models: tuple[str, ...]
    estimates: np.ndarray
    low: np.ndarray              # confidence sequence: valid at every look, for every model at once
    high: np.ndarray
    n_obs: np.ndarray
    n_pulls: np.ndarray
    spent: int
    budget: int
    delta: float
    leader: str
    separated: bool | None       # None: the method has no valid interval (Naive-Pooling)
    tied_with_leader: tuple[str, ...]
    evaluated: dict               # model -> example ids, in evaluation order

    @property
    def ranking(self) -> list[str]:
        order = np.argsort(-np.nan_to_num(self.estimates, nan=-np.inf), kind="stable")
        return [self.models[i] for i in order]

    def to_dict(self) -> dict:
        rows = []
        for name in self.ranking:
            i = self.models.index(name)
            rows.append({"model": name, "estimate": _num(self.estimates[i]), "low": _num(self.low[i]),
                         "high": _num(self.high[i]), "cells": int(self.n_obs[i]), "pulls": int(self.n_pulls[i])})
        return {"method": self.method, "seed": self.seed, "spent": self.spent, "budget": self.budget,
                "delta": self.delta, "leader": self.leader, "separated": self.separated,
                "tied_with_leader": list(self.tied_with_leader), "ranking": rows,
                "evaluated": {k: list(v) for k, v in self.evaluated.items()}}

    def to_markdown(self) -> str:
        level = f"{1 - self.delta:.0%}"
        lines = [f"# Model selection ({self.method}, seed {self.seed})", "",
                 f"{self.spent:,} of {self.budget:,} cells evaluated. Leader: **{self.leader}**; "
                 + ("separated from every other model" if self.separated else
                    "not yet separated; tied with the leader: " + ", ".join(self.tied_with_leader)
                    if self.separated is not None else "no valid interval for this method")
                 + f" ({level} confidence sequences, simultaneous over the models and valid at every look).", "",
                 f"| rank | model | estimate | {level} confidence sequence | cells |",
                 "|---:|---|---:|---|---:|"]
        for k, row in enumerate(self.to_dict()["ranking"], start=1):
            lines.append(f"| {k} | {row['model']} | {_fmt(row['estimate'])} | [{_fmt(row['low'])}, "
                         f"{_fmt(row['high'])}] | {row['cells']} |")
        return "\n".join(lines) + "\n"

    def plot(self, path):
        from pulse_jax import plotting

        return plotting.estimates_with_intervals(self, path)


def _num(x):
    return None if x is None or not np.isfinite(x) else float(x)


def _fmt(x):
    return "n/a" if x is None else f"{x:.3f}"


def _fingerprint(array) -> str:
    return hashlib.sha256(np.ascontiguousarray(np.asarray(array, np.float32)).tobytes()).hexdigest()[:16]


@functools.lru_cache(maxsize=16)
def _compiled(config: BanditConfig, method: str):
    """Jitted engine pieces for one configuration, shared by every selector that uses it."""
    est = bandit.get_estimator(method)

    def reset(key, scores, V):
        return bandit.reset(key, scores, V, config, est)

    def ask(episode, state, t, blocked, reserved, do_refit):
        i, size = bandit.select(episode, state, t, config, est, blocked, reserved)
        state = bandit.refit_if_due(episode, state, size, config, est, do_refit)
        examples, _ = bandit.draw(episode, state, i, size, config)
        return state, i, size, examples

    def tell(episode, state, t, i, size, examples, scores):
        valid = jnp.arange(config.batch_size) < size
        state = bandit.observe(episode, state, t, i, size, examples, valid, scores, config, est)
        where = jnp.where(valid, examples, config.n_examples)      # out of range: dropped
        episode = episode._replace(scores=episode.scores.at[i, where].set(scores, mode="drop"))
        return episode, state

    def summary(state):
        low, high = bandit.interval_bounds(est, state, config)
        return bandit.current_estimates(est, state, config.n_examples), state.ledger, low, high

    return jax.jit(reset), jax.jit(ask), jax.jit(tell), jax.jit(summary)


class Selector:
    """Ask/tell best-model identification with PULSE, UCB-E or Naive-Pooling.

    Args:
      models: candidate names (unique).
      examples: the number of examples, or their ids (unique).
      budget: total cells, initialization included.
      method: "pulse" (default), "ucbe" or "naive".
      train: side information, a (n_train, n) matrix with NaN for missing
        cells (or a ``ScoreMatrix`` whose examples are aligned by id); or
      V: example embeddings (n, r) fitted earlier. PULSE and Naive need one.
      log: path of the JSONL log; an existing log is resumed.
      batch_size, init_batches, exploration, refit_every, delta, seed, rank, rule:
        as in :class:`pulse_jax.BanditConfig` (``rank`` for fitting ``train``;
        ``rule="lucb"`` samples to certify the best model sooner).
    """

    def __init__(self, models: Sequence[str], examples, budget: int, *, method: str = "pulse",
                 batch_size: int = 64, init_batches: int = 1, exploration: float = 1.0, refit_every: int = 1000,
                 delta: float = 0.05, seed: int = 0, train=None, V=None, rank: int = factorization.DEFAULT_RANK,
                 log=None, rule: str = "ucbe"):
        self.models = tuple(str(m) for m in models)
        require(len(set(self.models)) == len(self.models), "models: duplicate model names")
        ids = list(range(int(examples))) if isinstance(examples, (int, np.integer)) else list(examples)
        require(len(set(map(str, ids))) == len(ids), "examples: duplicate example ids")
        self.example_ids = tuple(ids)
        m, n = len(self.models), len(ids)
        self.config = BanditConfig(n_models=m, n_examples=n, budget=int(budget), batch_size=batch_size,
                                   init_batches=init_batches, exploration=exploration, refit_every=refit_every,
                                   delta=delta, rule=rule)
        self.estimator = bandit.get_estimator(method)
        self.method, self.seed = self.estimator.name, int(seed)
        self.log_path = Path(log) if log is not None else None
        self.V = self._side_information(train, V, rank)
        self._header = self._make_header()

        self._key = jax.random.fold_in(jax.random.PRNGKey(self.seed), 0)   # = simulate()'s repetition 0
        _, examples_key, _ = bandit.draw_keys(self._key, m)
        self._initial_examples = np.asarray(bandit.initial_draws(examples_key, self.config)[0])
        self._buffer = np.zeros((m, n), np.float32)
        self._init_told = np.zeros(m, bool)
        self._episode = self._state = None
        self._asks = 0              # requests issued
        self._t = 1                 # next bandit step
        self._pending: dict[int, Request] = {}
        self._evaluated: dict[str, list] = {name: [] for name in self.models}
        self._finished = False
        self._compile()
        if self.log_path is not None:
            self._open_log()

    # ------------------------------------------------------------------ setup

    def _side_information(self, train, V, rank):
        if not self.estimator.uses_predictions:
            return np.zeros((self.config.n_examples, 1), np.float32)
        sidecar = self._sidecar()
        if sidecar is not None and sidecar.is_file() and self.log_path.is_file():
            return np.load(sidecar)   # resume with exactly the embeddings of the first run
        require(train is not None or V is not None,
                f"method {self.estimator.name!r} needs side information: pass train= (historical scores on "
                "the same examples) or V= (example embeddings)")
        if V is None:
            from pulse_jax.data import ScoreMatrix

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
            sidecar.parent.mkdir(parents=True, exist_ok=True)
            np.save(sidecar, V)
        return V

    def _sidecar(self):
        return None if self.log_path is None else self.log_path.with_name(self.log_path.name + ".embeddings.npy")

    def _make_header(self) -> dict:
        c = self.config
        return {"type": "header", "version": LOG_VERSION, "method": self.method, "seed": self.seed,
                "models": list(self.models), "examples": list(self.example_ids), "budget": c.budget,
                "batch_size": c.batch_size, "init_batches": c.init_batches, "exploration": c.exploration,
                "refit_every": c.refit_every, "delta": c.delta, "rule": c.rule,
                "side_information": _fingerprint(self.V) if self.estimator.uses_predictions else None}

    def _compile(self):
        self._reset, self._ask_fn, self._tell_fn, self._summary_fn = _compiled(self.config, self.method)

    # ------------------------------------------------------------------ log

    def _open_log(self):
        path = self.log_path
        if path.is_file() and path.stat().st_size > 0:
            self._replay(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._append(self._header)

    def _append(self, record: dict):
        with open(self.log_path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def _replay(self, path: Path):
        lines = path.read_text(encoding="utf-8").splitlines()
        try:
            header = json.loads(lines[0])
        except (json.JSONDecodeError, IndexError):
            raise PulseInputError(f"{path}: line 1 is not a pulse-jax log header") from None
        require(header.get("type") == "header", f"{path}: line 1 is not a pulse-jax log header")
        for key, value in self._header.items():
            logged = header.get(key, "ucbe" if key == "rule" else None)   # logs from before rules existed
            if logged != value:
                shown = (lambda v: f"{len(v)} entries" if isinstance(v, list) else repr(v))
                raise PulseInputError(f"{path} was written by a different configuration: {key} is "
                                      f"{shown(logged)} in the log, {shown(value)} here")
        for number, line in enumerate(lines[1:], start=2):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                if number == len(lines):   # a torn last line: the write it belonged to never completed
                    break
                raise PulseInputError(f"{path}: line {number} is not valid JSON") from None
            while self._asks < record["asks_issued"]:
                if self.ask() is None:
                    raise PulseInputError(f"{path}: line {number}: this selector cannot reproduce the logged "
                                          "requests (was the log edited?)")
            request = self._pending.get(record["ticket"])
            if (request is None or request.model != record["model"]
                    or list(request.example_ids) != record["examples"]):
                raise PulseInputError(f"{path}: line {number}: logged batch (model {record['model']!r}, ticket "
                                      f"{record['ticket']}) differs from what this selector asks; the log belongs "
                                      "to another run")
            self._apply(request, np.asarray(record["scores"], np.float32))

    # ------------------------------------------------------------------ ask / tell

    @property
    def initialized(self) -> bool:
        return self._state is not None

    def pending(self) -> list[Request]:
        """Requests asked but not told, in ask order."""
        return [self._pending[k] for k in sorted(self._pending)]

    def _blocked(self) -> np.ndarray:
        blocked = np.zeros(len(self.models), bool)
        for request in self._pending.values():
            blocked[request.model_index] = True
        return blocked

    def _issue(self, step: int, i: int, index: np.ndarray) -> Request:
        request = Request(self._asks, step, self.models[i], i, tuple(self.example_ids[j] for j in index),
                          tuple(int(j) for j in index))
        self._pending[self._asks] = request
        self._asks += 1
        return request

    def ask(self) -> Request | None:
        """The next batch to evaluate, or None when nothing can be asked now.

        None means: the budget is spent or every model is known exactly (the
        run is over), or the next request must wait for batches in flight (a
        refit step, or every remaining model already has a batch in flight).
        """
        if self._finished:
            return None
        config = self.config
        if not self.initialized:
            asked = {r.model_index for r in self._pending.values()}
            for i in range(len(self.models)):
                if not self._init_told[i] and i not in asked:
                    return self._issue(0, i, self._initial_examples[i])
            return None
        do_refit = self.estimator.uses_predictions and config.refit_every > 0 and self._t % config.refit_every == 0
        if do_refit and self._pending:
            return None
        reserved = sum(len(r.example_index) for r in self._pending.values())
        state, i, size, examples = self._ask_fn(self._episode, self._state, jnp.int32(self._t),
                                                jnp.asarray(self._blocked()), jnp.int32(reserved),
                                                jnp.bool_(do_refit))
        i, size = int(i), int(size)
        unobserved = config.n_examples - int(self._state.ledger.n_obs[i]) if size else 0
        if size == 0 or size < min(config.batch_size, unobserved):
            # No full batch fits: stop here rather than shorten it (the stopping bound needs full batches).
            if not self._pending:
                self._finished = True
            return None
        self._state = state
        request = self._issue(self._t, i, np.asarray(examples)[:size])
        self._t += 1
        return request

    def tell(self, request: Request, scores) -> None:
        """Record the scores of ``request`` (one per example, in [0, 1]); logged before it counts."""
        require(isinstance(request, Request) and request.ticket in self._pending,
                f"tell: unknown or already told request {getattr(request, 'ticket', request)!r}")
        scores = self._validate(request, scores)
        if self.log_path is not None:
            self._append({"type": "tell", "ticket": request.ticket, "step": request.step,
                          "asks_issued": self._asks, "model": request.model,
                          "examples": list(request.example_ids), "scores": scores.tolist()})
        self._apply(request, scores)

    def _validate(self, request: Request, scores) -> np.ndarray:
        where = f"model {request.model!r}, request {request.ticket}"
        try:
            values = np.asarray(scores, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise PulseInputError(f"{where}: scores are not numbers: {scores!r}"[:300]) from None
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
        i, index = request.model_index, np.asarray(request.example_index)
        self._evaluated[request.model].extend(request.example_ids)
        if request.step == 0:
            self._buffer[i, index] = scores
            self._init_told[i] = True
            if self._init_told.all():
                self._episode, self._state = self._reset(self._key, jnp.asarray(self._buffer), jnp.asarray(self.V))
            return
        padded = np.zeros(self.config.batch_size, np.int32)
        padded[:len(index)] = index
        values = np.zeros(self.config.batch_size, np.float32)
        values[:len(index)] = scores
        self._episode, self._state = self._tell_fn(self._episode, self._state, jnp.int32(request.step),
                                                   jnp.int32(i), jnp.int32(len(index)), jnp.asarray(padded),
                                                   jnp.asarray(values))

    # ------------------------------------------------------------------ results

    @property
    def spent(self) -> int:
        return sum(len(v) for v in self._evaluated.values())

    def result(self) -> Report:
        """Ranking, estimates with intervals, separation and the audit trail, at any time."""
        c, m, n = self.config, len(self.models), self.config.n_examples
        if self.initialized:
            est, ledger, low, high = self._summary_fn(self._state)
            est, n_obs, n_pulls = np.asarray(est, np.float64), np.asarray(ledger.n_obs), np.asarray(ledger.n_pulls)
            low, high = np.asarray(low, np.float64), np.asarray(high, np.float64)
        else:   # during initialization: sample means of what has been seen, no bound yet
            n_obs = np.array([len(self._evaluated[name]) for name in self.models])
            n_pulls = (n_obs > 0).astype(int)
            sums = self._buffer.sum(axis=1)   # holds the told initial batches only
            est = np.where(n_obs > 0, sums / np.maximum(n_obs, 1), np.nan)
            low, high = np.zeros(m), np.ones(m)
        if self.method == "naive":
            low, high = np.full(m, np.nan), np.full(m, np.nan)
        seen = np.where(n_obs > 0, est, -np.inf)
        leader = int(np.argmax(seen))
        if self.method == "naive":
            separated, tied = None, ()
        else:
            ok, certified = bandit.certify(jnp.asarray(low), jnp.asarray(high))
            separated = bool(ok) and self.initialized
            if separated:
                leader = int(certified)
            tied = tuple(self.models[j] for j in range(m) if j != leader and not high[j] < low[leader])
        return Report(self.method, self.seed, self.models, est, low, high, n_obs,
                      n_pulls, self.spent, c.budget, c.delta, self.models[leader], separated, tied,
                      {k: list(v) for k, v in self._evaluated.items()})

    def paired_difference(self, a: str, b: str) -> dict:
        """``mu_a - mu_b`` with an anytime-valid interval, and the mean of ``S_a - S_b`` on the shared examples.

        The interval is the difference of the two confidence sequences,
        ``[low_a - high_b, high_a - low_b]``: it holds at every look, for every
        pair at once, with probability >= 1 - delta (the sequences are
        simultaneous). ``common_mean`` (over the examples both models have
        seen) is descriptive only: it carries no guarantee of its own.
        """
        require(a in self.models and b in self.models, f"unknown model {a if a not in self.models else b!r}")
        ia, ib = self.models.index(a), self.models.index(b)
        report = self.result()
        seen_a = set(self._evaluated[a])
        common = [e for e in self._evaluated[b] if e in seen_a]
        common_mean = None
        if common:
            position = {e: k for k, e in enumerate(self.example_ids)}
            cols = [position[e] for e in common]
            scores = self._current_scores()
            common_mean = float(np.mean(scores[ia, cols].astype(np.float64) - scores[ib, cols]))
        return {"models": (a, b), "estimate": _num(report.estimates[ia] - report.estimates[ib]),
                "low": _num(report.low[ia] - report.high[ib]), "high": _num(report.high[ia] - report.low[ib]),
                "n_common": len(common), "common_mean": common_mean}

    def _current_scores(self) -> np.ndarray:
        return np.asarray(self._episode.scores) if self.initialized else self._buffer


# ---------------------------------------------------------------------------- runner


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
            except Exception as err:   # noqa: BLE001 -- the user's code may raise anything
                if attempt == retries:
                    raise EvaluationError(f"evaluate failed for model {request.model!r} on {len(request.example_ids)} "
                                          f"examples (request {request.ticket}) after {retries + 1} attempt(s): "
                                          f"{type(err).__name__}: {err}") from err
                time.sleep(retry_wait * 2**attempt)

    def separated():
        return stop_early and selector.initialized and selector.method != "naive" and selector.result().separated

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
