"""PULSE's confidence sequence against UCB-E's on the same draws (equal allocation).

Under the sampling rules the two methods pull different models, so comparing their interval
widths at a budget mixes the interval with the allocation. Here a huge exploration constant
makes both methods pull round-robin: with one seed they draw the same examples for every model
(common random numbers), and the final half-width of each model's sequence compares the
intervals alone. Per dataset: the top ``--top`` candidates by true mean, ``--cells`` bandit cells
per model (at most half of the examples, so that no model is known exactly), PULSE refitting
every ``--refit-every`` steps::

    python benchmarks/statistics/cs_width_equal_allocation.py --out docs/benchmarks/intervals/equal_allocation.json
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402

SHARED = common.SHARED


def main(argv=None) -> int:
    p = common.parser(__doc__, refit_every=20, reps=20, out="results/equal_allocation.json")
    p.add_argument("--data", default=str(SHARED))
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--cells", type=int, default=1024, help="bandit cells per model")
    args = p.parse_args(argv)
    import pulse_jax as pj
    from pulse_jax.stats import factorization
    from pulse_jax.fileio import data

    problems = []
    bench = pj.make_benchmark(seed=0)
    problems.append(("builtin", bench.scores, np.asarray(pj.fit_example_embeddings(bench.train, rank=16))))
    for name, file in (("cruxeval", "zeroeval_cruxeval_o.csv"), ("chembench", "chembench.csv")):
        path = Path(args.data) / file
        if not path.is_file():
            print(f"skipping {name}: {path} is absent", file=sys.stderr)
            continue
        train, cand, _ = data.split_models(data.load(path), seed=0)      # as bench_intervals.py
        V = np.asarray(factorization.fit_example_embeddings(train.scores, rank=min(16, *train.shape)))
        problems.append((name, cand.scores, V))
    path = Path(args.data) / "openllm_v2_mmlu_pro_factors.npz"
    if path.is_file():
        train, cand, _ = data.paper_scale_problem(path, seed=0, n_candidates=1000)
        problems.append(("mmlu_pro", cand.scores, np.asarray(factorization.fit_example_embeddings(train.scores,
                                                                                                 rank=32))))
    else:
        print(f"skipping mmlu_pro: {path} is absent", file=sys.stderr)
    rows = []
    for name, scores, V in problems:
        top = np.argsort(-np.nanmean(scores, axis=1))[:args.top]
        S = scores[top]
        m, n = S.shape
        B = 64
        cells = min(args.cells, (n // 2) // B * B)          # no model exhausted: its width would be 0
        config = pj.BanditConfig(n_models=m, n_examples=n, budget=m * B + m * cells, batch_size=B,
                                 refit_every=args.refit_every)
        round_robin = {"rule.exploration": 1e9}
        res = {method: pj.simulate(S, config, method, V=V, reps=args.reps, seed=0, params=round_robin)
               for method in ("ucbe", "pulse")}
        assert (res["ucbe"].n_obs == res["pulse"].n_obs).all()          # the same cells for both
        width = {k: (r.cs_high - r.cs_low) / 2 for k, r in res.items()}
        ratio = width["pulse"] / width["ucbe"]
        lam = res["pulse"].lam[res["pulse"].chosen >= 0]
        row = {"dataset": name, "models": m, "examples": n, "cells_per_model": int(res["ucbe"].n_obs[0].mean()),
               "reps": args.reps, "refit_every": args.refit_every,
               "median_half_width_ucbe": float(np.median(width["ucbe"])),
               "median_half_width_pulse": float(np.median(width["pulse"])),
               "median_ratio_pulse_over_ucbe": float(np.median(ratio)),
               "fraction_of_models_narrower": float((np.median(ratio, axis=0) < 1).mean()),
               "median_lambda": float(np.nanmedian(lam))}
        rows.append(row)
        print(f"{name}: top {m} models, {row['cells_per_model']} cells each, {args.reps} reps: median half-width "
              f"UCB-E {row['median_half_width_ucbe']:.4f}, PULSE {row['median_half_width_pulse']:.4f} "
              f"(ratio {row['median_ratio_pulse_over_ucbe']:.3f}; PULSE narrower for "
              f"{row['fraction_of_models_narrower']:.0%} of models; median lambda {row['median_lambda']:.2f})",
              file=sys.stderr)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
