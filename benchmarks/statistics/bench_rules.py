"""Sampling rules x estimators, paired: fixed budget and fixed confidence, on three data sets.

Rules: the paper's UCB-E index, LUCB, Top-Two (beta = 1/2) with the Gaussian transportation-cost
challenger (EB-TC) and with the interval challenger (``top_two_interval``), and successive halving;
estimators: UCB-E and PULSE. Every configuration of one data set and regime runs on the same
repetition keys, so the comparisons are paired.

* fixed budget: accuracy at the budget (+- SE) and the budget to reach 90% / 95% accuracy
  (bootstrap interval over repetitions; initialization included);
* fixed confidence (``stop="certified"``, the whole matrix as budget): median cells to certify
  the best model (bootstrap interval), the fraction certified and the fraction certified wrongly.

Data: the built-in benchmark (40 x 1,000), and CRUXEval-O (48 x 800) and ChemBench (22 x 2,854)
from ``../shared/data`` split at random into train and candidate halves (skipped when absent).
Rows already in ``--out`` are kept, so an interrupted run resumes::

    python benchmarks/statistics/bench_rules.py --reps 200 --out docs/benchmarks/rules.json

``--methods ucbe,pulse_certify --bounds certification --sequence betting`` runs the same grid with
``select``'s estimator, certification bounds and the betting sequences::

    python benchmarks/statistics/bench_rules.py --reps 100 --rules ucbe,lucb,top_two_interval,successive_halving \
        --methods ucbe,pulse_certify --bounds certification --sequence betting \
        --out docs/benchmarks/rules_certify_betting.json
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from pulse_jax.stats.confidence import BETTING_GRID

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402

RULES = ("ucbe", "lucb", "top_two", "top_two_interval", "successive_halving")
METHODS = ("ucbe", "pulse")


def settings(regime: str, scores, batch: int) -> dict:
    m, n = scores.shape
    if regime == "fixed_budget":   # a quarter of the cells (the CLI's default), initialization included
        return dict(budget=max(m * batch, m * n // 4), stop="budget")
    return dict(budget=m * n, stop="certified")


def one_row(name, scores, V, regime, rule, method, args) -> dict:
    import pulse_jax as pj
    from pulse_jax.analysis import metrics

    m, n = scores.shape
    s = settings(regime, scores, args.batch_size)
    plugin = pj.top_two(challenger="interval") if rule == "top_two_interval" else rule
    config = pj.BanditConfig(n_models=m, n_examples=n, budget=s["budget"], batch_size=args.batch_size,
                             refit_every=args.refit_every, cs_grid=BETTING_GRID if args.sequence == "betting" else 0)
    res = pj.simulate(scores, config, pj.Plugins(method, plugin, s["stop"]), V=V, reps=args.reps, seed=args.seed,
                      params=pj.BanditParams(delta=args.delta, cs_simultaneous=1.0 if args.bounds == "all" else 0.0))
    row = {"data": name, "regime": regime, "rule": rule, "method": method, "reps": args.reps,
           "budget": s["budget"], "models": m, "examples": n, "seconds": round(res.seconds, 1)}
    if regime == "fixed_budget":
        acc, se = res.accuracy_at_budget([s["budget"]])
        row.update(accuracy=float(acc[0]), accuracy_se=float(se[0]))
        for target in (0.9, 0.95):
            found = metrics.budget_to_target(res, target, n_boot=500)
            row[f"budget_to_{round(target * 100)}"] = {k: _plain(found.get(k)) for k in ("budget", "low", "high")}
    else:
        cert = metrics.cells_to_certify(res, n_boot=500)
        row.update({k: _plain(cert[k]) for k in ("median", "low", "high", "certified_fraction", "error_rate")})
    return row


def _plain(x):
    if x is None:
        return None
    x = float(x)
    return x if np.isfinite(x) else None


def _cells(x) -> str:
    return "> budget" if x is None else f"{x:,.0f}"


def table(rows) -> str:
    lines = ["| data | regime | rule | method | accuracy at budget | budget to 90% | budget to 95% | "
             "median cells to certify [95% CI] | certified / wrong |", "|" + "---|" * 9]
    for r in rows:
        if r["regime"] == "fixed_budget":
            b90, b95 = r["budget_to_90"], r["budget_to_95"]
            lines.append(f"| {r['data']} | budget {r['budget']:,} | {r['rule']} | {r['method']} | "
                         f"{r['accuracy']:.3f} +- {r['accuracy_se']:.3f} | {_cells(b90['budget'])} | "
                         f"{_cells(b95['budget'])} | | |")
        else:
            lines.append(f"| {r['data']} | certify (budget {r['budget']:,}) | {r['rule']} | {r['method']} | | | | "
                         f"{_cells(r['median'])} [{_cells(r['low'])}, {_cells(r['high'])}] | "
                         f"{r['certified_fraction']:.0%} / {r['error_rate']:.3f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = common.parser(__doc__, reps=200, batch_size=16, refit_every=25, rank=8, delta=0.05, seed=0, data="builtin,cruxeval_o,chembench", out="results/rules.json")
    p.add_argument("--regimes", default="fixed_budget,fixed_confidence")
    p.add_argument("--rules", default=",".join(RULES))
    p.add_argument("--methods", default=",".join(METHODS), help="estimators (names), e.g. ucbe,pulse,pulse_certify")
    p.add_argument("--bounds", default="all", choices=("all", "certification"),
                   help="BanditParams.cs_simultaneous 1 (all) or 0 (certification)")
    p.add_argument("--sequence", default="bernstein", choices=("bernstein", "betting"),
                   help="the confidence sequences: empirical Bernstein or betting (BanditConfig.cs_grid = 1000)")
    args = p.parse_args(argv)

    out = Path(args.out)
    done = json.loads(out.read_text())["rows"] if out.is_file() else []
    key = lambda r: (r["data"], r["regime"], r["rule"], r["method"], r["reps"])   # noqa: E731
    have = {key(r) for r in done}
    rows = list(done)
    wanted = args.data.split(",")
    for name, (scores, V) in common.datasets(args.rank).items():
        if name not in wanted:
            continue
        for regime in args.regimes.split(","):
            for rule in args.rules.split(","):
                for method in args.methods.split(","):
                    if (name, regime, rule, method, args.reps) in have:
                        continue
                    start = time.perf_counter()
                    rows.append(one_row(name, scores, V, regime, rule, method, args))
                    print(f"{name} {regime} {rule} {method}: {time.perf_counter() - start:.0f} s", file=sys.stderr)
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))
    text = table(rows)
    print(text)
    command = " ".join(["python benchmarks/statistics/bench_rules.py"] + sys.argv[1:] if argv is None else argv)
    out.with_suffix(".md").write_text(
        f"Sampling rules x estimators, paired repetitions; {args.bounds} bounds, {args.sequence} sequences; "
        f"command: `{command}`\n\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
