"""Reproduce the PULSE paper's experiments (Section 5) and write a results directory.

The grid: both paper-scale datasets (factor files in ../shared/data: MMLU-Pro
and the BBH/GPQA/IFEval/MATH/MuSR composite) x Delta_top2 in {0.01, 0.02,
0.03} x {UCB-E, PULSE, Naive-Pooling}, plus the two real matrices
(CRUXEval-O, ChemBench; models split at random into train and candidates).
Paper defaults: 1,000 candidates, B = 64, one initialization batch per model,
400,000 bandit cells, refit every 1,000 steps, a = 1, 500 repetitions. Flags
scale it down. Every (setting, method) result is saved as soon as it is done,
so an interrupted run resumes where it stopped.

    python benchmarks/paper/reproduce_paper.py --out results/paper                 # the full grid
    python benchmarks/paper/reproduce_paper.py --out results/small --reps 100 --candidates 200 \\
        --bandit-budget 60000 --rank 32 --refit-every 250                     # a scaled run
    python benchmarks/paper/reproduce_paper.py --tiny --out /tmp/tiny               # seconds, for CI

Outputs in --out: summary.json, results.csv, table.md (budget to 95% per method
and savings vs UCB-E, in the paper's form), accuracy_<setting>.png/.pdf,
budget_to_95.png/.pdf, effective_budget_<setting>.png, and one .npz per result.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

from pulse_jax.stats import factorization
from pulse_jax.fileio import data
from pulse_jax.analysis import metrics, plotting
from pulse_jax.engine import BanditConfig, Plugins
from pulse_jax.analysis.results import clean_json
from pulse_jax.compilation_cache import enable_compilation_cache
from pulse_jax.simulation import SimulationResult, simulate
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402

SHARED = common.SHARED
FACTOR_FILES = {"mmlu_pro": "openllm_v2_mmlu_pro_factors.npz",
                "bbh_composite": "openllm_v2_bbh_gpqa_ifeval_math_musr_factors.npz"}
TINY_EXAMPLES = 300   # --tiny: every setting is 20 candidates x 300 examples, 1,500 bandit cells
#: The real matrices shipped with the package (`pulse_jax.datasets`, docs/data.md), by this script's names.
REAL_FILES = {"cruxeval": "cruxeval_o", "chembench": "chembench"}
LABEL = {"mmlu_pro": "Bench 1 (MMLU-Pro)", "bbh_composite": "Bench 2 (BBH composite)",
         "cruxeval": "CRUXEval-O (real)", "chembench": "ChemBench (real)"}


def parse_args(argv=None):
    p = common.parser(__doc__, out="results/paper", methods="ucbe,pulse,naive", reps=500, batch_size=64, refit_every=1000, seed=0)
    p.add_argument("--data", default=str(SHARED), help="folder with the paper-scale factor files (docs/data.md)")
    p.add_argument("--datasets", default="mmlu_pro,bbh_composite,cruxeval,chembench")
    p.add_argument("--deltas", default="0.01,0.02,0.03")
    p.add_argument("--candidates", type=int, default=1000)
    p.add_argument("--bandit-budget", type=int, default=400_000, help="cells after initialization (paper scale)")
    p.add_argument("--real-budget-fraction", type=float, default=0.3,
                   help="bandit budget for the real matrices, as a fraction of their candidate cells")
    p.add_argument("--rank", type=int, default=100, help="stage-0 factorization rank (paper: 100)")
    p.add_argument("--stage0-epochs", type=int, default=300)
    p.add_argument("--chunk-size", type=int, default=None)
    p.add_argument("--tiny", action="store_true", help="a seconds-long configuration (CI)")
    args = p.parse_args(argv)
    if args.tiny:
        args.reps, args.candidates, args.bandit_budget, args.rank = 6, 20, 1500, 4
        args.batch_size, args.refit_every, args.stage0_epochs = 16, 20, 30
        args.deltas = args.deltas if args.deltas != "0.01,0.02,0.03" else "0.02"
    return args


def settings(args):
    """(name, dataset, delta) for every setting of the grid."""
    out = []
    for ds in args.datasets.split(","):
        ds = ds.strip()
        if ds in FACTOR_FILES:
            out += [(f"{ds}_d{float(d):.2f}", ds, float(d)) for d in args.deltas.split(",")]
        elif ds in REAL_FILES:
            out.append((ds, ds, None))
        else:
            raise SystemExit(f"unknown dataset {ds!r}; choose from {', '.join([*FACTOR_FILES, *REAL_FILES])}")
    return out


def load_problem(args, dataset, delta, tiny_rows=None):
    """(train matrix, candidate matrix, info) for one setting."""
    folder = Path(args.data)
    if dataset in FACTOR_FILES:
        path = folder / FACTOR_FILES[dataset]
        if not path.is_file():
            return None
        if args.tiny:   # a small slice of the real factors keeps CI fast
            U, V = data.load_factors(path)
            sliced = Path(args.out) / f"_{dataset}_tiny_factors.npz"
            np.savez(sliced, U=U[:120], V=V[:TINY_EXAMPLES])
            path = sliced
        train, cand, info = data.paper_scale_problem(path, seed=args.seed, n_candidates=args.candidates,
                                                     delta_top2=delta)
        return train, cand, info
    from pulse_jax import datasets

    train, cand, info = data.split_models(datasets.load(REAL_FILES[dataset]), seed=args.seed)
    cand.require_complete()
    if args.tiny:   # the factor settings' shape (their compiled programs are reused): first candidates/examples
        n = TINY_EXAMPLES
        cand = data.subset_rows(cand, range(min(args.candidates, cand.shape[0])))
        cand = dataclasses.replace(cand, scores=cand.scores[:, :n], examples=cand.examples[:n])
        train = dataclasses.replace(train, scores=train.scores[:, :n], examples=train.examples[:n])
    return train, cand, info


def embeddings(args, dataset, train, out: Path):
    """Stage-0 example embeddings, cached per dataset for resuming."""
    cache = out / f"_{dataset}_V_rank{args.rank}.npy"
    if cache.is_file():
        return np.load(cache)
    rank = min(args.rank, *train.shape)
    V = np.asarray(factorization.fit_example_embeddings(
        train.scores, rank=rank, settings=factorization.adam_settings(args.stage0_epochs, 0.05, 0.01),
        seed=args.seed))
    np.save(cache, V)
    return V


def save_result(path: Path, res: SimulationResult):
    np.savez_compressed(path, best=res.best, spent=res.spent, true_means=res.true_means, estimates=res.estimates,
                        radius=res.radius, n_obs=res.n_obs, n_pulls=res.n_pulls, seconds=res.seconds,
                        compile_seconds=res.compile_seconds)


def load_result(path: Path, method: str, config: BanditConfig, seed: int) -> SimulationResult:
    with np.load(path) as f:
        reps = f["best"].shape[0]
        return SimulationResult(method, config, seed, f["true_means"], f["best"], f["spent"],
                                np.zeros((reps, 0), int), np.zeros((reps, 0)), f["estimates"], f["radius"],
                                f["n_obs"], f["n_pulls"], float(f["seconds"]), float(f["compile_seconds"]),
                                plugins=Plugins(method))


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    enable_compilation_cache()
    methods = [m.strip() for m in args.methods.split(",")]
    all_results, rows, panels, skipped, infos = {}, [], {}, [], {}
    for name, dataset, delta in settings(args):
        problem = load_problem(args, dataset, delta)
        if problem is None:
            skipped.append(f"{name}: data file not found in {args.data}")
            print(f"[skip] {skipped[-1]}", file=sys.stderr)
            continue
        train, cand, info = problem
        m, n = cand.shape
        gap = info.get("realized_top2_gap")
        if delta is not None and abs(gap - delta) > 0.005:
            skipped.append(f"{name}: no candidate's gap to the best is near {delta} (closest: {gap:.4f}); "
                           "this setting repeats another")
            print(f"[note] {skipped[-1]}", file=sys.stderr)
        if dataset in FACTOR_FILES or args.tiny:
            bandit_budget = args.bandit_budget
        else:
            bandit_budget = int(args.real_budget_fraction * m * n)
        batch = min(args.batch_size, n)
        config = BanditConfig(n_models=m, n_examples=n, budget=m * batch + bandit_budget, batch_size=batch,
                              refit_every=args.refit_every)
        V = embeddings(args, dataset, train, out) if set(methods) - {"ucbe"} else None
        print(f"== {name}: {m} candidates x {n} examples, {config.init_cells:,} init + {bandit_budget:,} bandit "
              f"cells, {args.reps} reps", file=sys.stderr)
        results = {}
        for method in methods:
            path = out / f"{name}__{method}.npz"
            if path.is_file():
                results[method] = load_result(path, method, config, args.seed)
                print(f"  {method}: resumed from {path.name}", file=sys.stderr)
                continue
            res = simulate(cand.scores, config, method, V=V if method != "ucbe" else None, reps=args.reps,
                           seed=args.seed, chunk_size=args.chunk_size, progress=True, model_names=cand.models)
            save_result(path, res)
            results[method] = res
        all_results[name] = results
        infos[name] = {**info, "candidates": list(cand.models), "true_means": cand.scores.mean(1).tolist(),
                       "true_best": cand.models[int(cand.scores.mean(1).argmax())]}
        panels[name] = {}
        for method, res in results.items():
            found = {t: metrics.budget_to_target(res, t, n_boot=500, seed=args.seed) for t in (0.8, 0.9, 0.95)}
            panels[name][method] = found[0.95]
            base = results.get("ucbe")
            base95 = metrics.budget_to_target(base, 0.95, n_boot=10)["budget"] if base else np.nan
            paper95 = metrics.paper_budget_to_target(res, 0.95, n_boot=500, seed=args.seed)
            both_ways = {k: metrics.paired_savings(res, base, 0.95, n_boot=500, seed=args.seed, metric=k)
                         for k in ("strict", "paper")} if base is not None and method != "ucbe" else {}
            rows.append({"setting": name, "dataset": dataset, "delta_top2": delta,
                         "realized_gap": info.get("realized_top2_gap"), "candidates": m, "examples": n,
                         "init_cells": config.init_cells, "bandit_budget": bandit_budget, "method": method,
                         "reps": res.reps, "final_accuracy": float(res.correct()[:, -1].mean()),
                         "budget_to_80": found[0.8]["budget"], "budget_to_90": found[0.9]["budget"],
                         "budget_to_95": found[0.95]["budget"], "budget_to_95_low": found[0.95]["low"],
                         "budget_to_95_high": found[0.95]["high"],
                         "savings_vs_ucbe_at_95": metrics.savings(found[0.95]["budget"], base95)
                         if method != "ucbe" else 0.0,
                         "paper_bandit_cells_to_95": paper95["bandit_cells"],
                         **{f"{k}_savings_{part}": v[key] for k, v in both_ways.items()
                            for part, key in (("pct", "savings_pct"), ("low", "low"), ("high", "high"))},
                         "seconds": res.seconds, "split": info.get("split")})
        for suffix in ("png", "pdf"):
            plotting.accuracy_vs_budget(list(results.values()), out / f"accuracy_{name}.{suffix}",
                                        title=f"{LABEL.get(dataset, dataset)}"
                                              + (f", Delta_top2 = {delta}" if delta is not None else "")
                                              + f": {m} candidates, {args.reps} repetitions")
        if "ucbe" in results and len(results) > 1:
            for suffix in ("png", "pdf"):
                plotting.effective_budget_plot(list(results.values()), out / f"effective_budget_{name}.{suffix}")
    if panels:
        for suffix in ("png", "pdf"):
            plotting.budget_to_target_bars(panels, out / f"budget_to_95.{suffix}")
    write_tables(out, rows, args, skipped, infos)
    print((out / "table.md").read_text())
    return 0


def _paired(row, metric: str) -> str:
    """``+25% [5, 42]``: the savings of a row in one metric with its paired bootstrap interval."""
    point = row.get(f"{metric}_savings_pct")
    if point is None or not np.isfinite(point):
        return ""
    low, high = row[f"{metric}_savings_low"], row[f"{metric}_savings_high"]
    return f"{point:+.0f}% [{low:.0f}, {high:.0f}]"


def write_tables(out: Path, rows, args, skipped, infos):
    with open(out / "results.csv", "w", newline="") as handle:
        if rows:
            writer = csv.DictWriter(handle, fieldnames=list(dict.fromkeys(k for row in rows for k in row)))
            writer.writeheader()
            writer.writerows(rows)
    (out / "summary.json").write_text(json.dumps(clean_json({"args": vars(args), "rows": rows, "skipped": skipped,
                                                             "settings": infos}),
                                                 indent=2))

    def cell(row, key):
        b = row[key]
        return "not reached" if b is None or not np.isfinite(b) else f"{int(b):,}"

    lines = [f"Budget (cells, initialization included) to reach 95% / 90% Accuracy@t; {args.reps} repetitions, "
             f"B = {args.batch_size}, refit every {args.refit_every} steps, rank {args.rank}.", "",
             "\"Paper's count\": bandit cells only, first crossing, mean over bootstrap resamples (the paper's "
             "metric); savings with paired 95% bootstrap intervals.", "",
             "| setting | top-2 gap | candidates | bandit budget | method | to 95% | savings vs UCB-E [paired CI] | "
             "paper's count | paper's savings [paired CI] | to 90% | final acc. |",
             "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        saving = row["savings_vs_ucbe_at_95"]
        saving = "" if row["method"] == "ucbe" else ("n/a" if not np.isfinite(saving) else f"{saving:+.0f}%")
        gap = row["realized_gap"]
        if gap is None:
            true = np.sort(infos[row["setting"]].get("true_means", [np.nan, np.nan]))[::-1]
            gap = true[0] - true[1] if len(true) > 1 else np.nan
        strict, paper = _paired(row, "strict"), _paired(row, "paper")
        lines.append(f"| {row['setting']} | {gap:.4f} | {row['candidates']} | {row['bandit_budget']:,} | "
                     f"{plotting.LABELS[row['method']]} | {cell(row, 'budget_to_95')} | {strict or saving} | "
                     f"{cell(row, 'paper_bandit_cells_to_95')} | {paper} | "
                     f"{cell(row, 'budget_to_90')} | {row['final_accuracy']:.3f} |")
    if skipped:
        lines += ["", "Notes: " + "; ".join(skipped)]
    (out / "table.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
