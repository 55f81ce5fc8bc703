"""Inspect in the loop: importing logs, what live scoring adds, and how close the cost line comes.

1. **Import.** Writes one Inspect ``.eval`` log of ``--samples`` samples with Inspect's own writer
   (``inspect_ai.log.write_eval_log``: scores, token usage), copies it under ``--models`` model
   names (the copies differ in the model named in their header; the samples are the same), then
   times `pulse_jax.harnesses.inspect_logs.read_inspect` on the folder (target: 100 x 10,000 in < 60 s
   on 2 cores). The folder is kept in ``--workdir`` and reused.
2. **Live overhead.** Scores ``--batches`` batches of ``--batch-size`` samples of a
   ``--task-samples``-sample task through `InspectScorer` with Inspect's mock model, and splits
   the time: inside ``inspect_ai.eval`` and in the adapter itself (target: < 5% of Inspect's).
3. **Cost line.** A replayed history: per-cell token counts with model-specific verbosity and
   sample-specific length (log-normal). The cost line is estimated from half of the samples; a
   fixed-budget ``select`` (``pulse_hedged`` and UCB-E, ``--reps`` seeds) runs on the other half,
   each cell priced at its replayed tokens; reported: the expected spend of the whole budget
   against the actual spend (target: within 10%).

    python benchmarks/harnesses/bench_inspect.py --out docs/benchmarks/inspect.json

Prints a table and writes ``--out`` (JSON) and the same path with ``.md``.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import sys

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402


def write_logs(folder: Path, models: int, samples: int, seed: int = 0) -> float:
    """``models`` Inspect logs of ``samples`` samples each; returns the seconds Inspect's writer took."""
    import zipfile

    import zipfile_zstd  # noqa: F401  (Inspect's .eval members are zstd-compressed)
    from inspect_ai.log import EvalLog, EvalSample, write_eval_log
    from inspect_ai.log import EvalDataset, EvalSpec, EvalConfig, EvalStats
    from inspect_ai.model import ModelUsage
    from inspect_ai.scorer import Score

    folder.mkdir(parents=True, exist_ok=True)
    template = folder / "model-000.eval"
    seconds = 0.0
    if not template.exists():
        rng = np.random.default_rng(seed)
        rows = [EvalSample(id=k + 1, epoch=1, input=f"question {k + 1}", target="C",
                           scores={"match": Score(value="C" if rng.random() < 0.6 else "I")},
                           model_usage={"bench/model-000": ModelUsage(input_tokens=int(rng.integers(30, 300)),
                                                                      output_tokens=int(rng.integers(1, 50)),
                                                                      total_tokens=0)})
                for k in range(samples)]
        spec = EvalSpec(created="2026-11-26T00:00:00+00:00", task="bench", dataset=EvalDataset(samples=samples),
                        model="bench/model-000", config=EvalConfig())
        start = time.perf_counter()
        write_eval_log(EvalLog(status="success", eval=spec, samples=rows, stats=EvalStats()), str(template))
        seconds = time.perf_counter() - start
    with zipfile.ZipFile(template) as src:
        header = src.read("header.json")
        kind = src.getinfo("header.json").compress_type
    for k in range(1, models):
        target = folder / f"model-{k:03d}.eval"
        if target.exists():
            continue
        # The copy keeps every member's compressed bytes and replaces only header.json, the zip's
        # last member (the model named there is what read_inspect reads a log's model from).
        shutil.copyfile(template, target)
        with zipfile.ZipFile(target, "a") as out:
            info = out.getinfo("header.json")
            out.filelist.remove(info)
            del out.NameToInfo["header.json"]
            out.start_dir = info.header_offset
            out.writestr("header.json", header.replace(b'"model":"bench/model-000"',
                                                       f'"model":"bench/model-{k:03d}"'.encode()), compress_type=kind)
    return seconds


def bench_import(models: int, samples: int, workdir: Path) -> dict:
    from pulse_jax.harnesses import inspect_logs

    folder = workdir / f"inspect_{models}x{samples}"
    write_seconds = write_logs(folder, models, samples)
    if write_seconds == 0.0:
        write_seconds = json.loads((workdir / f"write_seconds_{models}x{samples}.json").read_text())["seconds"]
    else:
        (workdir / f"write_seconds_{models}x{samples}.json").write_text(json.dumps({"seconds": write_seconds}))
    start = time.perf_counter()
    logs = inspect_logs.read_inspect([folder])
    seconds = time.perf_counter() - start
    assert logs.scores.shape == (models, samples), logs.scores.shape
    size = sum(p.stat().st_size for p in folder.glob("*.eval"))
    return {"models": models, "samples": samples, "seconds": round(seconds, 2), "bytes": size,
            "template_write_seconds": round(write_seconds, 1)}


def bench_overhead(task_samples: int, batch_size: int, batches: int, workdir: Path) -> dict:
    from inspect_ai import Task
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ModelOutput, ModelUsage, get_model
    from inspect_ai.scorer import match
    from inspect_ai.solver import generate

    from pulse_jax.harnesses.inspect_logs import InspectScorer

    def outputs(input, tools, tool_choice, config):
        out = ModelOutput.from_content(model="mockllm", content="7")
        out.usage = ModelUsage(input_tokens=10, output_tokens=1, total_tokens=11)
        return out

    task = Task(name="overhead", dataset=[Sample(input=f"q{k}", target="7", id=k) for k in range(1, task_samples + 1)],
                solver=generate(), scorer=match())
    logs = workdir / "inspect_live"
    shutil.rmtree(logs, ignore_errors=True)
    scorer = InspectScorer(task, {"mockllm/a": get_model("mockllm/a", custom_outputs=outputs)}, logs)
    rng = np.random.default_rng(0)
    order = rng.permutation(scorer.sample_ids)
    scorer("mockllm/a", order[:batch_size].tolist())          # warm-up: the first eval builds the model
    scorer.eval_seconds = scorer.total_seconds = 0.0
    for b in range(1, batches + 1):
        scorer("mockllm/a", order[b * batch_size:(b + 1) * batch_size].tolist())
    adapter = scorer.total_seconds - scorer.eval_seconds
    return {"batch_size": batch_size, "batches": batches, "ms_per_batch": round(1000 * scorer.total_seconds / batches, 1),
            "inspect_ms": round(1000 * scorer.eval_seconds / batches, 1),
            "adapter_ms": round(1000 * adapter / batches, 2),
            "adapter_share": round(adapter / scorer.eval_seconds, 4)}


class _Replay:
    """A scorer that replays a history: scores and token counts of every (model, sample)."""

    def __init__(self, scores, t_in, t_out, models):
        self.scores, self.t_in, self.t_out = scores, t_in, t_out
        self.row = {m: k for k, m in enumerate(models)}

    def __call__(self, model, ids):
        return [float(self.scores[self.row[model], j]) for j in ids]

    def tokens(self, model, ids):
        r = self.row[model]
        return float(self.t_in[r, list(ids)].sum()), float(self.t_out[r, list(ids)].sum())


def bench_cost_line(reps: int, workdir: Path) -> list[dict]:
    import pulse_jax as pj
    from pulse_jax import live
    from pulse_jax.fileio.data import ScoreMatrix
    from pulse_jax.harnesses.inspect_logs import InspectLogs
    from pulse_jax.live import money

    bench = pj.make_benchmark(seed=0)
    m, n = bench.scores.shape
    rng = np.random.default_rng(1)
    verbosity = rng.lognormal(0.0, 0.5, m)          # some models answer at length
    length = rng.lognormal(5.0, 0.6, n)             # some samples are long
    t_in = np.round(length[None, :] * np.ones((m, 1)))
    t_out = np.round(40 * verbosity[:, None] * rng.lognormal(0.0, 0.3, (m, n)))
    models = [f"m{k:02d}" for k in range(m)]
    half = n // 2                                   # estimate from the first half, run on the second
    history = InspectLogs(ScoreMatrix(bench.scores[:, :half], tuple(models), tuple(map(str, range(half)))),
                          t_in[:, :half], t_out[:, :half], "replay", "match")
    prices = money.parse_prices(["*=3/15"], models)
    expected = money.expected_cost_per_cell(models, prices, history)
    replay = _Replay(bench.scores[:, half:], t_in[:, half:], t_out[:, half:], models)
    budget = 4000
    rows = []
    for method in ("ucbe", "pulse_hedged"):
        ratios = []
        for seed in range(reps):
            log = workdir / f"cost_{method}_{seed}.db"
            for p in workdir.glob(log.name + "*"):
                p.unlink() if p.is_file() else shutil.rmtree(p)
            meter = money.Meter(models, prices, expected, tokens=replay.tokens)
            selector = live.Selector(models, list(range(n - half)), budget, method=method, batch_size=8,
                                     refit_every=25, seed=seed, train=bench.train[:, half:] if method != "ucbe" else None,
                                     rank=8, log=str(log), stop="budget")
            live.run(replay, selector, handle_signals=False)
            meter.update(selector.evaluated())
            selector.close()
            ratios.append(budget * float(expected.mean()) / meter.usd)
        ratios = np.array(ratios)
        rows.append({"method": method, "reps": reps, "budget_cells": budget,
                     "expected_usd": round(budget * float(expected.mean()), 4),
                     "actual_usd_mean": round(budget * float(expected.mean()) / float(ratios.mean()), 4),
                     "error_mean": round(float(np.mean(np.abs(ratios - 1))), 4),
                     "error_max": round(float(np.max(np.abs(ratios - 1))), 4)})
    return rows


def main() -> None:
    parser = common.parser(__doc__, models=100, batch_size=32)
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--task-samples", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--reps", type=int, default=10, help="seeds of the replayed fixed-budget runs")
    parser.add_argument("--workdir", default=None, help="where the logs are written (kept and reused)")
    parser.add_argument("--out", default=None, help="JSON file (and .md beside it)")
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="pulse_inspect_bench_"))
    workdir.mkdir(parents=True, exist_ok=True)
    import inspect_ai

    result = {"platform": platform.platform(), "cpus": os.cpu_count(), "inspect_ai": inspect_ai.__version__,
              "import": bench_import(args.models, args.samples, workdir),
              "live": bench_overhead(args.task_samples, args.batch_size, args.batches, workdir),
              "cost_line": bench_cost_line(args.reps, workdir)}
    imp, lv = result["import"], result["live"]
    lines = ["| measure | size | measured | target |", "|---|---|---|---|",
             f"| import Inspect logs | {imp['models']} models x {imp['samples']:,} samples "
             f"({imp['bytes'] / 1e6:,.0f} MB of .eval) | {imp['seconds']} s | < 60 s |",
             f"| live batch, Inspect's mock model | batch {lv['batch_size']}, {lv['batches']} batches of a "
             f"{args.task_samples:,}-sample task | {lv['ms_per_batch']} ms per batch: Inspect {lv['inspect_ms']} ms, "
             f"the adapter {lv['adapter_ms']} ms, {100 * lv['adapter_share']:.2f}% of Inspect's time | adapter < 5% |"]
    for row in result["cost_line"]:
        lines.append(f"| cost line vs spend, replayed history | `{row['method']}`, {row['budget_cells']:,} cells, "
                     f"{row['reps']} seeds | expected {row['expected_usd']:.2f} USD, spent {row['actual_usd_mean']:.2f} USD "
                     f"on average; error mean {100 * row['error_mean']:.1f}%, max {100 * row['error_max']:.1f}% | "
                     "within 10% |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
        Path(args.out).with_suffix(".md").write_text(text + "\n")


if __name__ == "__main__":
    main()
