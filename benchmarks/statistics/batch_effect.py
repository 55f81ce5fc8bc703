"""Where the cells to certify go, by batch size: the batch effect, measured and decomposed.

For each data set, method and batch size ``B`` this runs ``select``'s configuration (Top-Two with the
interval challenger, certification bounds, betting sequences, delta 0.05, the whole matrix allowed,
stop when certified, refit every 1,000 steps) over ``--reps`` repetitions with the same seed, and
splits the cells spent by the time of certification into

* ``first look``: the initial batch of every model (``m x B``),
* ``top two``: the best two models' cells after it,
* ``rest``: everyone else's cells after it,

beside ``overshoot``: the cells of the batch in which each pull crossed what it needed is bounded by
``B`` per pull; reported as the pulls to certify (``pulls``). Data: the built-in benchmark,
CRUXEval-O and ChemBench (candidate halves, ``bench_rules.py``), and ``factor:<file>:<m>x<n>``
subsets of a paper-scale factor file (``m`` candidates, ``n`` random examples).

    python benchmarks/statistics/batch_effect.py --reps 200 --out docs/benchmarks/batch_effect.json

Resumable: rows already in ``--out`` are kept and skipped. Prints a table and writes JSON (and ``.md``).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402
from common import SHARED, datasets  # noqa: E402


DEFAULT_DATA = "builtin,cruxeval_o,chembench,factor:openllm_v2_mmlu_pro_factors.npz:200x1300"


def factor_subset(spec: str, rank: int, seed: int = 0):
    """``factor:<file>:<m>x<n>[@<gap>]``: n random examples of a factor file and m candidates, with
    embeddings fitted on 400 train models' scores on the same examples. With ``@gap`` the candidates
    are a near-tie leaderboard: the adjacent pair (by mean on these examples) among the candidate
    half's top 50 whose gap is closest to ``gap``, and the m - 2 models below it; otherwise the first
    m of the half."""
    import pulse_jax as pj
    from pulse_jax.fileio import data

    spec, _, gap = spec.partition("@")
    _, file, shape = spec.split(":")
    m, n = (int(x) for x in shape.split("x"))
    half = data.load_factors(SHARED / file)[0].shape[0]
    train, cand, _ = data.paper_scale_problem(SHARED / file, seed=seed, n_candidates=half - half // 2)
    cols = np.sort(np.random.default_rng(seed).choice(cand.scores.shape[1], n, replace=False))
    pool, history = cand.scores[:, cols], train.scores[:400, cols]
    if gap:   # the adjacent pair among the top 50 whose gap is closest to ``gap`` leads; those above it are left out
        means = pool.mean(1)
        order = np.argsort(-means, kind="stable")
        top = int(np.argmin(np.abs(means[order[:50]] - means[order[1:51]] - float(gap))))
        pool = pool[order[top:top + m]]
    else:
        pool = pool[:m]
    return pool, np.asarray(pj.fit_example_embeddings(history, rank=rank))


def each_dataset(names, rank: int):
    """``(name, scores, V)`` for each name: ``bench_rules.datasets``' (built-in, CRUXEval-O, ChemBench)
    or a ``factor:`` subset; one that is absent or unknown is skipped with a line on stderr."""
    real = datasets(rank) if any(not d.startswith("factor:") for d in names) else {}
    for name in names:
        if name.startswith("factor:") and (SHARED / name.split(":")[1].split("@")[0]).is_file():
            yield (name, *factor_subset(name, rank))
        elif name in real:
            yield (name, *real[name])
        else:
            print(f"skipping {name}: absent or unknown", file=sys.stderr)


def run_one(scores, V, method, batch, reps, seed, challenger="interval") -> dict:
    import pulse_jax as pj
    from pulse_jax.stats.confidence import BETTING_GRID

    m, n = scores.shape
    config = pj.BanditConfig(n_models=m, n_examples=n, budget=m * n, batch_size=batch, refit_every=1000,
                             cs_grid=BETTING_GRID)
    plugins = pj.Plugins(method, pj.top_two(challenger=challenger), "certified")
    t = time.time()
    res = pj.simulate(scores, config, plugins, V=V if method != "ucbe" else None, reps=reps, seed=seed,
                      params={"delta": 0.05, "cs_simultaneous": 0.0}, progress=False)
    means = res.true_means
    top2 = np.argsort(-means, kind="stable")[:2]
    spent = np.where(res.certified_spent >= 0, res.certified_spent, np.nan)
    after = res.n_obs - batch                    # cells after each model's first look
    return {"method": method, "B": batch, "reps": reps, "seconds": round(time.time() - t, 1),
            "certified": float(np.mean(res.certified_spent >= 0)), "wrong": res.certification()["error_rate"],
            "cells": spent.tolist(), "mean_cells": float(np.nanmean(spent)), "first_look": m * batch,
            "top_two": float(after[:, top2].sum(1).mean()), "rest": float(after.sum(1).mean() - after[:, top2].sum(1).mean()),
            "pulls": float((res.n_pulls.sum(1) - m).mean()), "gap": float(means[top2[0]] - means[top2[1]])}


def paired(a, b, n_boot=2000, seed=0):
    """``1 - mean(a) / mean(b)`` in percent with a paired bootstrap 95% interval (same repetitions)."""
    a, b = np.asarray(a), np.asarray(b)
    idx = np.random.default_rng(seed).integers(0, len(a), (n_boot, len(a)))
    boots = 100 * (1 - a[idx].mean(1) / b[idx].mean(1))
    return float(100 * (1 - a.mean() / b.mean())), *map(float, np.quantile(boots, [0.025, 0.975]))


def table(rows) -> str:
    lines = ["| data | m x n | top-2 gap | method | B | cells to certify | fewer cells than B = 64 [95% CI] | first look | "
             "top two | rest | pulls | certified / wrong |", "|" + "---|" * 12]
    for r in rows:
        ref = next((x for x in rows if x["data"] == r["data"] and x["method"] == r["method"] and x["B"] == 64), None)
        vs = ""
        if ref is not None and r["B"] != 64:
            s, lo, hi = paired(r["cells"], ref["cells"])
            vs = f"{s:+.0f}% [{lo:+.0f}, {hi:+.0f}]"
        lines.append(f"| {r['data']} | {r['shape']} | {r['gap']:.3f} | {r['method']} | {r['B']} | {r['mean_cells']:,.0f} | "
                     f"{vs} | {r['first_look']:,} | {r['top_two']:,.0f} | {r['rest']:,.0f} | {r['pulls']:,.0f} | "
                     f"{r['certified']:.0%} / {r['wrong']:.3f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = common.parser(__doc__, reps=200, seed=0, rank=8, data=DEFAULT_DATA, methods="ucbe,pulse_hedged", out="docs/benchmarks/batch_effect.json")
    p.add_argument("--batches", default="8,16,32,64")
    p.add_argument("--challenger", default="interval", help="Top-Two's challenger cost: interval (select's) or "
                   "interval_symmetric (the gap in half-widths, to measure the difference)")
    args = p.parse_args(argv)
    out = Path(args.out)
    rows = json.loads(out.read_text())["rows"] if out.is_file() else []
    done = {(r["data"], r["method"], r["B"]) for r in rows}
    for name, scores, V in each_dataset(args.data.split(","), args.rank):
        for method in args.methods.split(","):
            for batch in (int(b) for b in args.batches.split(",")):
                if (name, method, batch) in done:
                    continue
                row = {"data": name, "shape": f"{scores.shape[0]} x {scores.shape[1]}",
                       **run_one(scores, V, method, batch, args.reps, args.seed, args.challenger)}
                rows.append(row)
                print(f"{name} {method} B={batch}: {row['mean_cells']:,.0f} cells ({row['seconds']} s)", flush=True)
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(json.dumps({"command": "python benchmarks/statistics/batch_effect.py " + " ".join(argv or sys.argv[1:]),
                                           "rows": rows}, indent=1))
    text = table(rows)
    print(text)
    out.with_suffix(".md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
