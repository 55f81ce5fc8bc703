"""Fixed-confidence runs: cells to certify the best model, and what the computation costs.

For each setting and method, three runs on the same repetition keys, in one process:

* ``stop=certified, blocks``: the certified stop as the library runs it (steps in blocks inside a
  ``while_loop`` that ends once every repetition of a batch has stopped);
* ``stop=certified, full scan``: the same stopping rule declared with ``stops_early=False``, so
  the scan runs every step of the budget and certified repetitions idle (the same results);
* ``fixed budget at p90``: a fixed-budget run whose budget is the 90th percentile of the cells
  the certified runs needed (the cost a fixed-confidence study should approach).

It prints the median cells to certify (bootstrap interval), the fraction certified and wrongly
certified, and the three wall times (compilation excluded; it is reported apart). Settings: the
built-in live example (40 x 1,000, the whole matrix as budget, batch 64) and, with ``--factors``,
the paper's scale (1,000 candidates from a factor file, LUCB, the paper's budget)::

    python benchmarks/statistics/bench_certify.py --reps 200 --out docs/benchmarks/certify.json
    python benchmarks/statistics/bench_certify.py --setting paper --factors ../shared/data/openllm_v2_mmlu_pro_factors.npz \\
        --reps 100 --methods ucbe --out docs/benchmarks/certify_paper.json
"""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402


def setting(args):
    """``(scores, V, config kwargs, label)`` of the chosen setting."""
    import pulse_jax as pj

    if args.setting == "live":
        bench = pj.make_benchmark(seed=0)
        m, n = bench.scores.shape
        V = np.asarray(pj.fit_example_embeddings(bench.train, rank=args.rank))
        return bench.scores, V, dict(budget=m * n, batch_size=64, refit_every=args.refit_every), \
            f"built-in live example ({m} x {n}, whole matrix as budget)"
    from pulse_jax.fileio.data import load_factors, paper_scale_problem

    _, cand, _ = paper_scale_problem(args.factors, seed=0, n_candidates=args.models)
    m, n = cand.scores.shape
    V = load_factors(args.factors)[1][:, :args.rank]     # the shape of a stage-0 fit; cost does not depend on it
    return cand.scores, V, dict(budget=m * 64 + 400_000, batch_size=64, refit_every=1000), \
        f"paper scale ({m} x {n}, LUCB, budget {m * 64 + 400_000:,})"


def main(argv=None) -> int:
    p = common.parser(__doc__, models=1000, reps=200, methods="ucbe,pulse", refit_every=10, rank=16, delta=0.05, out="results/certify.json")
    p.add_argument("--setting", choices=("live", "paper"), default="live")
    p.add_argument("--factors", default=None, help="factor file for --setting paper")
    p.add_argument("--rule", default="lucb")
    args = p.parse_args(argv)
    if args.setting == "paper" and not args.factors:
        p.error("--setting paper needs --factors FILE")

    import pulse_jax as pj
    from pulse_jax.analysis import metrics

    scores, V, kw, label = setting(args)
    m, n = scores.shape
    params = pj.BanditParams(delta=args.delta)
    full_scan = pj.when_certified()._replace(stops_early=False)   # the same rule, computing every step
    rows = []
    print(label, file=sys.stderr)
    for method in args.methods.split(","):
        config = pj.BanditConfig(n_models=m, n_examples=n, **kw)
        run = dict(V=V, reps=args.reps, seed=0, params=params, progress=True)
        blocked = pj.simulate(scores, config, pj.Plugins(method, args.rule, "certified"), **run)
        scanned = pj.simulate(scores, config, pj.Plugins(method, args.rule, full_scan), **run)
        same = bool(np.array_equal(blocked.certified_spent, scanned.certified_spent)
                    and np.array_equal(blocked.certified_model, scanned.certified_model)
                    and np.array_equal(blocked.chosen, scanned.chosen))
        cert = metrics.cells_to_certify(blocked)
        cells = np.where(blocked.certified_spent >= 0, blocked.certified_spent, config.budget)
        p90 = int(max(np.percentile(cells, 90), config.init_cells + config.batch_size))
        fixed = pj.simulate(scores, dataclasses.replace(config, budget=min(p90, config.budget)),
                            pj.Plugins(method, args.rule), **run)
        row = {"setting": label, "method": method, "rule": args.rule, "reps": args.reps, "budget": config.budget,
               **{k: cert[k] for k in ("median", "low", "high", "certified_fraction", "error_rate")},
               "p90_cells": p90, "same_results": same,
               "seconds_blocks": blocked.seconds - blocked.compile_seconds,
               "seconds_full_scan": scanned.seconds - scanned.compile_seconds,
               "seconds_fixed_budget_p90": fixed.seconds - fixed.compile_seconds,
               "compile_seconds": [blocked.compile_seconds, scanned.compile_seconds, fixed.compile_seconds]}
        rows.append(row)
        print(f"{method:>5} rule={args.rule}: median {cert['median']:,.0f} cells [{cert['low']:,.0f}, "
              f"{cert['high']:,.0f}], certified {cert['certified_fraction']:.0%}, wrong {cert['error_rate']:.3f}; "
              f"wall {row['seconds_blocks']:.1f} s in blocks, {row['seconds_full_scan']:.1f} s full scan, "
              f"{row['seconds_fixed_budget_p90']:.1f} s fixed budget {p90:,} (p90); same results: {same}",
              file=sys.stderr)
    lines = ["| setting | method | median cells to certify [95% CI] | certified / wrong | wall: blocks | "
             "wall: full scan | wall: fixed budget at p90 | blocks / p90 | same results |", "|" + "---|" * 9]
    for r in rows:
        lines.append(f"| {r['setting']} | {r['method']} | {r['median']:,.0f} [{r['low']:,.0f}, {r['high']:,.0f}] | "
                     f"{r['certified_fraction']:.0%} / {r['error_rate']:.3f} | {r['seconds_blocks']:.1f} s | "
                     f"{r['seconds_full_scan']:.1f} s | {r['seconds_fixed_budget_p90']:.1f} s ({r['p90_cells']:,}) | "
                     f"{r['seconds_blocks'] / max(r['seconds_fixed_budget_p90'], 1e-9):.2f}x | {r['same_results']} |")
    print("\n".join(lines))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))
    out.with_suffix(".md").write_text(f"`python benchmarks/statistics/bench_certify.py {' '.join(argv or sys.argv[1:])}`\n\n"
                                      + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
