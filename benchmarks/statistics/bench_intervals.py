"""How sure is it? Interval widths and cells-to-certify, paper bounds vs confidence sequences.

For each dataset and each {UCB-E, PULSE} x {paper bound, CS} x {UCB-E rule,
LUCB rule}: the median interval half-width (over repetitions and models) at
10/25/50/100% of the budget, and the cells spent when a model is first
certified best (median over repetitions, with the fraction of repetitions
that certified within the budget and the fraction certified wrongly). The
half-widths are the paper's fixed-count radius at delta (``paper``) and the
anytime-valid, simultaneous confidence sequence (``cs``); certification uses
the simultaneous version of each (the paper bound at ``delta / (m k (k+1))``).

    python benchmarks/statistics/bench_intervals.py --datasets builtin --reps 50          # minutes on 2 CPU cores
    python benchmarks/statistics/bench_intervals.py --data ../shared/data --reps 200       # every dataset (an accelerator)
    python benchmarks/statistics/bench_intervals.py --datasets mmlu_pro --combos lucb:cs --reps 20   # paper scale, 2 CPU cores

Writes ``--out`` (JSON) and the same path with ``.md`` (a table).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402

SHARED = common.SHARED
FRACTIONS = (0.10, 0.25, 0.50, 1.00)


def problems(args):
    """(name, scores, V, batch, budget, refit_every) per dataset."""
    import pulse_jax as pj
    from pulse_jax.stats import factorization
    from pulse_jax.fileio import data

    out = []
    for name in args.datasets.split(","):
        if name == "builtin":   # the README's live example: 40 models x 1,000 examples, 20,000 cells
            bench = pj.make_benchmark(seed=0)
            V = np.asarray(pj.fit_example_embeddings(bench.train, rank=16))
            out.append((name, bench.scores, V, 64, 20_000, 10))
        elif name in ("cruxeval", "chembench"):
            train, cand = common.real_split({"cruxeval": "cruxeval_o"}.get(name, name))
            V = np.asarray(factorization.fit_example_embeddings(train.scores, rank=min(16, *train.shape)))
            m, n = cand.scores.shape
            out.append((name, cand.scores, V, 32, m * 32 + int(0.3 * m * n), 10))
        elif name == "mmlu_pro":
            path = Path(args.data) / "openllm_v2_mmlu_pro_factors.npz"
            if not path.is_file():
                print(f"skipping {name}: {path} is absent", file=sys.stderr)
                continue
            train, cand, _ = data.paper_scale_problem(path, seed=0, n_candidates=args.paper_candidates)
            V = np.asarray(factorization.fit_example_embeddings(train.scores, rank=32))
            m = cand.scores.shape[0]
            out.append((name, cand.scores, V, 64, m * 64 + args.paper_bandit_budget, 1000))
        else:
            raise SystemExit(f"unknown dataset {name!r}")
    return out


def measure(name, scores, V, batch, budget, refit_every, reps, seed=0, fractions=FRACTIONS, combos=None):
    import pulse_jax as pj
    from pulse_jax.simulation import simulate

    m, n = scores.shape
    init = m * batch
    snaps = tuple(int(init + f * (budget - init)) for f in fractions)
    rows = []
    for method in ("ucbe", "pulse"):
        for rule in ("ucbe", "lucb"):
            for interval in ("paper", "cs"):
                if combos and f"{rule}:{interval}" not in combos:
                    continue
                config = pj.BanditConfig(n_models=m, n_examples=n, budget=budget, batch_size=batch,
                                         refit_every=refit_every, interval=interval,
                                         snapshot_budgets=snaps)
                t0 = time.perf_counter()
                res = simulate(scores, config, pj.Plugins(method, rule), V=V, reps=reps, seed=seed)
                cert = res.certification()
                widths = res.snapshot_cs if interval == "cs" else res.snapshot_paper
                best = int(np.argmax(np.asarray(scores, np.float64).mean(1)))
                row = {"dataset": name, "models": m, "examples": n, "batch": batch, "budget": budget,
                       "method": method, "rule": rule, "interval": interval, "reps": reps,
                       "median_half_width": {f"{f * 100:g}%": float(np.nanmedian(widths[:, k]))
                                             for k, f in enumerate(fractions)},
                       # the interval that certification hinges on: the true best model's
                       "best_model_half_width": {f"{f * 100:g}%": float(np.nanmedian(widths[:, k, best]))
                                                 for k, f in enumerate(fractions)},
                       "snapshot_budgets": list(snaps),
                       "certified_fraction": cert["certified_fraction"], "median_cells_to_certify": cert["median_cells"],
                       "certified_wrong": cert["error_rate"], "anytime_coverage": res.anytime_coverage(),
                       "final_accuracy": float(res.correct()[:, -1].mean()), "seconds": time.perf_counter() - t0}
                rows.append(row)
                print(f"{name:>9} {method:>5} rule={rule:<4} {interval:<5} widths "
                      + " ".join(f"{v:.3f}" for v in row["median_half_width"].values())
                      + "  best model " + " ".join(f"{v:.3f}" for v in row["best_model_half_width"].values())
                      + f"  certified {cert['certified_fraction']:.2f} at median {cert['median_cells']:,.0f} cells"
                      f"  wrong {cert['error_rate']:.3f}  ({row['seconds']:.0f} s)", file=sys.stderr)
    return rows


def plot(rows, path, rule="lucb"):
    """Median half-width against cells, one line per (method, interval), for one rule and dataset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    styles = {("ucbe", "paper"): ("tab:blue", ":"), ("ucbe", "cs"): ("tab:blue", "-"),
              ("pulse", "paper"): ("tab:red", ":"), ("pulse", "cs"): ("tab:red", "-")}
    names = {"ucbe": "UCB-E", "pulse": "PULSE", "paper": "paper bound", "cs": "confidence sequence"}
    for r in rows:
        if r["rule"] != rule:
            continue
        color, ls = styles[(r["method"], r["interval"])]
        ax.plot(np.asarray(r["snapshot_budgets"]) / 1000, list(r["median_half_width"].values()), color=color, ls=ls,
                marker="o", ms=3, label=f"{names[r['method']]}, {names[r['interval']]}")
    ax.set_yscale("log")
    ax.set_xlabel("cells spent (thousands, initialization included)")
    ax.set_ylabel("median half-width (over models and repetitions)")
    ax.set_title(f"{rows[0]['dataset']}: {rows[0]['models']} x {rows[0]['examples']}, rule {rule}, "
                 f"{rows[0]['reps']} repetitions, delta = 0.05", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    return path


def write(out, rows):
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"fractions": FRACTIONS, "rows": rows}, indent=2))
    keys = list(rows[0]["median_half_width"])
    lines = ["| dataset | method | rule | interval | " + " | ".join(f"half-width @{k}" for k in keys)
             + " | best model @100% | certified | median cells to certify | wrong |",
             "|---|---|---|---|" + "---:|" * len(keys) + "---:|---:|---:|---:|"]
    for r in rows:
        w = list(r["median_half_width"].values())
        cells = f"{r['median_cells_to_certify']:,.0f}" if np.isfinite(r["median_cells_to_certify"]) else "never"
        lines.append(f"| {r['dataset']} ({r['models']}x{r['examples']}, {r['budget']:,} cells) | {r['method']} | "
                     f"{r['rule']} | {r['interval']} | " + " | ".join(f"{x:.3f}" for x in w)
                     + f" | {list(r['best_model_half_width'].values())[-1]:.3f}"
                     + f" | {r['certified_fraction']:.0%} | {cells} | {r['certified_wrong']:.3f} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = common.parser(__doc__, reps=200, out="results/bench_intervals.json")
    p.add_argument("--datasets", default="builtin,cruxeval,chembench,mmlu_pro")
    p.add_argument("--data", default=str(SHARED))
    p.add_argument("--paper-candidates", type=int, default=1000)
    p.add_argument("--paper-bandit-budget", type=int, default=400_000)
    p.add_argument("--fractions", default=",".join(str(f) for f in FRACTIONS),
                   help="budget fractions at which to record the widths")
    p.add_argument("--figure", help="PNG of width against cells (the first dataset)")
    p.add_argument("--combos", default=None,
                   help="only these rule:interval pairs, comma-separated (e.g. lucb:cs); default: all four")
    args = p.parse_args(argv)
    fractions = tuple(float(f) for f in args.fractions.split(","))
    rows = []
    for problem in problems(args):
        rows += measure(*problem, reps=args.reps, fractions=fractions,
                        combos=set(args.combos.split(",")) if args.combos else None)
        write(args.out, rows)
    if args.figure:
        plot([r for r in rows if r["dataset"] == rows[0]["dataset"]], args.figure)
    print(write(args.out, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
