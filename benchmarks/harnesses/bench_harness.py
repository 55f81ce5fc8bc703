"""lm-evaluation-harness in the loop: how long importing logs takes, and what live scoring adds.

1. **Import.** Writes lm-eval ``--log_samples`` folders for ``--models`` models x ``--docs``
   documents (one folder per model, each with a results JSON and a samples JSONL whose lines have
   the fields and sizes of lm-eval 0.4's: the document, the request arguments, the responses,
   hashes and the metric), then times :func:`pulse_jax.harnesses.lm_evaluation.read_lm_eval` on them (target: 100 x
   10,000 in < 30 s on 2 cores).
2. **Live overhead.** Scores ``--batches`` batches of ``--batch-size`` documents of a local
   ``--task-docs``-document multiple-choice task through :class:`pulse_jax.harnesses.lm_evaluation.LmEvalScorer`
   with lm-eval's own ``dummy`` model, and splits the time: inside the model's request methods,
   inside ``lm_eval.simple_evaluate`` (lm-eval's own work: building requests, filters, metrics),
   and in the adapter itself (target: the adapter's own share < 5% of lm-eval's time).

    python benchmarks/harnesses/bench_harness.py --out docs/benchmarks/harness.json

Prints a table and writes ``--out`` (JSON) and the same path with ``.md``. Needs the harness
extra (``pip install -e ".[harness]"``) for part 2.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import sys

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402


def write_logs(root: Path, models: int, docs: int, seed: int = 0) -> int:
    """lm-eval-shaped output folders; returns the bytes written."""
    rng = np.random.default_rng(seed)
    total = 0
    for k in range(models):
        folder = root / f"org__model-{k:03d}"
        folder.mkdir(parents=True)
        stamp = f"2026-11-24T08-00-{k % 60:02d}.{k:06d}"
        (folder / f"results_{stamp}.json").write_text(json.dumps({
            "model_name": f"org/model-{k:03d}", "config": {"model": "hf", "model_args": f"pretrained=org/model-{k:03d}"},
            "results": {"bench": {"acc,none": 0.5}}}))
        skill = rng.uniform(0.2, 0.9)
        correct = rng.random(docs) < skill
        lines = []
        for d in range(docs):
            question = f"Question {d}: which of the following best describes item {d}?"
            choices = [f"option {c} for item {d}" for c in "ABCD"]
            doc = {"question": question, "choices": choices, "answer": d % 4}
            lines.append(json.dumps({
                "doc_id": d, "doc": doc, "target": str(d % 4),
                "arguments": {f"gen_args_{c}": {"arg_0": f"{question}\nAnswer:", "arg_1": f" {choices[c]}"}
                              for c in range(4)},
                "resps": [[[f"{-rng.random():.16f}", "False"]] for _ in range(4)],
                "filtered_resps": [[f"{-rng.random():.16f}", "False"] for _ in range(4)],
                "filter": "none", "metrics": ["acc"],
                "doc_hash": hashlib.sha256(question.encode()).hexdigest(),
                "prompt_hash": hashlib.sha256(f"p{d}".encode()).hexdigest(),
                "target_hash": hashlib.sha256(str(d % 4).encode()).hexdigest(),
                "acc": float(correct[d])}))
        text = "\n".join(lines) + "\n"
        (folder / f"samples_bench_{stamp}.jsonl").write_text(text)
        total += len(text)
    return total


def bench_import(models: int, docs: int, workdir: Path) -> dict:
    from pulse_jax.harnesses import lm_evaluation

    root = workdir / "logs"
    start = time.perf_counter()
    size = write_logs(root, models, docs)
    written = time.perf_counter() - start
    start = time.perf_counter()
    matrix = lm_evaluation.read_lm_eval([root], "bench", "acc")
    seconds = time.perf_counter() - start
    assert matrix.scores.shape == (models, docs) and not np.isnan(matrix.scores).any()
    return {"models": models, "docs": docs, "bytes": size, "write_seconds": round(written, 2),
            "import_seconds": round(seconds, 2), "target_seconds": 30, "summary": lm_evaluation.describe(matrix)}


TASK = """task: bench_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}\\nAnswer:"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: answer
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""


def bench_overhead(task_docs: int, batch_size: int, batches: int, workdir: Path) -> dict:
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    from pulse_jax.harnesses import lm_evaluation

    task_dir = workdir / "task"
    task_dir.mkdir()
    with open(task_dir / "data.jsonl", "w") as handle:
        for d in range(task_docs):
            handle.write(json.dumps({"question": f"Question {d}: pick the option for item {d}.",
                                     "choices": [f"option {c}" for c in "ABCD"], "answer": d % 4}) + "\n")
    (task_dir / "bench_mc.yaml").write_text(TASK.format(data=task_dir / "data.jsonl"))
    scorer = lm_evaluation.LmEvalScorer("bench_mc", {"dummy": "dummy"}, include_path=task_dir)
    rng = np.random.default_rng(0)
    scorer("dummy", list(range(batch_size)))                   # builds the task and the model once
    scorer.model_seconds = scorer.lm_eval_seconds = scorer.total_seconds = 0.0
    for _ in range(batches):
        scorer("dummy", rng.choice(task_docs, size=batch_size, replace=False).tolist())
    adapter = scorer.total_seconds - scorer.lm_eval_seconds
    return {"task_docs": task_docs, "batch_size": batch_size, "batches": batches,
            "per_batch_ms": round(1000 * scorer.total_seconds / batches, 2),
            "model_ms": round(1000 * scorer.model_seconds / batches, 3),
            "lm_eval_ms": round(1000 * scorer.lm_eval_seconds / batches, 2),
            "adapter_ms": round(1000 * adapter / batches, 3),
            "adapter_pct_of_lm_eval": round(100 * adapter / scorer.lm_eval_seconds, 2), "target_pct": 5}


def main() -> None:
    parser = common.parser(__doc__, models=100, batch_size=32)
    parser.add_argument("--docs", type=int, default=10_000)
    parser.add_argument("--task-docs", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--skip-live", action="store_true", help="only the import (no lm-eval needed)")
    parser.add_argument("--out", default=None, help="JSON file (and .md beside it)")
    args = parser.parse_args()
    from importlib import metadata

    record = {"machine": f"{os.cpu_count()} CPU cores, {platform.machine()}", "python": platform.python_version()}
    with tempfile.TemporaryDirectory(prefix="pulse_bench_harness_") as tmp:
        record["import"] = bench_import(args.models, args.docs, Path(tmp))
        if not args.skip_live:
            record["lm_eval_version"] = metadata.version("lm_eval")
            record["live"] = bench_overhead(args.task_docs, args.batch_size, args.batches, Path(tmp))
    imp = record["import"]
    rows = [("import lm-eval logs", f"{imp['models']} models x {imp['docs']:,} docs ({imp['bytes'] / 1e9:.2f} GB)",
             f"{imp['import_seconds']} s", "< 30 s")]
    if "live" in record:
        live = record["live"]
        rows.append(("live batch, dummy model", f"batch {live['batch_size']}, {live['batches']} batches",
                     f"{live['per_batch_ms']} ms per batch: lm-eval {live['lm_eval_ms']} ms (model "
                     f"{live['model_ms']} ms), adapter {live['adapter_ms']} ms = {live['adapter_pct_of_lm_eval']}% "
                     "of lm-eval's time", "adapter < 5%"))
    table = ["| measure | size | measured | target |", "|---|---|---|---|"]
    table += [f"| {' | '.join(r)} |" for r in rows]
    text = "\n".join(table)
    print(text)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(record, indent=2))
        out.with_suffix(".md").write_text(f"{record['machine']}, lm-eval {record.get('lm_eval_version', '-')}\n\n"
                                          f"{text}\n")


if __name__ == "__main__":
    main()
