"""Best-model selection inside Inspect: an early-stopping manager for ``inspect eval --model a,b,c``.

::

    from pulse_jax.harnesses.inspect_select import select_best

    @task
    def arithmetic():
        return select_best(Task(dataset=..., solver=generate(), scorer=match()), log="run.db",
                           train="history.csv", delta=0.05)

``inspect eval arithmetic.py --model a,b,c`` (or ``inspect_ai.eval`` / ``eval_set``) then evaluates
each model only on the samples the selection asks for and stops every model once the best is
certified; the run's certificate, spend and tie groups go into each model's Inspect log
(``results.early_stopping.metadata``) and into ``<log>_report/``.

How it fits Inspect (inspect-ai's ``_eval``): the ``@task`` function runs once per model, with that
model active, so ``select_best`` learns every model before any task starts; the models' tasks then
run at once in one process (``max_tasks`` defaults to the number of models), each calling
``schedule_sample`` for its samples in dataset order, inside a sample slot. One selection per log
(`_Selection`) serves them all: a sample of a model the selection has not asked for waits in
``schedule_sample`` (holding its slot; the samples asked for are always the earliest waiting ones,
so the wait never starves them), an asked sample is released, its score arrives in
``complete_sample``, and once the selection is over every waiting sample gets an ``EarlyStop``.

Validity: each model must see its samples in a uniformly random order, independent of the other
models' and revealed by nothing the selection uses (docs/harness.md). ``select_best(task)`` imposes
it: each model's copy of the dataset is put in the order the selection itself draws that model's
samples (`pulse_jax.live.draw_order`, fixed by the seed and the model's place in
``--model``), so the eval asks exactly what ``pulse-jax select --inspect-task`` asks with the same
seed, and a resumed run sees the same order. A task that uses the manager
alone (``Task(early_stopping=select_best(...))``) must shuffle its dataset itself, for every model
independently; an unshuffled dataset, or one order shared by the models, is refused in one line.

Durability: the same SQLite log as ``pulse-jax select``; each finished sample is committed as it comes
back, so the same ``inspect eval`` run again after a ``kill -9`` or a model's failure (only that model's
log is an error; the others end early-stopped) generates no scored sample twice.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import time
import types
from pathlib import Path
from typing import Mapping

import numpy as np

from pulse_jax.errors import PulseInputError, notes_as_lines, require
from pulse_jax.harnesses import inspect_logs
from pulse_jax.harnesses.inspect_hooks import (MANAGER, SELECTIONS, commit_on_return, noted_inspect_logs,
                                               scored_samples, selection_metadata, task_ended, task_started,
                                               watch_selections)
from pulse_jax.live import report_files, runner_log

_WAIT = object()      # schedule_sample's "not yet"


def select_best(task=None, *, log, models=None, scorer: str | None = None, metric: str | None = None,
                value_map: Mapping | None = None, report=None, **options):
    """Certified best-model selection as Inspect's early-stopping manager.

    Args:
      task: an Inspect ``Task``: its dataset is put in the order the selection draws the samples of the
        model Inspect builds it for, its ``early_stopping`` set, and it is returned. None: the manager alone, for
        ``Task(early_stopping=...)`` (the task must then shuffle its samples itself).
      log: the selection's log (SQLite, as ``pulse-jax select --log``); run the same eval again to resume.
      models: the candidates, in the selection's order (default: the models Inspect builds the task for,
        in the order of ``--model``); needed when the task object is made outside an ``@task`` function.
      scorer: the task's scorer to read (as ``select --inspect-scorer``; default: its only one).
      metric: for a scorer whose values are dicts, the key to read (``--inspect-metric``).
      value_map: score values as numbers in [0, 1] added to ``C``=1, ``I``=0, ``P``=0.5, ``N``=0
        (``--value-map``).
      report: the report folder (default ``<log name>_report`` beside the log); one holding another
        run's results needs ``force=True``, as ``select --report`` needs ``--force``.
      **options: ``pulse-jax select``'s options by their long names (``budget=3200``, ``delta=0.05``,
        ``method="ucbe"``, ``train="history.csv"``, ``epsilon=0.02``, ``top_k=2``, ``price=["*=3/15"]``,
        ``budget_usd=0.25``, ``usage="history"``, ``seed=0``, ...), with its defaults and checks;
        ``budget`` defaults to every cell.

    Returns:
      ``task`` with the manager, or the manager (an ``inspect_ai.util.EarlyStopping``).

    What can be refused when the task is made is refused then (options, epochs, samples without ids):
    one `PulseInputError` line that ``inspect eval`` prints once, without a traceback.
    """
    # Inspect collects its hooks when an eval starts: registered here, as the task is made, they serve
    # this eval already (a scored sample reaches the log even when its task ends before complete_sample).
    watch_selections()
    try:
        return _select_best(task, log, models=models, scorer=scorer, metric=metric, value_map=value_map,
                            report=report, options=options)
    except PulseInputError as err:
        raise _refusal(err) from None


def _refusal(err: PulseInputError) -> PulseInputError:
    """``err`` as an error that is also Inspect's ``PrerequisiteError`` (Inspect prints its message alone)."""
    try:
        from inspect_ai._util.error import PrerequisiteError   # private, for want of a public one
    except ImportError:
        return err

    class SelectionRefused(PulseInputError, PrerequisiteError):
        def __init__(self, message: str):
            PulseInputError.__init__(self, message)
            self.message = f"pulse-jax: error: {message}"

    return SelectionRefused(str(err))


def _epochs(task) -> int:
    """How many epochs an Inspect task runs (an int, an ``Epochs``, or None: 1)."""
    epochs = getattr(task, "epochs", None)
    epochs = getattr(epochs, "epochs", epochs)
    return 1 if epochs is None else int(epochs)


def _select_best(task, log, *, models, scorer, metric, value_map, report, options):
    path = Path(log).resolve()
    require(path.parent.is_dir(), f"select_best: log {log}: its folder {path.parent} does not exist")
    from pulse_jax.live.plan import Plan
    require("log" not in options, "select_best: log is given twice")
    try:
        require(report is None or isinstance(report, (str, Path)), f"report must be a folder name, got {report!r}")
        with notes_as_lines():
            plan = Plan.from_dict({"log": str(path), "report": None if report is None else str(report), **options})
            plan.plugins()      # names, --param paths, the train file: refused before any sample
    except PulseInputError as err:
        raise PulseInputError(f"select_best: {err}") from None
    selection = SELECTIONS.shared(path, plan, models,
                                  lambda: _Selection(path, plan, models, scorer, metric, value_map))
    model = _active_model()
    if model is not None:
        selection.expect(model)
    manager = SelectBest(selection, model)
    if task is None:
        return manager
    from inspect_ai import Task

    require(isinstance(task, Task), f"select_best: expected an Inspect Task, got {type(task).__name__}")
    require(_epochs(task) == 1, f"select_best: the task runs {_epochs(task)} epochs; a selection scores each sample "
                                "once (epochs=1)")
    require(model is not None, "select_best(task): call it inside an @task function, where Inspect builds the task "
                               "for one model (each model then gets its own sample order)")
    task.dataset = selection.impose_order(task.dataset, model)
    task.early_stopping = manager
    commit_on_return(task, selection, model)
    return task


def _active_model() -> str | None:
    """The model Inspect is building a task for (None outside task resolution)."""
    try:
        # Private, for want of a public one: ``inspect_ai.model.get_model()`` falls back to
        # $INSPECT_EVAL_MODEL and builds a model outside an eval, where this must say None.
        from inspect_ai.model._model import active_model
    except ImportError:      # another inspect-ai layout: the models come from start_task or models=
        return None
    model = active_model()
    return None if model is None else str(model)


def _sample_tokens() -> tuple[float, float]:
    """Input and output tokens of the sample being completed (NaN where Inspect does not say)."""
    try:
        # Private, for want of a public one: the manager's complete_sample gets the scores only, and
        # the sample's token usage is public only in its log, after the eval.
        from inspect_ai.model._model import sample_model_usage

        usage = sample_model_usage()
    except (ImportError, LookupError):
        return math.nan, math.nan
    return inspect_logs.usage_tokens(usage)


@dataclasses.dataclass
class _Lane:
    """One model's task: its samples in the order Inspect schedules them, those released to be
    evaluated, those whose score the log holds, and the event its waiting samples wait on."""

    order: list
    released: set = dataclasses.field(default_factory=set)
    scored: set = dataclasses.field(default_factory=set)
    wake: object = None


@dataclasses.dataclass
class _Batch:
    request: object
    scores: dict


class _Selection:
    """The selection one log runs, shared by the tasks of every model in this process."""

    def __init__(self, path: Path, plan, models, scorer, metric, value_map):
        self.path, self.plan = path, plan
        self.named_models = None if models is None else [str(m) for m in models]
        self.expected = list(self.named_models or [])
        self.scorer, self.metric = scorer, metric
        self.value_map = {**inspect_logs.VALUE_MAP, **dict(value_map or {})}
        self.seed = plan.seed
        self.examples = None        # the samples' ids in the task's own order (select_best(task)), else sorted
        self.lanes: dict[str, _Lane] = {}
        self.one_scorer: dict[str, bool] = {}     # model -> its task has one scorer (`score_returned`)
        self.batches: dict[str, list[_Batch]] = {}   # per model, its batches in flight in ask order
        self.selector = self.meter = self.waiting = None
        self.error = self.failed_model = None   # failed_model: a model whose API failed (the others early-stop)
        self.done = self.over = False
        self.final: dict | None = None
        self.closed_tasks = 0
        self._wake = None
        self.usage_path = path.with_name(path.name + ".tokens.jsonl")
        self.tokens = self._read_tokens()
        # Time, waits left out: in the manager's callbacks (all of it), in the selector's asks, tells and
        # result (the selection's own compute, which `select --inspect-task` spends too), and starting
        # (sample orders, the selector's start and compilation, once per run).
        self.seconds = self.selector_seconds = self.start_seconds = 0.0

    # ------------------------------------------------------------------ models and orders

    def expect(self, model: str) -> None:
        if self.named_models is None and model not in self.expected:
            self.expected.append(model)

    def impose_order(self, dataset, model: str):
        """``model``'s copy of the dataset in the order the selection draws its samples (`draw_order`: the
        order ``select`` draws them in, a uniform permutation fixed by the seed and the model's index)."""
        from inspect_ai.dataset import MemoryDataset

        from pulse_jax.live.compiled import draw_order

        require(model in self.expected, f"select_best: model {model} is not among models= ({', '.join(self.expected)})")
        samples = list(dataset)
        ids = [str(s.id) for s in samples]
        require(all(s.id is not None for s in samples) and len(set(ids)) == len(ids),
                "select_best: the task needs a unique id on every sample")
        require(self.examples in (None, ids), f"select_best: {model}'s task has other samples than the first model's")
        self.examples = ids
        start = time.perf_counter()
        order = draw_order(self.seed, self.expected.index(model), len(samples), self.plan.batch_size)
        self.start_seconds += time.perf_counter() - start
        self.seconds += time.perf_counter() - start
        return MemoryDataset([samples[j] for j in order], name=dataset.name, location=dataset.location, shuffled=True)

    def start(self, model: str, spec, samples, epochs: int) -> None:
        """A model's task starts: check its samples and order; the last one to start starts the selection."""
        require(epochs == 1, f"select_best: task {spec.task} runs {epochs} epochs; a selection scores each sample "
                             "once (epochs=1)")
        require(spec.dataset.shuffled, f"select_best: task {spec.task} does not shuffle its samples for {model}; "
                                       "wrap the task in select_best(Task(...)) inside its @task function, which "
                                       "gives each model its own order")
        ids = [str(s.id) for s in samples]
        require(all(s.id is not None for s in samples) and len(set(ids)) == len(ids),
                f"select_best: task {spec.task} needs a unique id on every sample")
        if self.named_models is not None:
            require(model in self.named_models, f"select_best: model {model} is not among models= "
                                                f"({', '.join(self.named_models)})")
        else:
            require(self.expected, "select_best: the task was made outside an @task function, so the models "
                                   "are unknown; give select_best(models=[...])")
            self.expect(model)
        require(model not in self.lanes, f"select_best: model {model} runs twice on {self.path.name}; give each "
                                         "candidate once")
        self.lanes[model] = _Lane(ids)
        self.one_scorer[model] = len(getattr(spec, "scorers", None) or ()) == 1     # an EvalSpec
        if set(self.lanes) >= set(self.expected):
            start, asked = time.perf_counter(), self.selector_seconds
            self._begin()       # its first asks count as the selector's
            self.start_seconds += time.perf_counter() - start - (self.selector_seconds - asked)

    def _begin(self) -> None:
        first = self.lanes[self.expected[0]].order
        for name in self.expected[1:]:
            order = self.lanes[name].order
            require(sorted(order) == sorted(first), f"select_best: {name} and {self.expected[0]} are evaluated on "
                                                    "different samples; give every model the same samples")
            require(order != first, f"select_best: {name} and {self.expected[0]} see the samples in one order; each "
                                    "model needs its own (wrap the task in select_best(Task(...)))")
        require(len(self.expected) >= 2, f"select_best: {len(self.expected)} model; a selection needs at least 2")
        examples = self.examples or sorted(first, key=inspect_logs.natural_order)
        history = inspect_logs.usage_history(self.plan.usage, self.scorer, self.metric, self.value_map) \
            if self.plan.usage and self.plan.has_money_side else None
        with notes_as_lines():      # under `inspect eval`, a note is a log line, not a warning with a source path
            self.meter = self.plan.meter(self.expected, self.token_sum, history=history)
            self.selector = self.plan.selector(self.expected, examples,
                                               order={m: self.lanes[m].order for m in self.expected},
                                               where="under Inspect",
                                               cost=None if self.meter is None else self.meter.expected)
        self._pool_inspect_logs()
        for m, cells in self.selector.evaluated().items():     # a resumed run's samples, told already
            self.lanes[m].scored.update(str(e) for e in cells)
        for request in self.selector.pending():   # a resumed log: the batches in flight when it stopped
            self._release(request)
        self.advance()

    # ------------------------------------------------------------------ the selection

    def advance(self) -> None:
        """Ask the batches that can be asked now; the run is over when nothing is in flight or askable."""
        selector = self.selector
        if self.error:      # a stopped selection asks nothing more; what returns is still kept
            return
        # select's --concurrency (default 16): each ask counts the batches in flight, so many at once cost
        # few extra samples; which ones are asked then depends on the order Inspect finishes samples in.
        # One batch at a time (concurrency=1) asks exactly what a plain ask/tell loop asks.
        while len(selector.pending()) - (self.waiting is not None) < selector.config.concurrency:
            if self.waiting is not None:
                request, self.waiting = self.waiting, None
            else:
                start = time.perf_counter()
                request = selector.ask()
                self.selector_seconds += time.perf_counter() - start
                if request is None:
                    break
            if self.meter is not None and request.example_ids and not self.meter.fits(
                    request.model, runner_log.unpaid_cells(selector, request),
                    selector.evaluated(), runner_log.asked_cells(selector)):
                # Not paid for: it waits for the batches in flight (`pulse_jax.live.run` does the same), and
                # the selection ends for its money budget if it still does not fit with nothing in flight.
                self.waiting = request
                break
            self._release(request)
        if len(selector.pending()) == (self.waiting is not None):
            self._finish()
            self.wake()

    def _release(self, request) -> None:
        """Let ``request``'s samples be evaluated (those the log holds as paid are told from it)."""
        known = runner_log.release(self.selector, request)     # the others counted as paid before any is generated
        self.batches.setdefault(request.model, []).append(_Batch(request, dict(known)))
        lane = self.lanes[request.model]
        lane.scored.update(str(e) for e in known)
        lane.released.update(str(e) for e in request.example_ids if e not in known)
        self.wake(request.model)
        self._tell_if_complete(request.model)

    def _tell_if_complete(self, model: str) -> bool:
        """Tell ``model``'s oldest batches that are whole, in ask order (a model's batches are told in the
        order they were asked: a later one drawn past an earlier one in flight waits for it)."""
        told = False
        queue = self.batches.get(model, [])
        while queue and all(e in queue[0].scores for e in queue[0].request.example_ids):
            batch = queue.pop(0)
            start = time.perf_counter()
            self.selector.tell(batch.request, [batch.scores[e] for e in batch.request.example_ids])
            self.selector_seconds += time.perf_counter() - start
            told = True
        return told

    def record(self, model: str, sample_id, scores, tokens=None) -> None:
        """A released sample's score: committed at once, and the batch told when it is whole (``tokens``:
        its input and output tokens; None: read from the sample being completed)."""
        batch = key = None
        for candidate in self.batches.get(model, []):
            key = next((e for e in candidate.request.example_ids if str(e) == str(sample_id)), None)
            if key is not None:
                batch = candidate
                break
        if key is None:
            return          # not asked by the selection (cannot happen: only asked samples are released)
        where = f"select_best: {model}, sample {sample_id}"
        chosen = self.scorer or next(iter(scores))
        require(chosen in scores, f"{where}: no scorer {chosen!r}; scorers present: {', '.join(scores)}")
        batch.scores[key] = inspect_logs.score_value(scores[chosen].score.value, self.value_map, where, self.metric)
        self._keep_tokens(model, str(sample_id), *(tokens or _sample_tokens()))
        if not self._tell_if_complete(model):
            self.selector.log_partial(batch.request, [batch.scores.get(e) for e in batch.request.example_ids])
            return
        self.advance()

    def _pool_inspect_logs(self) -> None:
        """Every sample that an earlier eval of this selection scored in Inspect's own logs, and that the
        selection's log holds neither as told nor as paid (Inspect can end a task between scoring a
        sample and handing the score to the manager), is committed to the log as paid: no scored sample
        is generated again, whichever batch asks it."""
        found = scored_samples(noted_inspect_logs(self.path), self.expected, self.scorer, self.metric, self.value_map)
        for model, cells in found.items():
            for sample, (_, tokens) in cells.items():
                if sample not in self.tokens.get(model, {}):
                    self._keep_tokens(model, sample, *tokens)
            runner_log.keep_scored(self.selector, model, {sample: value for sample, (value, _) in cells.items()})

    def score_returned(self, model: str, sample_id, event) -> None:
        """A sample's final score as its scorer returns it (an Inspect ``ScoreEvent``): recorded then, with
        the tokens the event says the sample used, when it is the score the selection reads (``scorer=``,
        or the task's one scorer)."""
        scorer = event.scorer
        if scorer is not None and (scorer == self.scorer if self.scorer else self.one_scorer.get(model)):
            tokens = inspect_logs.usage_tokens(event.model_usage) if event.model_usage else None
            self.scored(model, sample_id, {scorer: types.SimpleNamespace(score=event.score)}, tokens)

    def scored(self, model: str, sample_id, scores, tokens=None) -> None:
        """A sample Inspect scored (its ``on_sample_end``): recorded unless the manager has it already."""
        if self.selector is None or self.over or model not in self.lanes:
            return
        batch = next((b for b in self.batches.get(model, []) if str(sample_id) in map(str, b.request.example_ids)), None)
        if batch is not None and str(sample_id) not in map(str, batch.scores):
            with contextlib.suppress(PulseInputError):      # a score it cannot read: complete_sample says so
                self.record(model, sample_id, scores, tokens)

    def _finish(self) -> None:
        if self.done:
            return
        self.done = True
        start = time.perf_counter()
        report = self.selector.result()
        self.selector_seconds += time.perf_counter() - start
        if self.meter is not None:
            self.meter.update(self.selector.evaluated(), runner_log.asked_cells(self.selector))
            report = dataclasses.replace(report, spend=self.meter.summary(), spend_line=self.meter.line(),
                                         finished=True, prices=tuple(self.meter.expected),
                                         spent_by_model=tuple(self.meter.by_model()))
        self.final = selection_metadata(report, self)
        self._write_report(report)

    def fail(self, message: str) -> None:
        self.error = self.error or message
        self.wake()

    def model_failed(self, model: str, sample, why: str) -> None:
        """A sample of ``model`` failed after Inspect's retries: the selection cannot get its score, so it
        ends now, every model's task with this one line, and the report says why; what was paid stays
        in the log, and running the eval again resumes."""
        if self.done or self.error:
            return
        told = self.selector.spent if self.selector is not None else 0
        self.failed_model = model
        self.fail(f"select_best: model {model} failed on sample {sample} (after Inspect's retries): {why}. The "
                  f"selection stopped; {told:,} cells are safe in {self.path.name}: fix the model and run the same "
                  "eval again to continue")
        if self.selector is not None:
            report_files.write_report(self.plan, self.selector.result(), self.selector, figure=False, preface=f"**Stopped:** {self.error}",
                                   extra={"error": self.error, "manager": MANAGER})

    def wake(self, model: str | None = None) -> None:
        """Wake the samples waiting in ``model``'s task (every task's: None)."""
        for name, lane in self.lanes.items():
            if lane.wake is not None and model in (None, name):
                lane.wake.set()
                lane.wake = None
        if model is None and self._wake is not None:
            self._wake.set()
            self._wake = None

    async def changed(self, model: str | None = None) -> None:
        """Wait until the selection changes for ``model``'s task (a batch asked for it, the end, an error),
        or, for None, until it ends or fails."""
        import anyio

        lane = self.lanes.get(model)
        if lane is None:
            self._wake = self._wake or anyio.Event()
            await self._wake.wait()
            return
        lane.wake = lane.wake or anyio.Event()
        await lane.wake.wait()

    def time_split(self) -> dict:
        """The manager's time so far, waits left out: its Inspect side, the selector's asks, tells and result,
        and the start (orders, the selector's start and compilation)."""
        return {"manager": round(self.seconds - self.selector_seconds - self.start_seconds, 4),
                "selector": round(self.selector_seconds, 4), "start": round(self.start_seconds, 4)}

    def close(self) -> None:
        """End this selection for good (its eval failed, or every task ended): release the log."""
        self.over = True
        if self.selector is not None:
            self.selector.close()

    def task_done(self) -> None:
        self.closed_tasks += 1
        if self.closed_tasks >= len(self.lanes) and (self.done or self.error):
            self.close()

    # ------------------------------------------------------------------ tokens and the report

    def _read_tokens(self) -> dict:
        out: dict = {}
        if self.usage_path.is_file():
            for line in self.usage_path.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                    out.setdefault(row["model"], {})[row["sample"]] = (float(row["input"]), float(row["output"]))
                except (ValueError, KeyError, TypeError):
                    continue       # a line cut by a kill: its tokens are unknown
        return out

    def _keep_tokens(self, model: str, sample: str, t_in: float, t_out: float) -> None:
        self.tokens.setdefault(model, {})[sample] = (t_in, t_out)
        with open(self.usage_path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"model": model, "sample": sample, "input": t_in if math.isfinite(t_in) else None,
                                 "output": t_out if math.isfinite(t_out) else None}) + "\n")

    def token_sum(self, model: str, sample_ids) -> tuple[float, float]:
        rows = [self.tokens.get(model, {}).get(str(e)) for e in sample_ids]
        rows = [r for r in rows if r is not None]
        return float(np.nansum([r[0] for r in rows])), float(np.nansum([r[1] for r in rows]))

    def _write_report(self, report) -> None:
        report_files.write_report(self.plan, report, self.selector, extra={"manager": MANAGER})   # as select's: figure, provenance


@contextlib.contextmanager
def _guarded(selection):
    """A manager callback: its time counts as the manager's; an error in it fails the selection (every task
    ends with that one line, none waits); a cancellation passes through (Inspect cancels tasks it ends)."""
    start = time.perf_counter()
    try:
        yield
    except Exception as err:
        selection.fail(str(err) if isinstance(err, PulseInputError) else f"{type(err).__name__}: {err}")
        raise
    finally:
        selection.seconds += time.perf_counter() - start


class SelectBest:
    """Inspect's ``EarlyStopping`` for one model's task, on the selection its log runs (`select_best`)."""

    def __init__(self, selection: _Selection, model: str | None):
        self.selection, self.model = selection, model
        self.eval_id, self.early_stops = None, []

    async def start_task(self, task, samples, epochs: int) -> str:
        model = str(task.model)
        require(self.model in (None, model), f"select_best: one task object runs for {self.model} and {model}; build "
                                             "the task in an @task function so each model has its own")
        self.model = model
        with _guarded(self.selection):
            self.eval_id, self.early_stops = getattr(task, "eval_id", None), []
            task_started(self.eval_id, self.selection, model)
            self.selection.start(model, task, samples, epochs)
        return MANAGER

    async def schedule_sample(self, id, epoch: int):
        selection, key = self.selection, str(id)
        while True:
            start = time.perf_counter()
            decision = self._decide(id, epoch, key)
            selection.seconds += time.perf_counter() - start
            if decision is not _WAIT:
                return decision
            await selection.changed(self.model)

    def _decide(self, id, epoch: int, key: str):
        """``None`` (evaluate the sample now), an ``EarlyStop``, or `_WAIT`."""
        from inspect_ai.util import EarlyStop

        selection = self.selection
        if selection.error and selection.failed_model in (None, self.model):
            raise PulseInputError(selection.error)
        if key in selection.lanes[self.model].released and not selection.error:
            return None
        if selection.error:     # another model failed: this model's log keeps what it scored, no error
            stop = EarlyStop(id=id, epoch=epoch, reason=f"selection stopped: {selection.failed_model} failed")
        elif selection.done:
            stop = EarlyStop(id=id, epoch=epoch, reason=f"selection over: {selection.final['certificate']}")
        elif key in selection.lanes[self.model].scored:
            stop = EarlyStop(id=id, epoch=epoch, reason=f"scored in an earlier run ({selection.path.name})")
        else:
            return _WAIT
        self.early_stops.append(stop)
        return stop

    async def complete_sample(self, id, epoch: int, scores) -> None:
        with _guarded(self.selection):
            self.selection.record(self.model, id, scores)

    async def complete_task(self) -> dict:
        selection = self.selection
        while not (selection.done or selection.error):    # a model evaluated in full ends before the others
            await selection.changed()
        selection.task_done()
        if selection.final is None:
            return {"error": selection.error or "the selection did not finish"}
        metadata = {**selection.final, "seconds": selection.time_split()}
        task_ended(self.eval_id, self.early_stops, metadata)
        return metadata

