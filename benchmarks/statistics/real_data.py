"""Real leaderboards: cells to certify the exact best, an epsilon-good model and the top 3, and the
paper's fixed-budget protocol, on every real matrix in ``../shared/data``.

Data: CRUXEval-O and ChemBench (candidate halves; embeddings fitted on the train halves, as in
``bench_rules.py``) and draws from both paper-scale factor files (``factor:<file>:<m>x<n>``: m
candidates and n random examples; embeddings from 400 train models on the same examples). For each
data set and method (UCB-E and ``select``'s ``pulse_hedged``) with ``select``'s configuration (Top-Two
with the interval challenger, certification bounds, betting sequences, delta 0.05, the whole matrix
allowed, and the levels ``select`` gives each claim: ``--levels select``, the default, puts 95% of delta
on the upper bounds of a best-model claim and tunes each model's bets to its running gap; ``--levels
even`` splits delta evenly with anytime bets) it runs, on the same seeds:

* ``epsilon`` in {0, 0.005, 0.01, 0.02} with the ``epsilon_good`` stopping rule, one compiled sweep
  (epsilon 0 is exact-best certification);
* ``top_k(3)`` (the upper bounds raised to ``cs_simultaneous = log 3 / log m``), sampled by
  ``lucb_top_k(3)`` as ``select --top-k 3`` does;
* the fixed-budget protocol: a quarter of the cells, accuracy at that budget (up to 200 candidates;
  the paper-scale fixed-budget figures are ``reproduce_paper.py``'s).

Each epsilon row also carries the *oracle saving*: the saving of epsilon over exact certification
that an allocation knowing the true means would get, from the sample-complexity lower bound
(Garivier & Kaufmann 2016) with the best model known: every other model j needs about
``log(2 m / delta) / kl(mu_j, mu* + epsilon)`` cells (at most n) and the best model n. It estimates
the saving the leaderboard's spread of means allows (the leading term only: the sequences' constants
are left out, so a run can save somewhat more or less).

The *information floor* of each matrix (`pulse_jax.stats.information_floor`: Garivier & Kaufmann's
bound with the finite population's variance ratio, every model's first batch at least) is the
cells no delta-correct method can do without on average; the README's table divides the exact-best
cells by it.

It reports mean cells with the paired saving of each epsilon against exact certification, and of
``pulse_hedged`` against UCB-E, each with a paired bootstrap 95% interval, and the wrong claims.

    python benchmarks/statistics/real_data.py --reps 200 --out docs/benchmarks/real_data.json

Resumable: rows already in ``--out`` are kept (those of the other ``--levels`` too; the tables show
one). Prints a table and writes JSON (and ``.md``).
"""
from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from batch_effect import each_dataset, paired  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402

DEFAULT_DATA = ("cruxeval_o,chembench,factor:openllm_v2_mmlu_pro_factors.npz:200x1300@0.007,"
                "factor:openllm_v2_bbh_gpqa_ifeval_math_musr_factors.npz:200x1300@0.007,"
                "factor:openllm_v2_mmlu_pro_factors.npz:1000x1300,"
                "factor:openllm_v2_bbh_gpqa_ifeval_math_musr_factors.npz:1000x1300")
FIXED_BUDGET_MAX_MODELS = 200   # beyond, the protocol's refits over a quarter of the matrix take hours on 2 cores
EPSILONS = (0.0, 0.005, 0.01, 0.02)
BASE = {"delta": 0.05, "cs_simultaneous": 0.0}   # select's: certification bounds


def _config(m, n, batch, gap_horizon=0.0):
    import pulse_jax as pj
    from pulse_jax.stats.confidence import BETTING_GRID

    return pj.BanditConfig(n_models=m, n_examples=n, budget=m * n, batch_size=batch, refit_every=1000,
                           cs_grid=BETTING_GRID, gap_horizon=gap_horizon)


def claim_levels(stop, levels: str):
    """``(gap_horizon, numbers)`` of a run certifying ``stop``'s claim: ``"select"``, the levels ``select``
    gives that claim (`pulse_jax.choices.claim_gap_horizon` and `pulse_jax.choices.claim_split`: a best-model
    claim gets 95% of delta on the upper bounds and bets tuned to each model's running gap; a top-k set the
    even split and anytime bets); ``"even"``, delta split evenly and anytime bets for every claim."""
    from pulse_jax import choices

    if levels == "even":
        return 0.0, dict(BASE)
    return choices.claim_gap_horizon(stop, BASE, None), choices.claim_split(dict(BASE), stop, given=())


def epsilon_rows(name, scores, V, method, args) -> list[dict]:
    """Exact-best and epsilon-good certification: one compiled sweep over ``stop.epsilon``."""
    import pulse_jax as pj

    m, n = scores.shape
    t = time.time()
    plugins = pj.Plugins(method, pj.top_two(challenger="interval"), "epsilon_good")
    gap_horizon, numbers = claim_levels(plugins.stop, args.levels)
    swept = pj.sweep(scores, _config(m, n, args.batch_size, gap_horizon), plugins, {"stop.epsilon": list(EPSILONS)},
                     reps=args.reps, seed=args.seed, V=V if method != "ucbe" else None, base=numbers, progress=False,
                     chunk_size=args.chunk)
    oracle = oracle_cells(scores, EPSILONS, BASE["delta"])
    rows = []
    for eps, res in zip(EPSILONS, swept.results):
        c = res.claims()
        rows.append({"target": f"epsilon {eps:g}" if eps else "exact best", "epsilon": eps,
                     "cells": res.spent[:, -1].tolist(), "stopped": c["stopped_fraction"], "wrong": c["error_rate"],
                     "oracle_cells": oracle[eps], "B": args.batch_size, "levels": args.levels,
                     "cs_upper_share": numbers.get("cs_upper_share", 0.5), "gap_horizon": gap_horizon})
    seconds = round(time.time() - t, 1)
    return [{"data": name, "shape": f"{m} x {n}", "method": method, "seconds": seconds, **r} for r in rows]


def _kl_bernoulli(p, q):
    p, q = np.clip(p, 1e-12, 1 - 1e-12), np.clip(q, 1e-12, 1 - 1e-12)
    return p * np.log(p / q) + (1 - p) * np.log((1 - p) / (1 - q))


def oracle_cells(scores, epsilons, delta) -> dict:
    """Cells an allocation that knows the means needs, per epsilon: ``n`` for the best model and
    ``min(n, log(2 m / delta) / kl(mu_j, mu* + epsilon))`` for every other model j (the lower bound's
    leading term with the best model pinned). Only ratios of these are reported."""
    m, n = scores.shape
    means = np.sort(scores.mean(1))[::-1]
    return {eps: float(n + np.minimum(n, math.log(2 * m / delta)
                                      / _kl_bernoulli(means[1:], min(means[0] + eps, 1.0))).sum())
            for eps in epsilons}


def top3_row(name, scores, V, method, args) -> dict:
    """Top-3 certification, the upper bounds raised to ``cs_simultaneous = log 3 / log m``."""
    import pulse_jax as pj

    m, n = scores.shape
    t = time.time()
    plugins = pj.Plugins(method, pj.lucb_top_k(3), pj.top_k(3))
    gap_horizon, numbers = claim_levels(plugins.stop, args.levels)    # a set's claim: the even split, anytime bets
    top3 = pj.simulate(scores, _config(m, n, args.batch_size, gap_horizon), plugins, V=V if method != "ucbe" else None,
                       reps=args.reps, seed=args.seed, params={**numbers, "cs_simultaneous": math.log(3) / math.log(m)},
                       progress=False, chunk_size=args.chunk)
    c = top3.claims()
    return {"data": name, "shape": f"{m} x {n}", "method": method, "seconds": round(time.time() - t, 1),
            "target": "top 3", "cells": top3.spent[:, -1].tolist(), "stopped": c["stopped_fraction"],
            "wrong": c["error_rate"], "B": args.batch_size}


def fixed_budget_row(name, scores, V, method, args) -> dict:
    import pulse_jax as pj

    m, n = scores.shape
    config = pj.BanditConfig(n_models=m, n_examples=n, budget=max(m * args.batch_size, m * n // 4),
                             batch_size=args.batch_size, refit_every=1000)
    res = pj.simulate(scores, config, method, V=V if method != "ucbe" else None, reps=args.reps, seed=args.seed,
                      progress=False)
    acc, se = res.accuracy_at_budget([config.budget])
    return {"data": name, "shape": f"{m} x {n}", "method": method, "target": "fixed budget (25%)",
            "budget": config.budget, "accuracy": float(acc[0]), "accuracy_se": float(se[0]),
            "hits": res.is_best(res.best[:, -1]).astype(float).tolist()}


def _in_order(rows) -> list[dict]:
    """Rows by data set (in first-run order), then exact best, the epsilons, the top 3 and the fixed budget."""
    data = list(dict.fromkeys(r["data"] for r in rows))
    rank = {"exact best": 0, "top 3": 2, "fixed budget (25%)": 3}
    return sorted(rows, key=lambda r: (data.index(r["data"]), rank.get(r["target"], 1), r.get("epsilon", 0)))


def table(rows) -> str:
    rows = _in_order(rows)
    lines = ["| data | m x n | top-2 gap | target | UCB-E cells | `pulse_hedged` cells | "
             "`pulse_hedged`: fewer cells than UCB-E [95% CI] | UCB-E: fewer cells than exact [95% CI] | "
             "`pulse_hedged`: fewer than exact [95% CI] | oracle: fewer than exact | stopped / wrong |",
             "|" + "---|" * 11]
    for r in [r for r in rows if r["method"] == "ucbe"]:
        twin = next((x for x in rows if x["data"] == r["data"] and x["target"] == r["target"]
                     and x["method"] == "pulse_hedged"), None)
        if "accuracy" in r:
            acc = f"{r['accuracy']:.3f} +- {r['accuracy_se']:.3f}"
            other = f"{twin['accuracy']:.3f} +- {twin['accuracy_se']:.3f}" if twin else ""
            lines.append(f"| {r['data']} | {r['shape']} | {r.get('gap', 0):.3f} | {r['target']}, accuracy at "
                         f"{r['budget']:,} cells | {acc} | {other} | | | | | |")
            continue

        def vs_exact(row):
            exact = next((x for x in rows if x["data"] == row["data"] and x["method"] == row["method"]
                          and x["target"] == "exact best"), None)
            if exact is None or row is exact:      # the first is a data set run only for its top 3
                return ""
            s, lo, hi = paired(row["cells"], exact["cells"])
            return f"{s:.0f}% [{lo:.0f}, {hi:.0f}]"

        oracle = ""
        if "oracle_cells" in r and r["target"] != "exact best":
            exact_oracle = next(x for x in rows if x["data"] == r["data"] and x["target"] == "exact best")["oracle_cells"]
            oracle = f"{100 * (1 - r['oracle_cells'] / exact_oracle):.0f}%"
        pulse, twin_cells = "", f"{np.mean(twin['cells']):,.0f}" if twin else ""
        if twin:
            s, lo, hi = paired(twin["cells"], r["cells"])
            pulse = f"{s:.0f}% [{lo:.0f}, {hi:.0f}]"
        lines.append(f"| {r['data']} | {r['shape']} | {r.get('gap', 0):.3f} | {r['target']} | "
                     f"{np.mean(r['cells']):,.0f} | {twin_cells} | {pulse} | {vs_exact(r)} | "
                     f"{vs_exact(twin) if twin else ''} | {oracle} | {r['stopped']:.0%} / {r['wrong']:.3f}"
                     + (f", {twin['stopped']:.0%} / {twin['wrong']:.3f}" if twin else "") + " |")
    return "\n".join(lines)


LABELS = {"cruxeval_o": "CRUXEval-O", "chembench": "ChemBench"}


def _label(name: str) -> str:
    if name in LABELS:
        return LABELS[name]
    _, file, shape = name.split(":")
    board = "MMLU-Pro" if "mmlu" in file else "BBH/GPQA/IFEval/MATH/MuSR"
    return f"{board} leaderboard, {'near-tie ' if '@' in shape else ''}factor draw"


def readme_table(rows, floors: dict) -> str:
    """The README's table: exact best (with the information floor), epsilon 0.01 and top 3 with
    ``select``'s configuration."""
    def find(data, method, target):
        return next((r for r in rows if r["data"] == data and r["method"] == method and r["target"] == target), None)

    lines = ["| data (m x n, top-2 gap) | information floor | exact best: UCB-E | exact best: `select` | "
             "`select` / floor | `select` vs UCB-E: fewer cells | epsilon 0.01: `select` | fewer than exact | "
             "oracle estimate | top 3: `select` |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for data in dict.fromkeys(r["data"] for r in rows):
        u, s, e = find(data, "ucbe", "exact best"), find(data, "pulse_hedged", "exact best"), \
            find(data, "pulse_hedged", "epsilon 0.01")
        if not (u and s and e):
            continue
        t = find(data, "pulse_hedged", "top 3")
        vs, lo, hi = paired(s["cells"], u["cells"])
        ev, elo, ehi = paired(e["cells"], s["cells"])
        ceiling = f"{100 * (1 - e['oracle_cells'] / s['oracle_cells']):.0f}%" if "oracle_cells" in e else ""
        floor = floors.get(data)
        floor_text, ratio = (f"{floor:,.0f}", f"{np.mean(s['cells']) / floor:.2f}x") if floor else ("", "")
        lines.append(f"| {_label(data)} ({s['shape']}, {s['gap']:.3f}) | {floor_text} | "
                     f"{np.mean(u['cells']):,.0f} | {np.mean(s['cells']):,.0f} | {ratio} | "
                     f"{vs:.0f}% [{lo:.0f}, {hi:.0f}] | {np.mean(e['cells']):,.0f} | "
                     f"{ev:.0f}% [{elo:.0f}, {ehi:.0f}] | {ceiling} | "
                     + (f"{np.mean(t['cells']):,.0f}" if t else "") + " |")
    return "\n".join(lines)


def write_readme(path: Path, rows, floors: dict) -> None:
    """Replace the README's table between ``<!-- real-data -->`` and ``<!-- /real-data -->``."""
    text = path.read_text()
    head, rest = text.split("<!-- real-data -->\n", 1)
    _, tail = rest.split("<!-- /real-data -->", 1)
    path.write_text(head + "<!-- real-data -->\n" + readme_table(rows, floors) + "\n<!-- /real-data -->" + tail)


def _at_levels(rows, levels: str) -> list[dict]:
    """The rows a table at ``levels`` shows: the certificates of the best model (exact and epsilon) run at
    those levels (a row without ``levels`` was run with the even split), the top 3 and the fixed budget,
    which ``select`` runs the same way at either."""
    return [r for r in rows if r["target"] in ("top 3", "fixed budget (25%)") or r.get("levels", "even") == levels]


def main(argv=None) -> int:
    p = common.parser(__doc__, reps=200, seed=0, rank=8, data=DEFAULT_DATA, methods="ucbe,pulse_hedged", out="docs/benchmarks/real_data.json")
    p.add_argument("--batch-size", type=int, default=8, help="B (select's default, 8)")
    p.add_argument("--levels", choices=("select", "even"), default="select",
                   help="the bounds' levels: select's for each claim (a best-model claim: 95%% of delta on the "
                   "upper bounds, bets tuned to the running gap), or delta split evenly with anytime bets for every "
                   "claim (--gap-horizon 0 --param cs_upper_share=0.5)")
    p.add_argument("--chunk", type=int, default=None, help="repetitions per compiled call (memory: a 1,000-candidate "
                   "PULSE sweep of 800 runs needs more than 13 GB in one call)")
    p.add_argument("--floors-only", action="store_true", help="compute only the information floors of the data sets "
                   "(every row already in --out is kept; none is run) and rewrite the tables")
    p.add_argument("--readme", action="append", default=[], help="also rewrite the real-data table of this Markdown "
                   "file (between <!-- real-data --> and <!-- /real-data -->; repeatable)")
    args = p.parse_args(argv)
    out = Path(args.out)
    saved = json.loads(out.read_text()) if out.is_file() else {}
    if args.floors_only:
        args.data = ",".join(dict.fromkeys(r["data"] for r in saved.get("rows", [])))
    rows, floors = saved.get("rows", []), saved.get("floors", {})
    done = {(r["data"], r["method"], r["target"]) for r in _at_levels(rows, args.levels)}
    for name, scores, V in each_dataset(args.data.split(","), args.rank):
        means = np.sort(scores.mean(1))[::-1]
        if name not in floors:
            floors[name] = common.floor_cells(scores, BASE["delta"], args.batch_size)
        if args.floors_only:
            out.write_text(json.dumps({**saved, "rows": rows, "floors": floors}, indent=1))
            continue
        for method in args.methods.split(","):
            new = []
            if (name, method, "exact best") not in done:
                new += epsilon_rows(name, scores, V, method, args)
            if (name, method, "top 3") not in done:
                new.append(top3_row(name, scores, V, method, args))
            if (name, method, "fixed budget (25%)") not in done and scores.shape[0] <= FIXED_BUDGET_MAX_MODELS:
                new.append(fixed_budget_row(name, scores, V, method, args))
            for r in new:
                r["gap"] = float(means[0] - means[1])
                print(f"{name} {method} {r['target']}: "
                      + (f"{np.mean(r['cells']):,.0f} cells" if "cells" in r else f"accuracy {r['accuracy']:.3f}"),
                      flush=True)
            rows += new
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps({"command": "python benchmarks/statistics/real_data.py "
                                       + " ".join(argv if argv is not None else sys.argv[1:]), "rows": rows,
                                       "floors": floors}, indent=1))
    text = table(_at_levels(rows, args.levels))
    print(text)
    out.with_suffix(".md").write_text(text + "\n")
    for page in args.readme:
        write_readme(Path(page), _at_levels(rows, args.levels), floors)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
