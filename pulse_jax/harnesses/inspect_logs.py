"""Inspect (``inspect-ai``) in the loop: its logs in, live scoring through it.

* `read_inspect` turns Inspect eval logs (``.eval`` or ``.json``, read with ``inspect_ai.log``)
  into a models x samples `ScoreMatrix`, with each cell's token usage beside it
  (`InspectLogs`): one task, one scorer (and one key of a scorer whose values are dicts);
  models by their Inspect model name (with their model arguments where two runs of a model
  differ in them); examples by sample id, epochs averaged or kept apart.
* `InspectScorer` scores live: each batch a selector asks for becomes one ``inspect_ai.eval``
  of exactly those samples (``sample_id=[...]``), each model built once, Inspect's own logs
  written to a folder (open them in ``inspect view``). A sample already scored there -- by an
  earlier batch, or by a run stopped with ``kill -9`` -- is read back, never evaluated again.

Score values map to [0, 1] by `VALUE_MAP` (Inspect's own meaning of its letters: ``C``
correct 1, ``I`` incorrect 0, ``P`` partial 0.5, ``N`` no answer 0), booleans to 0/1, numbers
as they are (they must lie in [0, 1]); ``value_map`` overrides or adds entries. Nothing here
imports ``inspect_ai`` until it is used.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import math
import re
import sys
import time
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from pulse_jax.errors import PulseInputError, require
from pulse_jax.fileio.data import ScoreMatrix

#: Inspect's score letters (``inspect_ai.scorer.CORRECT`` etc.) as numbers in [0, 1].
VALUE_MAP = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0}
_INSTALL = 'Inspect support needs inspect-ai: pip install -e ".[harness]"'


@dataclasses.dataclass(frozen=True)
class InspectLogs:
    """Scores read from Inspect logs, with the tokens each cell used.

    ``input_tokens`` / ``output_tokens`` are models x examples like ``scores.scores`` (NaN where
    the cell is missing), summed over every model a sample called (a model-graded scorer's
    included) and, with averaged epochs, over the epochs: what evaluating that cell cost.
    """

    scores: ScoreMatrix
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    task: str
    scorer: str


def _log_module():
    try:
        from inspect_ai import log
    except ImportError:
        raise PulseInputError(_INSTALL) from None
    return log


def parse_value_map(items: Sequence[str]) -> dict:
    """``["P=0", "partial=0.5"]`` -> ``{"P": 0.0, "partial": 0.5}`` (the CLI's ``--value-map``)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        require(sep and key, f"--value-map {item!r}: expected VALUE=NUMBER, e.g. P=0")
        try:
            x = float(value)
        except ValueError:
            raise PulseInputError(f"--value-map {item!r}: {value!r} is not a number") from None
        require(0.0 <= x <= 1.0, f"--value-map {item!r}: {x:g} is outside [0, 1]")
        out[key] = x
    return out


def score_value(value, value_map: Mapping, where: str, key: str | None = None) -> float:
    """One Inspect score value as a number in [0, 1] (see the module docstring)."""
    if isinstance(value, dict):
        require(key is not None, f"{where}: the score is a dict ({', '.join(map(str, value))}); choose one with "
                                 "--metric")
        require(key in value, f"{where}: the score has no {key!r}; it has {', '.join(map(str, value))}")
        value = value[key]
    if isinstance(value, str) and value in value_map:
        return float(value_map[value])
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        x = float(value)
    else:
        try:
            x = float(value)
        except (TypeError, ValueError):
            raise PulseInputError(f"{where}: score value {value!r} is not a number and not in the value map "
                                  f"({', '.join(f'{k}={v:g}' for k, v in value_map.items())}); add it with "
                                  f"--value-map {value}=X") from None
    require(not math.isnan(x), f"{where}: score value is NaN")
    require(0.0 <= x <= 1.0, f"{where}: score value {x:g} is outside [0, 1]; map or rescale the scorer's values "
                             "(--value-map) first")
    return x


def usage_tokens(usage) -> tuple[float, float]:
    """(input, output) tokens of a sample's ``model_usage`` (every model it called)."""
    if not usage:
        return math.nan, math.nan
    return (float(sum((u.input_tokens or 0) for u in usage.values())),
            float(sum((u.output_tokens or 0) for u in usage.values())))


def _log_files(paths) -> list[tuple[Path, bool]]:
    """``(file, named)`` for every log: files given by name, and a folder's ``.eval`` and ``.json``
    files (``named`` False: a folder's ``.json`` that is not an Inspect log is passed over)."""
    files = []
    for path in map(Path, paths):
        require(path.exists(), f"{path}: no such file or folder")
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.suffix in (".eval", ".json") and p.is_file())
            require(found, f"{path}: no Inspect logs (.eval or .json) in this folder")
            files += [(p, p.suffix == ".eval") for p in found]
        else:
            files.append((path, True))
    return files


#: The deepest JSON nesting an Inspect log may have (real logs nest a few dozen levels); deeper files are
#: refused before Inspect parses them, since its reader's memory grows without bound with the depth.
MAX_JSON_DEPTH = 1000
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def json_depth(data: bytes) -> int:
    """The deepest nesting of brackets in JSON text ``data`` (brackets inside strings not counted)."""
    brackets = _JSON_STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    if not brackets:
        return 0
    steps = np.frombuffer(brackets, np.uint8)
    return int(np.cumsum(np.where((steps == ord("[")) | (steps == ord("{")), 1, -1)).max())


def _check_depth(path: Path) -> str:
    """'' if the log's JSON (a ``.json`` file, or each member of an ``.eval`` archive) nests at most
    `MAX_JSON_DEPTH` levels, else the reason it is refused."""
    import zipfile

    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                parts = [(name, archive.read(name)) for name in archive.namelist() if name.endswith(".json")]
        else:
            parts = [("", path.read_bytes())]
    except (OSError, zipfile.BadZipFile, RuntimeError, ValueError) as err:
        return f"cannot be read ({type(err).__name__}: {err})"[:200]
    for name, data in parts:
        depth = json_depth(data)
        if depth > MAX_JSON_DEPTH:
            where = f" ({name})" if name else ""
            return (f"its JSON{where} nests {depth:,} levels deep, more than any Inspect log ({MAX_JSON_DEPTH:,}); "
                    "it is not read (its parser's memory would grow without bound)")
    return ""


def _header(log, path: Path, *, strict: bool):
    why = _check_depth(path)
    if why:
        if not strict:
            return None
        raise PulseInputError(f"{path}: not a readable Inspect log: {why}")
    try:
        header = log.read_eval_log(str(path), header_only=True)
    except Exception as err:   # noqa: BLE001 -- inspect raises many kinds for a file that is not a log
        if not strict:
            return None
        raise PulseInputError(f"{path}: not a readable Inspect log ({type(err).__name__}: {err})"[:300]) from None
    return header


def _summaries(log, path: Path):
    try:
        return log.read_eval_log_sample_summaries(str(path))
    except Exception as err:   # noqa: BLE001
        raise PulseInputError(f"{path}: cannot read its samples ({type(err).__name__}: {err})"[:300]) from None


def _compact(path: str) -> list[tuple]:
    """A log's samples as ``(id, epoch, scored, {scorer: value}, input tokens, output tokens)``."""
    return [(str(x.id), x.epoch, x.error is None and bool(x.scores),
             {k: v.value for k, v in (x.scores or {}).items()}, *usage_tokens(x.model_usage))
            for x in _summaries(_log_module(), Path(path))]


#: Logs read at once in worker processes from this many files on (reading a log's summaries is
#: pydantic validation in Python: one core per log).
_PARALLEL_FROM = 8


def _read_all(paths: list[Path]) -> list[list[tuple]]:
    """`_compact` of every path, in worker processes when there are many."""
    import os

    workers = min(os.cpu_count() or 1, len(paths), 8)
    if len(paths) < _PARALLEL_FROM or workers < 2:
        return [_compact(str(p)) for p in paths]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # spawn: the parent may hold JAX's threads, which a fork would copy mid-flight
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(_compact, [str(p) for p in paths]))


def _arg_text(args: dict) -> str:
    return ", ".join(f"{k}={args[k]}" for k in sorted(args))


def read_inspect(paths: Sequence, *, task: str | None = None, scorer: str | None = None, metric: str | None = None,
                 epochs: str = "mean", value_map: Mapping | None = None, same_samples: bool = True) -> InspectLogs:
    """A models x samples matrix, and each cell's tokens, from Inspect eval logs.

    Args:
      paths: ``.eval`` / ``.json`` log files, or folders searched recursively for them.
      task: the task to read (needed when the logs hold several).
      scorer: the scorer's name (needed when samples carry several scores).
      metric: for a scorer whose values are dicts, the key to read.
      epochs: ``"mean"``: one example per sample id, its epochs averaged (tokens summed);
        ``"separate"``: one example per (sample id, epoch), named ``id@epoch``.
      value_map: entries added to (or replacing) `VALUE_MAP`.
      same_samples: every model must have the same samples (a score matrix); False reads each model's
        samples as they are (a token history, e.g. a selection's own logs, where each model saw only
        the samples the selection asked for).

    Every log must have finished (status ``success``); every model must have the same samples
    (unless ``same_samples`` is False);
    a model run twice on a task with the same model arguments is refused (keep one). A sample
    that ended in an error is a missing cell.
    """
    require(epochs in ("mean", "separate"), f"epochs must be 'mean' or 'separate', got {epochs!r}")
    log = _log_module()
    vmap = {**VALUE_MAP, **dict(value_map or {})}
    task, named = _runs(log, _log_files(paths), task)
    cells, tokens, chosen = _cells(named, scorer, metric, epochs, vmap, same_samples)
    require(cells, f"no scored samples for task {task!r}")
    models = [name for name, _ in named]
    examples = sorted({e for _, e in cells}, key=natural_order)
    row = {m: k for k, m in enumerate(models)}
    col = {e: k for k, e in enumerate(examples)}
    scores = np.full((len(models), len(examples)), np.nan)
    t_in = np.full_like(scores, np.nan)
    t_out = np.full_like(scores, np.nan)
    for (m, e), xs in cells.items():
        scores[row[m], col[e]] = float(np.mean(xs))
        t_in[row[m], col[e]], t_out[row[m], col[e]] = tokens[(m, e)]
    matrix = ScoreMatrix(scores, tuple(models), tuple(examples), source=f"Inspect logs of {task}")
    return InspectLogs(matrix, t_in, t_out, task, chosen)


def _runs(log, files: list[Path], task: str | None) -> tuple[str, list[tuple[str, Path]]]:
    """The task read and its finished runs as ``(model name, file)``; a model run twice with the
    same arguments is refused, one run with other arguments is named with them."""
    require(files, "read_inspect: give at least one log file or folder")
    headers = [(path, _header(log, path, strict=named)) for path, named in files]
    headers = [(path, h) for path, h in headers if h is not None]
    require(headers, f"no Inspect logs among {', '.join(str(p) for p, _ in files[:3])}")
    tasks = sorted({h.eval.task for _, h in headers})
    if task is None:
        require(len(tasks) == 1, f"the logs hold several tasks ({', '.join(tasks)}); choose one with --task")
        task = tasks[0]
    require(task in tasks, f"no logs of task {task!r}; tasks present: {', '.join(tasks)}")
    by_model: dict[str, list] = {}
    for path, h in headers:
        if h.eval.task != task:
            continue
        require(h.status == "success", f"{path}: the run did not finish (status {h.status}); finish it with "
                                       f"`inspect eval-retry {path}` or leave the file out")
        by_model.setdefault(h.eval.model, []).append((path, h))
    named = []
    for model, group in by_model.items():
        seen: dict[str, Path] = {}
        for path, h in group:
            args = _arg_text(h.eval.model_args or {})
            require(args not in seen, f"{path}: model {model!r} was run on {task!r} in {seen.get(args)} too, with the "
                                      "same arguments (duplicated runs); keep one of the files")
            seen[args] = path
            named.append((model if len(group) == 1 else f"{model} ({args or 'no arguments'})", path))
    return task, named


def _cells(named, scorer, metric, epochs, vmap, same_samples=True):
    """``({(model, example): [scores]}, {(model, example): (input, output tokens)}, scorer)``; with
    ``same_samples`` every model must have the same (sample, epoch) set."""
    cells, tokens, sample_sets = {}, {}, {}
    chosen = scorer
    for (name, path), summaries in zip(named, _read_all([path for _, path in named])):
        require(summaries, f"{path}: the log has no samples (was it run with --no-log-samples?)")
        ids = set()
        for sample_id, epoch, scored, values, t_in, t_out in summaries:
            where = f"{path}, sample {sample_id} (epoch {epoch})"
            ids.add((sample_id, epoch))
            if not scored:
                continue      # no score: a missing cell
            if chosen is None:
                require(len(values) == 1, f"{where}: several scorers ({', '.join(values)}); choose one with "
                                          "--scorer")
                chosen = next(iter(values))
            require(chosen in values, f"{where}: no scorer {chosen!r}; scorers present: {', '.join(values)}")
            example = sample_id if epochs == "mean" else f"{sample_id}@{epoch}"
            cells.setdefault((name, example), []).append(score_value(values[chosen], vmap, where, metric))
            old = tokens.get((name, example), (0.0, 0.0))
            tokens[(name, example)] = (old[0] + t_in, old[1] + t_out)
        sample_sets[name] = (ids, path)
    first, (ids0, path0) = next(iter(sample_sets.items()))
    for name, (ids, path) in sample_sets.items() if same_samples else ():
        extra, lacking = sorted(ids - ids0), sorted(ids0 - ids)
        if extra or lacking:
            what = (f"{len(lacking)} missing, e.g. sample {lacking[0][0]} epoch {lacking[0][1]}" if lacking else
                    f"{len(extra)} more, e.g. sample {extra[0][0]} epoch {extra[0][1]}")
            raise PulseInputError(f"{path}: model {name!r} has other samples than {first!r} in {path0} ({what}); "
                                  "give logs of the same samples for every model")
    return cells, tokens, chosen


def natural_order(example: str):
    """Sort key: numeric sample ids in numeric order, then the rest as text."""
    head, _, epoch = example.partition("@")
    try:
        return (0, float(head), "", int(epoch or 0))
    except ValueError:
        return (1, 0.0, head, int(epoch) if epoch.isdigit() else 0)


def save_tokens(logs: InspectLogs, path) -> None:
    """The cells' token usage as a CSV beside the scores: ``model,example,input_tokens,output_tokens``."""
    import csv

    from pulse_jax.fileio.files import atomic_open

    with atomic_open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["model", "example", "input_tokens", "output_tokens"])
        for i, m in enumerate(logs.scores.models):
            for j, e in enumerate(logs.scores.examples):
                if not math.isnan(logs.input_tokens[i, j]):
                    w.writerow([m, e, int(logs.input_tokens[i, j]), int(logs.output_tokens[i, j])])


# ----------------------------------------------------------------------------- live scoring


def load_task(spec: str):
    """``"path/to/file.py@name"`` -> the Inspect ``Task`` that the file's ``@task`` function ``name``
    returns."""
    file, _, name = spec.partition("@")
    path = Path(file)
    require(path.suffix == ".py" and name, f"--inspect-task {spec}: expected FILE.py@TASK, e.g. tasks.py@arithmetic")
    require(path.is_file(), f"--inspect-task {spec}: no such file {path}")
    try:
        from inspect_ai import Task
    except ImportError:
        raise PulseInputError(_INSTALL) from None
    module_name = f"_pulse_inspect_task_{abs(hash(str(path.resolve())))}"
    loader = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(loader)
    sys.modules[module_name] = module
    try:
        loader.loader.exec_module(module)
    except Exception as err:   # noqa: BLE001 -- the user's file may raise anything
        raise PulseInputError(f"--inspect-task {spec}: {path} fails on import ({type(err).__name__}: {err})") from None
    fn = getattr(module, name, None)
    require(callable(fn), f"--inspect-task {spec}: {path} defines no task {name!r}")
    task = fn()
    require(isinstance(task, Task), f"--inspect-task {spec}: {name}() returned {type(task).__name__}, not a Task")
    return task


class InspectScorer:
    """A live scorer that evaluates each asked batch through Inspect.

    ``scorer(model, sample_ids)`` runs ``inspect_ai.eval(task, model=..., sample_id=[...],
    log_dir=log_dir)`` for the samples of the batch not yet scored in ``log_dir``, and returns
    every asked sample's score. Pass it as ``evaluate`` to `pulse_jax.live.run`, with
    ``sample_ids`` as the selector's examples.

    Samples are flushed to Inspect's log one by one (``log_buffer=1``), so a run stopped at any
    moment keeps each finished sample; on the next run they are read back instead of asked
    again. Only a sample whose model call had not returned is asked again (and a task whose
    ``generate`` uses Inspect's cache answers that one from it).

    Args:
      task: an Inspect ``Task``, or ``"file.py@task"``.
      models: ``{candidate name: model}`` with Inspect model names (``"openai/gpt-4o-mini"``) or
        ``Model`` objects (``get_model("mockllm/model", custom_outputs=...)``), or a sequence of
        model names, each named by itself.
      log_dir: the folder for Inspect's logs (also where finished samples are found again).
      scorer: the task's scorer to read (None: its only one).
      metric: for a scorer whose values are dicts, the key to read.
      value_map: entries added to `VALUE_MAP`.
      eval_options: more keyword arguments for ``inspect_ai.eval`` (``max_connections``, ...).
    """

    #: One evaluation at a time (the harness's eval cannot run twice at once): `pulse_jax.live.run`
    #: keeps one batch in flight with it.
    max_concurrency = 1

    def __init__(self, task, models, log_dir, *, scorer: str | None = None, metric: str | None = None,
                 value_map: Mapping | None = None, eval_options: Mapping | None = None):
        require(importlib.util.find_spec("inspect_ai") is not None, _INSTALL)
        self.task = load_task(task) if isinstance(task, str) else task
        self.models = dict(models) if isinstance(models, Mapping) else {str(m): str(m) for m in models}
        require(self.models, "InspectScorer: no models")
        self.log_dir = Path(log_dir)
        self.scorer, self.metric = scorer, metric
        self.value_map = {**VALUE_MAP, **dict(value_map or {})}
        self.options = dict(eval_options or {})
        require(not {"log_dir", "log_format", "log_buffer", "sample_id", "model"} & set(self.options),
                "InspectScorer: eval_options may not set log_dir, log_format, log_buffer, sample_id or model "
                "(the scorer sets them)")
        self._built: dict = {}
        self._done: dict[str, dict] = {name: {} for name in self.models}   # model -> {sample id: (score, in, out)}
        self.eval_seconds = 0.0      # time inside inspect_ai.eval
        self.total_seconds = 0.0     # time inside __call__
        self.calls = 0
        self.evaluated = 0           # samples this process sent to Inspect
        self._read_back()

    @property
    def sample_ids(self) -> list:
        """The task's sample ids, in dataset order (Inspect numbers samples without one from 1)."""
        return [s.id if s.id is not None else k + 1 for k, s in enumerate(self.task.dataset)]

    def _model(self, name: str):
        if name not in self._built:
            spec = self.models[name]
            if isinstance(spec, str):
                from inspect_ai.model import get_model

                try:
                    spec = get_model(spec)
                except Exception as err:   # noqa: BLE001 -- unknown provider, missing key, ...
                    raise PulseInputError(f"Inspect model {spec!r}: {type(err).__name__}: {err}"[:300]) from None
            self._built[name] = spec
        return self._built[name]

    def _identity(self, name: str) -> str:
        """The model name Inspect writes in its logs for candidate ``name``."""
        spec = self.models[name]
        return spec if isinstance(spec, str) else str(spec)

    def _read_back(self) -> None:
        """Every finished sample of this task in ``log_dir``, any log status (a killed run's included)."""
        if not self.log_dir.is_dir():
            return
        log = _log_module()
        owner = {self._identity(n): n for n in self.models}
        for path in sorted(self.log_dir.glob("*.eval")):
            header = _header(log, path, strict=False)
            if header is None or header.eval.task != self.task.name or header.eval.model not in owner:
                continue
            try:
                summaries = log.read_eval_log_sample_summaries(str(path))
            except Exception:   # noqa: BLE001 -- a log cut before its first sample
                continue
            self._keep(owner[header.eval.model], summaries, path)

    def _keep(self, name: str, samples, where) -> None:
        for s in samples:
            if s.error is not None or not s.scores or not getattr(s, "completed", True):
                continue
            key = self.scorer or next(iter(s.scores))
            require(key in s.scores, f"{where}: no scorer {key!r}; scorers present: {', '.join(s.scores)}")
            x = score_value(s.scores[key].value, self.value_map, f"{where}, sample {s.id!r}", self.metric)
            self._done[name][s.id] = (x, *usage_tokens(s.model_usage))

    def __call__(self, model: str, sample_ids) -> list[float]:
        from inspect_ai import eval as inspect_eval

        require(model in self.models, f"InspectScorer: unknown model {model!r}")
        start = time.perf_counter()
        ids = list(sample_ids)
        todo = [i for i in dict.fromkeys(ids) if i not in self._done[model]]
        if todo:
            inner = time.perf_counter()
            logs = inspect_eval(self.task, model=self._model(model), sample_id=todo, log_dir=str(self.log_dir),
                                display="none", log_format="eval", log_buffer=1, score_display=False,
                                **self.options)
            self.eval_seconds += time.perf_counter() - inner
            self.evaluated += len(todo)
            for result in logs:
                require(result.status == "success", f"Inspect evaluation of {model!r} ended with status "
                                                    f"{result.status}: {getattr(result.error, 'message', '')}"[:300])
                # the samples' summaries: scores and usage without parsing every event of the transcript
                self._keep(model, _summaries(_log_module(), Path(result.location)), result.location)
        missing = [i for i in ids if i not in self._done[model]]
        require(not missing, f"Inspect returned no score for samples {missing[:5]} of {model!r}")
        self.calls += 1
        self.total_seconds += time.perf_counter() - start
        return [self._done[model][i][0] for i in ids]

    def tokens(self, model: str, sample_ids) -> tuple[float, float]:
        """(input, output) tokens that ``model``'s finished samples among ``sample_ids`` used."""
        rows = [self._done[model][i] for i in sample_ids if i in self._done[model]]
        return float(np.nansum([r[1] for r in rows])), float(np.nansum([r[2] for r in rows]))

    def usage(self) -> dict[str, tuple[int, float, float]]:
        """``{model: (samples, input tokens, output tokens)}`` over every finished sample in the log folder."""
        return {name: (len(done), float(np.nansum([r[1] for r in done.values()])),
                       float(np.nansum([r[2] for r in done.values()]))) for name, done in self._done.items()}


def usage_history(paths, scorer: str | None = None, metric: str | None = None, value_map=None):
    """The Inspect logs at ``paths`` (files or folders) read for their token counts: what a live
    selection's money budget estimates a cell's cost from (`pulse_jax.live.Plan.meter`)."""
    return read_inspect(list(paths), scorer=scorer, metric=metric, value_map=value_map, same_samples=False)
