"""PULSE configurations at the paper's scale, fixed budget, paired against UCB-E in both counts.

On the paper-scale factor data (``../shared/data``; 1,000 candidates, B = 64, 400,000 bandit cells,
the paper's rule and refit period), per data set: UCB-E; PULSE with the paper's lambda, with
lambda fixed at 1/2, with ``--configs ...,train_prior`` with refits under the train models' Gaussian
(``pj.row_prior_from_rows``; MAP rows), with ``--configs ...,adaptive`` ``pulse_adaptive`` (adaptive
example sampling) and, with ``--refit-priors``, with refits under a population prior
(``BanditParams.refit_prior``; one compiled sweep); with ``--configs ...,weights``, PULSE with
inverse-variance weights of its one-step estimates (``pulse(weighting="inverse_variance")``); and PULSE with
*oracle embeddings* -- the factor file's own ``V``, from which every score was drawn, so only the
candidates' ``U`` rows must be learned: a ceiling for what better example embeddings could give. The
other oracles (``--configs oracle_predictions,lambdas,oracle_allocation``): *oracle predictions* (the
true probabilities from the start: ``init_U`` = the candidates' own rows of the factor file, no refit
epochs), *oracle lambda* (fixed lambda 0.25 / 0.5 / 0.75 / 1, the best chosen after the fact) and *oracle
allocation* (each model's share of the cells fixed in advance from the true gaps, ``gap_allocation``,
for UCB-E and PULSE).
Every configuration runs on the same repetition keys.

Per configuration: the paper's count (bandit cells, first crossing of 95% accuracy, bootstrap mean;
``metrics.paper_budget_to_target``) and this project's strict count (initialization included,
accuracy must stay >= 95%; ``metrics.budget_to_target``), and the paired savings against UCB-E in
both (``metrics.paired_savings``, 95% bootstrap intervals).

    python benchmarks/paper/paper_scale_configs.py --reps 200 --out docs/benchmarks/paper_scale_configs.json
    python benchmarks/paper/paper_scale_configs.py --certify --reps 100 --out docs/benchmarks/paper_scale_certify.json
    python benchmarks/paper/paper_scale_configs.py --reps 100 --configs oracle_predictions,lambdas,oracle_allocation \
        --out docs/benchmarks/paper_scale_oracles.json

``--certify`` measures the fixed-confidence regime instead: UCB-E, PULSE and ``pulse_certify`` (or
``--certify-methods``) with Top-Two (interval challenger) and certification bounds, stopping once
certified within the same budget; ``--cs-grid 1000`` with betting confidence sequences::

    python benchmarks/paper/paper_scale_configs.py --certify --reps 100 --bandit-budget 2000000 --cs-grid 1000 \
        --certify-methods ucbe,pulse_hedged --out docs/benchmarks/paper_scale_certify_betting.json

Prints a table and writes ``--out`` (JSON) and the same path with ``.md``. Each finished data set is
kept in ``--out``, so an interrupted run resumes.
"""
from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import pulse_jax as pj
from pulse_jax.stats import factorization
from pulse_jax.fileio import data
from pulse_jax.analysis import metrics
from pulse_jax.rules import SamplingRule
from pulse_jax.stats.ties import PULL, random_argmax, tie_uniform

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "statistics"))
from decompose_savings import cells_to_top_two  # noqa: E402
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402

SHARED = common.SHARED
FILES = {"mmlu_pro": "openllm_v2_mmlu_pro_factors.npz", "bbh_composite": "openllm_v2_bbh_gpqa_ifeval_math_musr_factors.npz"}


def problem(name, args, **config_options):
    """``(candidates, info, config, V, factor file, train prior)`` of one data set: the paper's difficulty
    subset, its bandit configuration (``config_options`` added), the stage-0 embeddings fitted on the train
    half, and the Gaussian of the train models' stage-0 rows (``pj.row_prior_from_rows``)."""
    path = Path(args.data_dir) / FILES[name]
    train, cand, info = data.paper_scale_problem(path, seed=args.seed, n_candidates=args.candidates,
                                                 delta_top2=args.delta)
    m, n = cand.shape
    config = pj.BanditConfig(n_models=m, n_examples=n, budget=m * args.batch_size + args.bandit_budget,
                             batch_size=args.batch_size, refit_every=args.refit_every, **config_options)
    U_train, V = pj.fit_train_factors(train.scores, rank=min(args.rank, *train.shape),
                                      settings=factorization.adam_settings(args.stage0_epochs, 0.05, 0.01),
                                      seed=args.seed)
    return cand, info, config, np.asarray(V), path, pj.row_prior_from_rows(U_train)


def gap_allocation(true_means) -> SamplingRule:
    """An oracle allocation (a benchmark-local plug-in): each model's share of the cells is fixed in advance
    at ``w_i \\propto 1 / Delta_i^2`` from the *true* means (``Delta_i`` the gap to the best, the best's
    own the top-two gap: the allocation behind UCB-E's complexity ``H``), and every step pulls the
    active model furthest below its share. The recommendation still comes from the estimator.
    """
    means = np.asarray(true_means, np.float64)
    top = np.sort(means)[-2:]
    gaps = np.maximum(top[1] - means, top[1] - top[0])
    share = jnp.asarray((1 / gaps ** 2) / np.sum(1 / gaps ** 2), jnp.float32)

    def choose(state, inputs, params):
        behind = share * jnp.sum(inputs.n_obs).astype(jnp.float32) - inputs.n_obs.astype(jnp.float32)
        u = tie_uniform(inputs.tie_key, inputs.t, PULL)
        return random_argmax(u, jnp.where(inputs.active, behind, -jnp.inf), inputs.model_order), state

    return SamplingRule("gap_allocation", choose)


def oracle_runs(cand, config, V, path, configs, args) -> dict:
    """Oracle rows: true predictions (the factor file's own U rows and V, never refit), fixed lambdas (the
    best is chosen after the fact), and the gap allocation from the true means for UCB-E and PULSE."""
    runs = {}
    U_true, V_true = data.load_factors(path)
    if "oracle_predictions" in configs:
        rows = [int(name.split("-")[1]) for name in cand.models]     # "model-<row of U>"
        fixed = dataclasses.replace(config, init_refit_epochs=0, refit_epochs=0)
        for lam, label in ((math.nan, "paper's lambda"), (1.0, "lambda = 1")):
            runs[f"PULSE, oracle predictions, {label}"] = pj.simulate(
                cand.scores, fixed, "pulse", V=V_true, init_U=U_true[rows], reps=args.reps, seed=args.seed,
                params={"estimator.fixed_lambda": lam}, progress=False)
    if "lambdas" in configs:
        lams = [0.25, 0.5, 0.75, 1.0]
        swept = pj.sweep(cand.scores, config, "pulse", [{"fixed_lambda": lam} for lam in lams], reps=args.reps,
                         seed=args.seed, V=V, progress=False)
        runs.update({f"PULSE, lambda = {lam:g}": res for lam, res in zip(lams, swept.results)})
    if "oracle_allocation" in configs:
        alloc = gap_allocation(np.nanmean(cand.scores, axis=1))
        runs["UCB-E, oracle allocation"] = pj.simulate(cand.scores, config, pj.Plugins("ucbe", alloc), reps=args.reps,
                                                       seed=args.seed, progress=False)
        runs["PULSE, oracle allocation"] = pj.simulate(cand.scores, config, pj.Plugins("pulse", alloc), V=V, reps=args.reps,
                                                       seed=args.seed, progress=False)
    return runs


def rows_for(name, args) -> list[dict]:
    cand, info, config, V, path, prior = problem(name, args)
    V_true = data.load_factors(path)[1]
    runs = {"UCB-E": pj.simulate(cand.scores, config, "ucbe", reps=args.reps, seed=args.seed, progress=False)}
    configs = args.configs.split(",")
    priors = [float(k) for k in args.refit_priors.split(",") if k]
    points = [({"fixed_lambda": math.nan, "refit_prior": 0.0}, "PULSE (paper's lambda)")] + \
        ([({"fixed_lambda": 0.5, "refit_prior": 0.0}, "PULSE, lambda = 1/2")] if "half" in configs else []) + \
        [({"fixed_lambda": math.nan, "refit_prior": k}, f"PULSE, population prior {k:g}") for k in priors]
    swept = pj.sweep(cand.scores, config, "pulse", [p for p, _ in points], reps=args.reps, seed=args.seed, V=V,
                     progress=False)
    runs.update(zip([label for _, label in points], swept.results))
    if "weights" in configs:
        runs["PULSE, inverse-variance weights"] = pj.simulate(cand.scores, config, pj.pulse(weighting="inverse_variance"),
                                                              V=V, reps=args.reps, seed=args.seed, progress=False)
    if "train_prior" in configs:
        runs["PULSE, train prior (MAP rows)"] = pj.simulate(cand.scores, config, "pulse", V=V, row_prior=prior,
                                                            params=pj.BanditParams(refit_prior=1.0), reps=args.reps,
                                                            seed=args.seed, progress=False)
    if "adaptive" in configs:
        runs["pulse_adaptive (adaptive example sampling)"] = pj.simulate(cand.scores, config, "pulse_adaptive", V=V,
                                                                       reps=args.reps, seed=args.seed, progress=False)
    if "adaptive_uniform" in configs:   # the same estimator with uniform draws: what the draws alone give
        runs["pulse_adaptive(1.0) (uniform draws)"] = pj.simulate(cand.scores, config, pj.pulse_adaptive(1.0), V=V,
                                                                  reps=args.reps, seed=args.seed, progress=False)
    if "oracle" in configs:
        runs["PULSE, oracle embeddings"] = pj.simulate(cand.scores, config, "pulse", V=V_true, reps=args.reps,
                                                       seed=args.seed, progress=False)
    runs.update(oracle_runs(cand, config, V, path, configs, args))
    base = runs["UCB-E"]
    rows = []
    for label, res in runs.items():
        row = {"data": name, "realized_gap": info.get("realized_top2_gap"), "configuration": label,
               **cells_to_top_two(res),
               "paper_bandit_cells": metrics.paper_budget_to_target(res, 0.95, n_boot=500, seed=0)["bandit_cells"],
               "strict_cells": metrics.budget_to_target(res, 0.95, n_boot=200, seed=0)["budget"],
               "final_accuracy": float(res.correct()[:, -1].mean())}
        if res is not base:
            for metric in ("paper", "strict"):
                saved = metrics.paired_savings(res, base, 0.95, n_boot=500, seed=0, metric=metric)
                row[f"{metric}_saving"] = [saved["savings_pct"], saved["low"], saved["high"]]
        rows.append(row)
        print(row, flush=True)
    return rows


def certify_rows(name, args) -> list[dict]:
    """Fixed confidence: cells to certify with Top-Two (interval) and certification bounds, within the same
    budget, for UCB-E, PULSE and ``pulse_certify``."""
    cand, info, config, V, _, prior = problem(name, args, cs_grid=args.cs_grid)
    rows = []
    methods = [("UCB-E", "ucbe"), ("PULSE", "pulse"), ("pulse_certify", "pulse_certify"), ("pulse_hedged", "pulse_hedged"),
               ("pulse_hedged, train prior", "pulse_hedged_prior")]
    for label, method in (m for m in methods if m[1] in args.certify_methods.split(",")):
        with_prior = method.endswith("_prior")
        plugins = pj.Plugins(method.removesuffix("_prior"), "top_two_interval", "certified")
        res = pj.simulate(cand.scores, config, plugins, V=None if method == "ucbe" else V,
                          reps=args.reps, seed=args.seed, row_prior=prior if with_prior else None,
                          params=pj.BanditParams(cs_simultaneous=0.0, refit_prior=float(with_prior)), progress=False)
        cert = res.certification()
        rows.append({"data": name, "realized_gap": info.get("realized_top2_gap"), "configuration": label,
                     "certified_fraction": cert["certified_fraction"], "median_cells": cert["median_cells"],
                     "errors": cert["errors"], "budget": config.budget, **cells_to_top_two(res)})
        print(rows[-1], flush=True)
    return rows


def certify_table(rows) -> str:
    lines = ["| data (top-2 gap) | configuration | certified within the budget | median cells to certify | wrong "
             "| to the two best | to the other 998 |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['data']} ({r['realized_gap']:.4f}) | {r['configuration']} | {r['certified_fraction']:.0%} "
                     f"of {r['budget']:,} | {r['median_cells']:,.0f} | {r['errors']} | "
                     f"{r.get('median_top2_cells', float('nan')):,.0f} | {r.get('median_other_cells', float('nan')):,.0f} |")
    return "\n".join(lines)


def table(rows, init_cells: int) -> str:
    """The strict count's bandit cells are its cells less the ``init_cells`` of initialization."""
    lines = ["| data (top-2 gap) | configuration | paper's count (bandit cells) | saves [95% CI] | strict count "
             "(all cells) | saves [95% CI] | strict count's bandit cells | saves |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    fmt = lambda s: "" if s is None else f"{s[0]:.0f}% [{s[1]:.0f}, {s[2]:.0f}]"   # noqa: E731
    for r in rows:
        base = next(b for b in rows if b["data"] == r["data"] and b["configuration"] == "UCB-E")
        bandit, bandit_base = r["strict_cells"] - init_cells, base["strict_cells"] - init_cells
        saved = "" if r is base else f"{100 * (1 - bandit / bandit_base):.0f}%"
        lines.append(f"| {r['data']} ({r['realized_gap']:.4f}) | {r['configuration']} | {r['paper_bandit_cells']:,.0f}"
                     f" | {fmt(r.get('paper_saving'))} | {r['strict_cells']:,.0f} | {fmt(r.get('strict_saving'))} | "
                     f"{bandit:,.0f} | {saved} |")
    return "\n".join(lines)


def main() -> None:
    p = common.parser(__doc__, reps=200, batch_size=64, refit_every=1000, rank=100, seed=0, out=None)
    p.add_argument("--data-dir", default=str(SHARED))
    p.add_argument("--datasets", default="bbh_composite,mmlu_pro")
    p.add_argument("--delta", type=float, default=0.01, help="the top-2 gap of the paper's difficulty subset")
    p.add_argument("--candidates", type=int, default=1000)
    p.add_argument("--bandit-budget", type=int, default=400_000)
    p.add_argument("--stage0-epochs", type=int, default=300)
    p.add_argument("--refit-priors", default="",
                   help="comma-separated BanditParams.refit_prior values to add as PULSE rows (e.g. 1,10,100)")
    p.add_argument("--configs", default="half,oracle",
                   help="PULSE rows beside the paper's: half (lambda 1/2), oracle (the factor file's V), weights "
                        "(inverse-variance weights of the thetas), train_prior (refits under the Gaussian of the "
                        "train models' rows, pj.row_prior_from_rows), adaptive (pulse_adaptive: adaptive example "
                        "sampling), adaptive_uniform (pulse_adaptive(1.0): its estimator, uniform draws), "
                        "oracle_predictions (the true probabilities, "
                        "never refit), lambdas (fixed lambda 0.25 .. 1), oracle_allocation (shares fixed from the "
                        "true gaps, for UCB-E and PULSE)")
    p.add_argument("--certify", action="store_true",
                   help="fixed confidence instead: cells to certify (Top-Two, certification bounds)")
    p.add_argument("--certify-methods", default="ucbe,pulse,pulse_certify",
                   help="with --certify: of ucbe, pulse, pulse_certify, pulse_hedged, pulse_hedged_prior (with the "
                        "train prior)")
    p.add_argument("--cs-grid", type=int, default=0,
                   help="with --certify: BanditConfig.cs_grid (0: empirical-Bernstein sequences; 1000: betting)")
    args = p.parse_args()
    out = Path(args.out) if args.out else None
    done = json.loads(out.read_text()) if out and out.is_file() else {"rows": []}
    rows = done["rows"]
    start = time.time()
    for name in args.datasets.split(","):
        if any(r["data"] == name for r in rows):
            print(f"{name}: kept from {out}", file=sys.stderr)
            continue
        rows += (certify_rows if args.certify else rows_for)(name, args)
        if out:
            out.write_text(json.dumps({"args": vars(args), "backend": jax.default_backend(), "rows": rows},
                                      indent=2))
    text = certify_table(rows) if args.certify else table(rows, args.candidates * args.batch_size)
    print(text)
    print(f"{time.time() - start:.0f} s", file=sys.stderr)
    if out:
        command = " ".join(["python benchmarks/paper/paper_scale_configs.py"] + sys.argv[1:])
        out.with_suffix(".md").write_text(f"{args.reps} paired repetitions, {args.candidates} candidates, "
                                          + ("stop when certified, " if args.certify else "") +
                                          f"{args.bandit_budget:,} bandit cells, B = {args.batch_size}, refit every "
                                          f"{args.refit_every} steps (`{command}`)\n\n{text}\n")


if __name__ == "__main__":
    main()
