"""Inspect's hooks for `select_best`'s selections: a sample's score is committed the moment its scorer
returns, a failed sample ends its selection at once, and a log Inspect finishes without results still
carries the certificate.

The manager (`pulse_jax.harnesses.inspect_select.SelectBest`) registers each task it runs here by
Inspect's eval id; the hooks (``inspect_ai.hooks``, registered once per process) look the task up. The
selections themselves, one per log, are `SELECTIONS`. This module holds the harness's process-wide
state; importing it changes nothing in the process (the hooks register with the first task, the exit
handler with the first selection).
"""
from __future__ import annotations

import atexit
import functools
import types
from pathlib import Path

from pulse_jax.errors import require
from pulse_jax.fileio.jsonable import plain_float32

#: The early-stopping manager's name in Inspect's logs.
MANAGER = "pulse-jax select_best"
_TASKS: dict = {}     # Inspect eval id -> (the `_Selection`, the model) of a task the manager runs
_RUNNING: dict = {}   # a running sample's execution id -> (its eval id, its dataset sample id)
_ENDED: dict = {}     # Inspect eval id -> (its early stops, the certificate's metadata), from ``complete_task``
_REGISTERED: list = []


class Selections:
    """The selections ``select_best`` runs in this process, one per log: Inspect builds each model's task
    on its own, and the tasks of one eval share the selection of their log. They are reached only
    through `SELECTIONS`: importing the module changes nothing, and the first selection made registers `close_all` to run at exit (an eval that failed ends without its
    tasks' last call; its log's rollback journal then goes with it instead of staying beside the log)."""

    def __init__(self):
        self._by_log: dict = {}          # resolved log path -> the `_Selection` its tasks share
        self._at_exit = False

    def shared(self, path: Path, plan, models, make):
        """The selection of the log ``path``: the running one when it has the same ``plan`` and ``models``
        (refused otherwise), else a new one from ``make()`` (a failed eval's is let go first)."""
        selection = self._by_log.get(path)
        if selection is not None and selection.error and not selection.over:
            selection.close()        # an eval that failed: its tasks are gone; the log is free for this one
        if selection is None or selection.over:
            selection = self._by_log[path] = make()
            if not self._at_exit:
                atexit.register(self.close_all)
                self._at_exit = True
            return selection
        require(selection.plan == plan and selection.named_models == (None if models is None else list(models)),
                f"select_best: {path} is used by another select_best with other options in this process")
        return selection

    def close_all(self) -> None:
        """Let go of every log still open."""
        for selection in list(self._by_log.values()):
            try:
                selection.close()
            except Exception:   # noqa: BLE001 -- interpreter shutdown: nothing left to tell
                pass


#: The harness's selections in this process (`Selections`): its one entry point to them.
SELECTIONS = Selections()


def task_started(eval_id, selection, model: str) -> None:
    """The manager runs this Inspect task (``start_task``): its failed samples reach ``selection``."""
    watch_selections()
    if eval_id:
        _TASKS[eval_id] = (selection, model)


def task_ended(eval_id, early_stops: list, metadata: dict) -> None:
    """The manager's ``complete_task`` for this task: what its log's early-stopping summary holds."""
    if eval_id:
        _ENDED[eval_id] = (list(early_stops), metadata)


def _score_returned(data) -> None:
    """A sample's final score, the moment its scorer returns (an ``on_sample_event`` with a final
    ``ScoreEvent``): Inspect hands it to the manager (``complete_sample``) only after writing the sample
    to its own log, which can lag by seconds, and a ``kill -9`` in that lag would lose a scored sample.
    Committed here, it is not."""
    event = getattr(data, "event", None)
    if getattr(event, "event", None) != "score" or getattr(event, "intermediate", True):
        return
    eval_id, sample = _RUNNING.get(data.sample_id, (None, None))
    entry = _TASKS.get(eval_id)
    if entry is not None:
        entry[0].score_returned(entry[1], sample, event)


def watch_selections() -> None:
    """Register, once per process, the Inspect hook that tells a selection when one of its samples has
    failed after Inspect's own retries (``on_sample_end`` with an error): the selection then ends at
    once instead of waiting for a score that never comes. Hooks are Inspect's public API for it
    (``inspect_ai.hooks``); the manager protocol has no call for a failed sample.

    The same hook puts the certificate into a log Inspect wrote without results (``on_task_end``):
    Inspect computes results, and attaches the early-stopping summary to them, only when the eval
    scored a sample, so a model with nothing new to evaluate (a finished run run again, a resume
    whose samples were all in the log) would get a log with ``results=None``."""
    if _REGISTERED:
        return
    from inspect_ai.hooks import Hooks, hooks

    class _SelectionHooks(Hooks):
        async def on_sample_start(self, data) -> None:
            if getattr(data, "eval_id", None) in _TASKS:      # the execution's id -> the dataset's sample id
                _RUNNING[data.sample_id] = (data.eval_id, data.summary.id)

        async def on_sample_event(self, data) -> None:
            _score_returned(data)

        async def on_sample_end(self, data) -> None:
            _RUNNING.pop(getattr(data, "sample_id", None), None)
            entry = _TASKS.get(getattr(data, "eval_id", None))
            error = getattr(getattr(data, "sample", None), "error", None)
            if entry is None:
                return
            selection, model = entry
            if error is None:
                # A scored sample whose score the manager's complete_sample did not get (Inspect ended the
                # task in between, e.g. as another model failed): committed here all the same.
                scores = getattr(data.sample, "scores", None)
                if scores:
                    selection.scored(model, data.sample.id, scores)
                return
            sample = getattr(data.sample, "id", "?")
            message = str(getattr(error, "message", "") or error).strip().splitlines()
            selection.model_failed(model, sample, message[0] if message else type(error).__name__)

        async def on_run_end(self, data) -> None:
            # Every eval's log, a failed one's too (Inspect ends a failed task without on_task_end): a
            # rerun of the selection reads the samples they scored.
            for log in getattr(data, "logs", None) or ():
                entry = _TASKS.get(getattr(log.eval, "eval_id", None))
                if entry is not None and getattr(log, "location", None):
                    note_inspect_log(entry[0].path, log.location)

        async def on_task_end(self, data) -> None:
            ended = _ENDED.pop(getattr(data, "eval_id", None), None)
            if ended is not None and data.log.results is None and data.log.location:
                data.log.results = await _write_certificate(data.log.location, *ended)

    hooks("pulse-jax select_best", "ends a pulse-jax selection when one of its samples fails, and puts its "
                                   "certificate into every model's log")(_SelectionHooks)
    _REGISTERED.append(True)


async def _write_certificate(location: str, early_stops: list, metadata: dict):
    """Give a finished log without results the results Inspect gives a scored one, less the scores: the
    sample count and the early-stopping summary (manager, early stops, the certificate's metadata)."""
    from inspect_ai.log import EvalResults, read_eval_log_async, write_eval_log_async
    from inspect_ai.util import EarlyStoppingSummary

    log = await read_eval_log_async(location)
    if log.results is not None:
        return log.results
    log.results = EvalResults(total_samples=log.eval.dataset.samples or len(early_stops), completed_samples=0,
                              early_stopping=EarlyStoppingSummary(manager=MANAGER, early_stops=early_stops,
                                                                  metadata=metadata))
    await write_eval_log_async(log, location)
    return log.results


def _noted(selection_log) -> Path:
    return Path(selection_log).with_name(Path(selection_log).name + ".inspect-logs")


def note_inspect_log(selection_log, location: str) -> None:
    """Note an eval's Inspect log beside the selection's log (``run.db.inspect-logs``): a rerun reads the
    samples it scored (`scored_samples`)."""
    with open(_noted(selection_log), "a", encoding="utf-8") as fh:
        fh.write(str(location) + "\n")


def noted_inspect_logs(selection_log) -> list:
    """The Inspect logs noted beside the selection's log, oldest first."""
    path = _noted(selection_log)
    return path.read_text(encoding="utf-8").splitlines() if path.is_file() else []


def scored_samples(locations, models, scorer: str | None, metric: str | None, value_map) -> dict:
    """``{model: {sample id: (score, (input, output tokens))}}`` of the samples that the Inspect logs at
    ``locations`` scored without error, for the ``models`` of a selection (a log moved or removed since
    is passed over: its samples are asked again)."""
    from inspect_ai.log import read_eval_log

    from pulse_jax.errors import PulseInputError
    from pulse_jax.harnesses import inspect_logs

    found: dict = {}
    for location in dict.fromkeys(filter(None, locations)):
        try:
            log = read_eval_log(location)
        except Exception:   # noqa: BLE001 -- moved, removed or unreadable: nothing to reuse from it
            continue
        model = str(log.eval.model)
        if model not in models:
            continue
        for sample in log.samples or ():
            chosen = scorer or next(iter(sample.scores or {}), None)
            if sample.error is not None or not sample.scores or chosen not in sample.scores:
                continue
            where = f"select_best: {location}, {model}, sample {sample.id}"
            try:
                value = inspect_logs.score_value(sample.scores[chosen].value, value_map, where, metric)
            except PulseInputError:
                continue
            found.setdefault(model, {})[str(sample.id)] = (value, inspect_logs.usage_tokens(sample.model_usage))
    return found


def selection_metadata(report, selection) -> dict:
    """What goes into each model's Inspect log: the certificate, the spend and the tie groups (``selection``:
    the manager's `pulse_jax.harnesses.inspect_select` selection)."""
    evaluated = {m: len(ids) for m, ids in report.evaluated.items()}
    tokens = {m: dict(zip(("input_tokens", "output_tokens"), selection.token_sum(m, ids)))
              for m, ids in report.evaluated.items()}
    return {"leader": report.leader, "separated": report.separated, "certificate": report.certificate,
            "stop": report.stop, "claimed": list(report.claimed), "delta": plain_float32(report.delta),
            "tie_groups": [list(g) for g in report.groups], "spent_cells": report.spent, "budget_cells": report.budget,
            "evaluated": evaluated, "tokens": tokens, **({"spend": report.spend} if report.spend else {}),
            # float32 numbers at their own precision (0.55, not 0.550000011920929)
            "estimates": {m: [plain_float32(report.estimates[i]), plain_float32(report.low[i]),
                              plain_float32(report.high[i])]
                          for i, m in enumerate(report.models)},
            "log": str(selection.path), "report": str(selection.plan.report_folder / "report.md")}


def commit_on_return(task, selection, model: str) -> None:
    """Each of ``task``'s scorers commits the score it returns to the selection's log before it hands it to
    Inspect: no event loop turn lies between a score and its commit, so a ``kill -9`` at any moment
    loses no scored sample (the ``on_sample_event`` hook gets the same score later, from a queue that a
    busy loop can hold for a fraction of a second). Scorers with the same name are left to the hook: their
    names in the log are made unique only later."""
    scorers = list(task.scorer or ())
    try:
        from inspect_ai._util.registry import registry_unqualified_name    # private, for want of a public one
        names = [registry_unqualified_name(s) for s in scorers]
    except (ImportError, ValueError, TypeError, AttributeError):
        return
    if len(set(names)) == len(names):
        task.scorer = [_committing(s, name, selection, model) for s, name in zip(scorers, names)]


def _committing(original, name: str, selection, model: str):
    # functools.wraps copies the registry attributes too: Inspect sees the scorer it was given.
    @functools.wraps(original)
    async def score(state, target):
        result = await original(state, target)
        if result is not None and not isinstance(result, list):
            selection.score_returned(model, state.sample_id,
                                     types.SimpleNamespace(scorer=name, score=result, model_usage=None))
        return result

    return score

