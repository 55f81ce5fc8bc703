"""Evaluation harnesses in the loop: per-sample results in, live scoring out.

* `read_lm_eval` turns EleutherAI lm-evaluation-harness output folders
  (``lm_eval ... --output_path DIR --log_samples``) into a models x examples
  `ScoreMatrix`: one task, one metric, one filter;
  example ids are the task's ``doc_id``; a model's name comes from the run's
  results JSON. Documents are compared by ``doc_hash`` across models, so logs
  of different datasets under one task name are refused.
* `read_long` reads the long ("tidy") table most people have: one row
  per (model, example, score), as CSV, JSONL or Parquet.
* `LmEvalScorer` scores live: each batch a selector asks for becomes one
  lm-eval evaluation of exactly those documents (lm-eval's ``samples=``
  option), with each candidate model loaded once and reused.

Missing cells stay missing (NaN). Nothing here imports lm-eval until a scorer
is built, so reading logs needs only the standard library and NumPy.
"""
from __future__ import annotations

import csv
import functools
import hashlib
import json
import math
import re
import time
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from pulse_jax.fileio.data import ScoreMatrix
from pulse_jax.errors import PulseInputError, require

_RESCALE = "pulse-jax needs scores in [0, 1]; rescale the metric first (e.g. divide by its maximum)"


# ----------------------------------------------------------------------------- long tables


def _json_lines(path: Path):
    """``(line number, object)`` of each non-empty line of a JSON-lines file; one-line errors."""
    with open(path, "rb") as handle:
        for k, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8-sig" if k == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise PulseInputError(f"{path}, line {k}: not UTF-8 text (byte {err.start}); save the file as "
                                      "UTF-8") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise PulseInputError(f"{path}, line {k}: not JSON ({err.msg}); is the file complete?") from None
            except ValueError as err:      # e.g. an integer too long to convert
                raise PulseInputError(f"{path}, line {k}: unreadable JSON value ({err})"[:300]) from None
            except RecursionError:
                raise PulseInputError(f"{path}, line {k}: JSON nested too deeply to be a table row") from None
            require(isinstance(row, dict), f"{path}, line {k}: expected a JSON object per line")
            yield k, row


def _require_columns(wanted, present, what: str) -> None:
    missing = [c for c in wanted if c not in present]
    if missing:
        kind = "fields" if "field" in what else "columns"
        raise PulseInputError(f"{what} {missing[0]!r} ({kind}: {', '.join(map(str, present))})")


def _long_rows(path: Path, columns: tuple[str, str, str]):
    """``(line, model, example, score text)`` of a CSV, JSONL or Parquet long table."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise PulseInputError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow), "
                                  "or give the table as CSV or JSONL") from None
        table = pq.read_table(path)
        _require_columns(columns, table.column_names, f"{path}: no column")
        data = [table.column(c).to_pylist() for c in columns]
        for k, (m, e, s) in enumerate(zip(*data)):
            yield k + 1, m, e, s
        return
    if suffix in (".jsonl", ".json"):
        for k, row in _json_lines(path):
            _require_columns(columns, list(row), f"{path}, line {k}: no field")
            value = row[columns[2]]
            # JSON has numbers: a score written as text is a producer's mistake, not a number; true/false
            # is a boolean column (pandas writes one so) and reads as 1/0
            require(not isinstance(value, str),
                    f"{path}, line {k}: score {json.dumps(value)} is text, not a number; write it as a JSON "
                    "number (1, 0, 0.5) or true/false")
            yield k, row[columns[0]], row[columns[1]], value
        return
    with open(path, newline="", encoding="utf-8-sig") as handle:   # a byte-order mark is not part of a name
        reader = csv.DictReader(handle)
        _require_columns(columns, list(reader.fieldnames or ()), f"{path}: no column")
        width = len(reader.fieldnames or ())
        for row in reader:
            if None in row or None in row.values():    # more or fewer fields than the header: never guess
                count = width + len(row.get(None) or ()) if None in row else sum(v is not None for v in row.values())
                raise PulseInputError(f"{path}, line {reader.line_num}: {count} fields but the header has {width}"
                                      + (" (a decimal comma? write 0.5, or quote the field)" if None in row else ""))
            yield reader.line_num, row[columns[0]], row[columns[1]], row[columns[2]]


#: A boolean column as pandas writes it to CSV (``True``/``False``), and as other tools spell it.
_BOOLEAN_TEXT = {"true": 1.0, "false": 0.0}


def _score(value, where: str) -> float:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and value.strip().lower() in _BOOLEAN_TEXT:
        return _BOOLEAN_TEXT[value.strip().lower()]
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise PulseInputError(f"{where}: score {value!r} is not a number"[:300]) from None
    except OverflowError:       # an integer too large for a float (hundreds of digits)
        raise PulseInputError(f"{where}: score {str(value)[:20]}... ({len(str(value))} digits) is not a number in "
                              f"[0, 1]; {_RESCALE}") from None
    require(not math.isnan(x), f"{where}: score is NaN (leave the row out for a missing cell)")
    require(0.0 <= x <= 1.0, f"{where}: score {x:g} is outside [0, 1]; {_RESCALE}")
    return x


def _matrix(cells: dict, source: str) -> ScoreMatrix:
    """``{(model, example): score}`` as a matrix, models and examples in first-seen order."""
    models = list(dict.fromkeys(m for m, _ in cells))
    examples = list(dict.fromkeys(e for _, e in cells))
    row = {m: k for k, m in enumerate(models)}
    col = {e: k for k, e in enumerate(examples)}
    scores = np.full((len(models), len(examples)), np.nan)
    for (m, e), s in cells.items():
        scores[row[m], col[e]] = s
    return ScoreMatrix(scores, tuple(models), tuple(examples), source=source)


def _readable(path: Path, rows):
    """``rows`` with every reader failure (encoding, CSV syntax, a huge field, a damaged Parquet file) as
    one line naming the file (and the line, where the reader knows it)."""
    try:
        yield from rows
    except PulseInputError:
        raise
    except UnicodeDecodeError as err:
        raise PulseInputError(f"{path}: not UTF-8 text (byte {err.start}); save the file as UTF-8") from None
    except csv.Error as err:
        raise PulseInputError(f"{path}: not a readable CSV table ({err})"[:300]) from None
    except (OSError, ValueError, TypeError, OverflowError) as err:   # pyarrow's errors are ValueError / OSError
        raise PulseInputError(f"{path}: cannot read the table ({type(err).__name__}: {err})"[:300]) from None


def _name(value, column: str, where: str) -> str:
    """A model or example name from a long table: text or a whole number, without control characters."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    require(value not in (None, ""), f"{where}: empty {column!r}")
    require(isinstance(value, (str, int)) and not isinstance(value, bool),
            f"{where}: {column!r} must be a name (text or a whole number), got {type(value).__name__} "
            f"{str(value)[:40]!r}")
    text = str(value)
    require(text.strip(), f"{where}: empty {column!r}")
    bad = next((c for c in text if ord(c) < 32 or ord(c) == 127), None)
    require(bad is None, f"{where}: {column!r} {text[:40]!r} contains the control character {bad!r}")
    return text


def read_long(path, *, model: str = "model", example: str = "example", score: str = "score") -> ScoreMatrix:
    """A models x examples matrix from a long table (``.csv``, ``.jsonl`` or ``.parquet``) with one row
    per cell; column names configurable. A cell given twice with the same score is kept once; with
    different scores it is refused, naming both lines."""
    path = Path(path)
    require(path.is_file(), f"{path}: no such file")
    cells, first_line = {}, {}
    for line, m, e, s in _readable(path, _long_rows(path, (model, example, score))):
        where = f"{path}, line {line}"
        key, x = (_name(m, model, where), _name(e, example, where)), _score(s, where)
        if key in cells:
            require(cells[key] == x, f"{path}: model {key[0]!r}, example {key[1]!r} has score {cells[key]:g} on line "
                                     f"{first_line[key]} and {x:g} on line {line}")
            continue
        cells[key], first_line[key] = x, line
    require(cells, f"{path}: no rows")
    return _matrix(cells, str(path))


# ----------------------------------------------------------------------------- lm-eval logs

_STAMP = re.compile(r"_(\d{4}-\d{2}-\d{2}T[\d\-.:]+)\.jsonl?$")


def _sample_files(folder: Path, task: str | None) -> dict[str, list[Path]]:
    """``{task: [samples files, newest last]}`` under ``folder`` (lm-eval's ``samples_<task>_<time>.jsonl``)."""
    found: dict[str, list[Path]] = {}
    for path in sorted(folder.rglob("samples_*.jsonl")):
        match = _STAMP.search(path.name)
        name = path.name[len("samples_"):match.start()] if match else path.stem[len("samples_"):]
        if task is None or name == task:
            found.setdefault(name, []).append(path)
    for files in found.values():
        files.sort(key=lambda p: (_STAMP.search(p.name).group(1) if _STAMP.search(p.name) else "", str(p)))
    return found


def _spec(config: dict) -> str | None:
    """``TYPE[:ARGS]`` of an lm-eval run's config, the form `parse_model_spec` reads."""
    kind, args = config.get("model"), config.get("model_args")
    if not isinstance(kind, str) or not kind:
        return None
    if isinstance(args, dict):
        args = ",".join(f"{k}={v}" for k, v in args.items())
    return f"{kind}:{args}" if args else kind


def _model_name(samples: Path) -> str:
    """The model of a samples file, from the results JSON of the same run (same timestamp, same folder;
    else any results JSON beside it): its model spec ``TYPE:ARGS`` (what ``select --lm-eval-task``
    takes), else lm-eval's ``model_name``; without a results JSON, the folder's name."""
    match = _STAMP.search(samples.name)
    candidates = ([samples.parent / f"results_{match.group(1)}.json"] if match else []) + \
        sorted(samples.parent.glob("results_*.json"))
    for results in candidates:
        if results.is_file():
            try:
                record = json.loads(results.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                continue
            name = _spec(record.get("config") or {}) or record.get("model_name")
            if isinstance(name, str) and name:
                return name
    return samples.parent.name


def _stamp(path: Path) -> str:
    match = _STAMP.search(path.name)
    return match.group(1) if match else ""


def lm_eval_inventory(paths: Iterable) -> dict:
    """What lm-eval logs under ``paths`` hold: ``{task: {"metrics": [...], "filters": [...]}}``
    (from each task's first sample line)."""
    tasks: dict[str, dict] = {}
    for folder in map(Path, paths):
        for task, files in _sample_files(folder, None).items():
            entry = tasks.setdefault(task, {"metrics": set(), "filters": set()})
            for k, row in _json_lines(files[-1]):
                metrics, flt = row.get("metrics") or [], row.get("filter", "none")
                require(isinstance(metrics, list) and all(isinstance(x, str) for x in metrics)
                        and isinstance(flt, str), f"{files[-1]}, line {k}: not an lm-eval sample (its 'metrics' must "
                                                  "be a list of names and its 'filter' a name)")
                entry["metrics"].update(metrics)
                entry["filters"].add(flt)
    return {t: {k: sorted(v) for k, v in e.items()} for t, e in sorted(tasks.items())}


def _read_samples(path: Path, metric: str, filter_name: str | None, available: dict) -> dict:
    """``{doc_id: (score, doc_hash)}`` of one samples file for one metric and filter."""
    out = {}
    for k, row in _json_lines(path):
        flt = row.get("filter", "none")
        available["filters"].add(flt)
        available["metrics"].update(row.get("metrics") or [name for name in row if name not in _SAMPLE_FIELDS])
        if (filter_name is not None and flt != filter_name) or metric not in row:
            continue
        where = f"{path}, line {k}"
        value = row.get("doc_id")
        # 1.7 is not document 1: only integers (or integral numbers / digit strings) are doc ids.
        integral = (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()) or (isinstance(value, str) and value.strip().isdigit())
        require(integral, f"{where}: doc_id {value!r} is not an integer document number")
        doc = int(float(value)) if isinstance(value, float) else int(value)
        if doc in out:
            hint = "; choose one filter with --filter" if filter_name is None else ""
            raise PulseInputError(f"{where}: doc_id {doc} appears twice (filter {flt!r}){hint}")
        out[doc] = (_score(row[metric], f"{where}, metric {metric!r}"), row.get("doc_hash"))
    return out


_SAMPLE_FIELDS = {"doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "filter", "metrics", "doc_hash",
                  "prompt_hash", "target_hash"}


def read_lm_eval(paths: Sequence, task: str, metric: str, filter: str | None = None) -> ScoreMatrix:  # noqa: A002
    """A models x docs matrix from lm-evaluation-harness ``--log_samples`` output folders.

    Args:
      paths: output folders (each searched recursively for ``samples_<task>_<time>.jsonl``;
        a folder may hold several models' subfolders). Where one model has several runs of the
        task, the newest is read.
      task: the lm-eval task name.
      metric: the per-sample metric to read (``acc``, ``exact_match``, ...); values must lie in
        [0, 1] (booleans count as 0/1).
      filter: the filter (``strict-match``, ``flexible-extract``, ...); may be left out when the
        task logs one filter.

    Example ids are ``doc_id`` (as strings, in increasing order); a model that lacks a doc has a
    missing cell there. The same ``doc_id`` with a different ``doc_hash`` in two models' logs is
    refused (the logs come from different documents).
    """
    require(paths, "read_lm_eval: give at least one folder")
    runs = []
    for folder in map(Path, paths):
        require(folder.exists(), f"{folder}: no such folder")
        runs += [(_model_name(f), f) for f in _sample_files(folder, task).get(task, [])]
    if not runs:
        inventory = lm_eval_inventory(paths)
        where = ", ".join(map(str, paths))
        require(inventory, f"{where}: no lm-eval sample files (samples_<task>_<time>.jsonl); run lm_eval with "
                           "--output_path DIR --log_samples")
        raise PulseInputError(f"{where}: no samples for task {task!r}; tasks present: {', '.join(inventory)}")
    owner: dict[str, Path] = {}
    for name, path in runs:       # a re-run in the same folder replaces the older run of that model
        older = owner.get(name)
        require(older is None or older.parent == path.parent,
                f"{path}: model {name!r} also in {older}; two folders hold a model of that name "
                "(import them separately, or keep one)")
        if older is None or _stamp(path) >= _stamp(older):
            owner[name] = path
    cells, hashes = {}, {}
    for name, newest in owner.items():
        available = {"metrics": set(), "filters": set()}
        rows = _read_samples(newest, metric, filter, available)
        if not rows:
            require(metric in available["metrics"], f"{newest}: no metric {metric!r}; metrics present: "
                                                    f"{', '.join(sorted(available['metrics']))}")
            raise PulseInputError(f"{newest}: no samples with filter {filter!r}; filters present: "
                                  f"{', '.join(sorted(available['filters']))}")
        if filter is None and len(available["filters"]) > 1:
            raise PulseInputError(f"{newest}: several filters ({', '.join(sorted(available['filters']))}); "
                                  "choose one with --filter")
        for doc, (score, digest) in rows.items():
            if digest is not None:
                seen = hashes.setdefault(doc, (digest, newest))
                require(seen[0] == digest, f"doc_id {doc} differs between {seen[1]} and {newest} (doc_hash); "
                                           "these logs are not of the same documents")
            cells[(name, doc)] = score
    # Rows in the order the runs were found, columns in doc_id order (what _matrix gives for these cells).
    ordered = {(name, str(doc)): cells[(name, doc)] for doc in sorted({d for _, d in cells}) for name in owner
               if (name, doc) in cells}
    matrix = _matrix(ordered, f"lm-eval logs of {task}")
    rows = [matrix.models.index(name) for name in owner]
    return ScoreMatrix(matrix.scores[rows], tuple(owner), matrix.examples, source=matrix.source)


def describe(matrix: ScoreMatrix) -> str:
    """One line: models, examples, missing cells, score range."""
    s = matrix.scores
    missing = int(np.isnan(s).sum())
    lo, hi = (float(np.nanmin(s)), float(np.nanmax(s))) if missing < s.size else (math.nan, math.nan)
    binary = bool(np.all(np.isin(s[~np.isnan(s)], (0.0, 1.0))))
    return (f"{len(matrix.models)} models x {len(matrix.examples)} examples, {missing:,} of {s.size:,} cells missing, "
            f"scores in [{lo:g}, {hi:g}]" + (" (binary)" if binary else ""))


# ----------------------------------------------------------------------------- live scoring


def parse_model_spec(text: str) -> tuple[str, str]:
    """``"hf:pretrained=gpt2,dtype=float32"`` -> ``("hf", "pretrained=gpt2,dtype=float32")``; ``"dummy"`` ->
    ``("dummy", "")``: an lm-eval ``--model`` type and its ``--model_args``."""
    kind, _, args = text.strip().partition(":")
    require(kind and re.fullmatch(r"[A-Za-z0-9_.\-]+", kind),
            f"model spec {text!r}: expected TYPE or TYPE:ARGS, e.g. hf:pretrained=gpt2")
    return kind, args


def _task_manager(TaskManager, task: str, include_path):
    """lm-eval's task index. With an include path that defines ``task``, that folder alone: indexing
    lm-eval's thousands of built-in task files takes seconds at every start."""
    if include_path:
        try:
            local = TaskManager(include_path=str(include_path), include_defaults=False)
        except TypeError:    # an lm-eval without include_defaults
            local = None
        if local is not None and task in local.all_tasks:
            return local
    return TaskManager(include_path=str(include_path) if include_path else None)


class LmEvalScorer:
    """A live scorer that evaluates each asked batch through lm-evaluation-harness.

    ``scorer(model, example_ids)`` runs ``lm_eval.simple_evaluate`` on the model named ``model``
    (built once from its spec and reused) for exactly the task documents ``example_ids`` (lm-eval's
    ``samples={task: ids}``), and returns their per-document ``metric`` (after ``filter``).
    Pass it as ``evaluate`` to `pulse_jax.live.run`, with ``doc_ids`` as the selector's examples.

    Args:
      task: an lm-eval task name (``include_path`` adds a folder of task YAMLs).
      models: ``{candidate name: "TYPE[:ARGS]"}`` (see `parse_model_spec`), or a sequence of
        specs, each then named by itself.
      metric: the per-document metric to read from each sample, in [0, 1].
      filter: the lm-eval filter to read (None: the task's only filter).
      include_path: a folder of custom task YAML files.
      cache_dir: a folder for lm-eval's request cache, one database per candidate. Models that
        report each request as it is computed (lm-eval's cache hook, as its Hugging Face model
        does) then never compute a request twice, even across a ``kill -9`` and a resume: the
        selector's log keeps the scored batches, this cache the requests of a batch in flight.
      plugins: modules to import first (e.g. ones that register lm-eval model classes of your own).
      device: where models run (``"cpu"``, ``"cuda:0"``, ...; default: a GPU when torch sees one).
      evaluate_options: more keyword arguments for ``lm_eval.simple_evaluate`` (e.g. ``num_fewshot``).
    """

    #: One evaluation at a time (the harness's eval cannot run twice at once): `pulse_jax.live.run`
    #: keeps one batch in flight with it.
    max_concurrency = 1

    def __init__(self, task: str, models, *, metric: str = "acc", filter: str | None = None,  # noqa: A002
                 include_path=None, cache_dir=None, plugins: Sequence[str] = (), device: str | None = None,
                 evaluate_options: Mapping | None = None):
        import os

        os.environ.setdefault("TQDM_DISABLE", "1")   # read when tqdm is first imported (see _quiet_lm_eval)
        try:
            from lm_eval.tasks import TaskManager
        except ImportError:
            raise PulseInputError("live scoring with lm-eval needs it installed: pip install -e \".[harness]\"") \
                from None
        from pulse_jax.registry import import_user_module

        _quiet_lm_eval()
        for module in plugins:        # modules that register lm-eval model classes of their own
            import_user_module(module, "--lm-eval-plugin")
        specs = dict(models) if isinstance(models, Mapping) else {str(m): str(m) for m in models}
        require(specs, "LmEvalScorer: no models")
        self.specs = {name: parse_model_spec(spec) for name, spec in specs.items()}
        self.task, self.metric, self.filter = task, metric, filter
        self.options = dict(evaluate_options or {})
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.device = device
        self._task_manager = _task_manager(TaskManager, task, include_path)
        require(task in self._task_manager.all_tasks, f"lm-eval has no task {task!r}"
                + (f" (include path {include_path})" if include_path else "; pass the folder of its YAML with "
                   "--lm-eval-include"))
        self._models: dict = {}
        self.model_seconds = 0.0      # time inside the models' own request methods
        self.lm_eval_seconds = 0.0    # time inside lm_eval.simple_evaluate (the models' time included)
        self.total_seconds = 0.0      # time inside __call__ (the adapter's own work included)
        self.calls = 0

    @functools.cached_property
    def doc_ids(self) -> list[int]:
        """The task's evaluation documents, as ids ``0 .. n-1`` (the task is loaded once to count them)."""
        return list(range(len(self._task_obj().eval_docs)))

    def _task_obj(self):
        load = getattr(self._task_manager, "load", None)
        if load is not None:          # lm-eval >= 0.4.10
            return load([self.task])["tasks"][self.task]
        from lm_eval.tasks import get_task_dict

        return get_task_dict([self.task], self._task_manager)[self.task]

    def _model(self, name: str):
        if name not in self._models:
            import lm_eval.models  # noqa: F401  (lm-eval's own types: lazily registered only into an empty registry)
            from lm_eval.api.registry import get_model

            kind, args = self.specs[name]
            try:
                get_model(kind)
            except ValueError:
                raise PulseInputError(f"model spec {kind}:{args}: lm-eval has no model type {kind!r} (a type of "
                                      "your own needs --lm-eval-plugin MODULE)") from None
            device = self.device or _default_device(kind)
            lm = get_model(kind).create_from_arg_string(args, {"batch_size": 1, "device": device})
            self._models[name] = _timed(lm, self)
        return self._models[name]

    def __call__(self, model: str, example_ids) -> list[float]:
        import lm_eval

        require(model in self.specs, f"LmEvalScorer: unknown model {model!r}")
        ids = [int(i) for i in example_ids]
        # lm-eval evaluates the given indices in increasing order and labels its samples by the order
        # given: ask in increasing order, so each sample's doc_id is the document it scored.
        asked = sorted(set(ids))
        start = time.perf_counter()
        cache = None
        if self.cache_dir is not None:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            tag = hashlib.sha256(model.encode()).hexdigest()[:10]   # lm-eval's keys omit the model: one db each
            cache = str(self.cache_dir / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', model)[:60]}-{tag}")
        lm = self._model(model)
        inner = time.perf_counter()
        out = lm_eval.simple_evaluate(model=lm, tasks=[self.task], samples={self.task: asked},
                                      task_manager=self._task_manager, log_samples=True, verbosity="ERROR",
                                      use_cache=cache, **self.options)
        self.lm_eval_seconds += time.perf_counter() - inner
        rows = out["samples"][self.task]
        found = {}
        for row in rows:
            if self.filter is not None and row.get("filter", "none") != self.filter:
                continue
            require(self.metric in row, f"lm-eval task {self.task!r} logs no metric {self.metric!r}; metrics: "
                                        f"{', '.join(row.get('metrics') or [])}")
            found[int(row["doc_id"])] = _score(row[self.metric], f"lm-eval {self.task} doc {row['doc_id']}")
        missing = [i for i in ids if i not in found]
        require(not missing, f"lm-eval returned no {self.metric!r} for docs {missing[:5]} of {self.task!r}")
        self.calls += 1
        self.total_seconds += time.perf_counter() - start
        return [found[i] for i in ids]


#: lm-eval model types that run on torch (the device matters to them).
TORCH_MODEL_TYPES = ("hf", "hf-auto", "huggingface", "hf-multimodal", "hf-audiolm-qwen", "mamba_ssm", "neuronx",
                     "sparseml", "deepsparse", "vllm", "vllm-vlm", "steered")


def _default_device(kind: str) -> str | None:
    """A GPU when torch sees one, else the CPU, for a model type that runs on torch (`TORCH_MODEL_TYPES`, or
    torch already loaded); None otherwise: the model type decides, and torch is not loaded into this
    process for a model that does not use it."""
    import sys

    if kind not in TORCH_MODEL_TYPES and "torch" not in sys.modules:
        return None
    try:
        import torch
    except ImportError:
        return None
    return "cuda" if torch.cuda.is_available() else "cpu"


def _quiet_lm_eval() -> None:
    """lm-eval draws a progress bar per request kind and asks ``git`` for the working folder's commit
    at every evaluation (printing git's error outside a repository). Live scoring runs one small
    evaluation per batch under pulse-jax's own progress bar: bars off (``TQDM_DISABLE``, unless set),
    and the commit asked once, quietly."""
    import subprocess

    import lm_eval.evaluator

    if getattr(lm_eval.evaluator.get_git_commit_hash, "_pulse_quiet", False):
        return

    @functools.cache
    def commit():
        try:
            found = subprocess.run(["git", "describe", "--always"], capture_output=True, text=True, timeout=10)
            return found.stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            return None

    commit._pulse_quiet = True
    lm_eval.evaluator.get_git_commit_hash = commit


def _timed(lm, scorer):
    """``lm`` with its request methods adding their time to ``scorer.model_seconds`` (so the adapter's
    own overhead can be measured apart from the model's)."""
    for name in ("loglikelihood", "loglikelihood_rolling", "generate_until"):
        method = getattr(lm, name, None)
        if method is None:
            continue

        def timed(*args, _method=method, **kwargs):
            start = time.perf_counter()
            try:
                return _method(*args, **kwargs)
            finally:
                scorer.model_seconds += time.perf_counter() - start

        setattr(lm, name, timed)
    return lm
