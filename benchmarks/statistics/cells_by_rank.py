"""Where the cells to certify the best go, model by model, and how much of them the lower bounds' level
could ever save.

``select``'s configuration (UCB-E, B = 8, Top-Two with the interval challenger, certification bounds,
betting sequences, delta 0.05, `pulse_jax.choices.CLAIM_UPPER_SHARE` of it to the upper bounds, bets
tuned to the running gap, the whole matrix allowed) on the shipped real matrices: mean cells per model,
by the model's rank in the matrix. Then the same runs with every lower bound at the level of a single
model (``log(1/alpha_low)`` less ``log m``: no union over the models). That variant is **not valid**
(a wrong certificate may then be more likely than delta); it is run only as an oracle, to bound what
any reallocation of the lower bounds' share of delta among the models could save::

    python benchmarks/statistics/cells_by_rank.py --reps 50 --out results/cells_by_rank.json

Prints a table and writes ``--out`` (JSON) and the same path with ``.md``.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402


def _runs(scores, reps: int, seed: int, union: bool):
    """``(mean cells, mean cells per model, share certified correctly)`` of `select`'s configuration."""
    import jax

    import pulse_jax as pj
    from pulse_jax import simulation
    from pulse_jax.choices import CLAIM_GAP_HORIZON, CLAIM_UPPER_SHARE
    from pulse_jax.stats import confidence

    m, n = scores.shape
    config = pj.BanditConfig(n_models=m, n_examples=n, budget=m * n, batch_size=8, refit_every=1000, cs_grid=1000,
                             record_steps=False, gap_horizon=CLAIM_GAP_HORIZON)
    levels = confidence.cs_levels

    def one_model_lower_level(delta, n_models, *args, **kwargs):
        low, high = levels(delta, n_models, *args, **kwargs)
        return low - math.log(n_models), high

    if not union:   # the oracle: each lower bound at one model's level (invalid; a measurement only)
        confidence.cs_levels = one_model_lower_level
    try:
        res = pj.simulate(scores, config, pj.Plugins("ucbe", "top_two_interval", "certified"), reps=reps, seed=seed,
                          params=pj.BanditParams(cs_simultaneous=0.0, cs_upper_share=CLAIM_UPPER_SHARE), progress=False)
    finally:
        confidence.cs_levels = levels
        simulation.compiled_runner.cache_clear()   # the patched levels live in the traced program: trace anew
        jax.clear_caches()
    best = int(np.argmax(scores.mean(axis=1)))
    return float(res.spent[:, -1].mean()), res.n_obs.mean(axis=0), float(np.mean(res.certified_model == best))


def main(argv=None) -> int:
    p = common.parser(__doc__, reps=50, seed=0, out="results/cells_by_rank.json")
    args = p.parse_args(argv)
    done = {}
    for name in common.REAL_FILES:
        split = common.real_split(name)
        if split is None:
            print(f"{name}: data file absent, skipped", file=sys.stderr)
            continue
        scores = np.asarray(split[1].scores, np.float32)
        means = scores.mean(axis=1)
        order = np.argsort(-means)
        total, per_model, right = _runs(scores, args.reps, args.seed, union=True)
        oracle, oracle_per_model, oracle_right = _runs(scores, args.reps, args.seed, union=False)
        done[name] = {"models": int(scores.shape[0]), "examples": int(scores.shape[1]), "reps": args.reps,
                      "cells": total, "certified_best": right, "no_union_oracle_cells": oracle,
                      "no_union_oracle_certified_best": oracle_right,
                      "by_rank": [{"rank": k + 1, "mean": float(means[i]), "gap": float(means[order[0]] - means[i]),
                                   "cells": float(per_model[i]), "no_union_oracle_cells": float(oracle_per_model[i])}
                                  for k, i in enumerate(order)]}
    lines = [f"UCB-E, `select`'s configuration, {args.reps} repetitions, seed {args.seed}: mean cells to certify the best", ""]
    for name, d in done.items():
        lines += [f"**{name}** ({d['models']} x {d['examples']:,}): {d['cells']:,.0f} cells, certified the best in "
                  f"{d['certified_best']:.0%}; every lower bound at one model's level (invalid oracle): "
                  f"{d['no_union_oracle_cells']:,.0f} ({d['no_union_oracle_cells'] / d['cells'] - 1:+.1%})", "",
                  "| rank | mean | gap to the best | cells | cells, oracle |", "|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['rank']} | {r['mean']:.3f} | {r['gap']:.3f} | {r['cells']:,.1f} | {r['no_union_oracle_cells']:,.1f} |"
                  for r in d["by_rank"]] + [""]
    common.write_results(args.out, done, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
