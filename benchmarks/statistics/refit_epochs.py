"""How many Adam epochs a periodic refit needs: accuracy, cells to certify and run time against ``refit_epochs``.

PULSE's estimate is unbiased whatever the predictions, so the epochs of each periodic refit (the
paper's 10, `pulse_jax.stats.factorization.PAPER_REFIT`) are an efficiency choice: fewer epochs cost
less time and may cost accuracy. On every data set (the built-in benchmark, and CRUXEval-O and
ChemBench's candidate halves with embeddings fitted on their train halves, when
``../shared/data`` has them), with the same seeds for every setting:

* **fixed budget** (a 16th of the matrix after the first batches): PULSE (the paper's estimator
  and rule), a refit every ``steps / 10`` steps; P(best guess = true best) at the budget, and its
  paired difference from 10 epochs;
* **cells to certify**: ``pulse_hedged`` with ``select``'s configuration (Top-Two with the interval
  challenger, betting sequences, certification bounds, delta 0.05), a refit every 100 steps;
  mean cells, the paired saving against 10 epochs with a bootstrap 95% interval, wrong claims;
* the run time of each (compiled apart).

Each epoch count runs with Adam restarted at every refit (the paper's), and 3 and 1 epochs also
with one Adam run carried from refit to refit (``BanditConfig.carry_refit_state``: rows "3
carried", "1 carried"). Rows "@RATE" take fewer epochs at a larger learning rate
(``BanditParams.refit_lr``; Adam's steps are about the rate in size, so 3 at 0.3 travel as far as 10 at 0.1).

    python benchmarks/statistics/refit_epochs.py --reps 300 --out docs/benchmarks/refit_epochs.json
    python benchmarks/statistics/refit_epochs.py --reps 2000 --parts fixed --out docs/benchmarks/refit_epochs_fixed.json

Prints a table and writes JSON (and ``.md``). Resumable: rows already in ``--out`` are kept.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from batch_effect import paired  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402

#: Each setting's label: its epochs, then " carried" when the refits continue one Adam run, then " @RATE"
#: when the periodic refits' learning rate is not the paper's 0.1 (fewer epochs, each a longer step).
SETTINGS = ("10", "5", "3", "1", "3 carried", "1 carried", "5 @0.2", "4 @0.25", "3 @0.2", "3 @0.3", "3 @0.4",
            "3 carried @0.3")


def _schedule(label: str) -> dict:
    """``"3"``, ``"3 carried"``, ``"3 @0.3"`` (epochs, one Adam run carried, the periodic refits' rate)."""
    words = label.split()
    return {"refit_epochs": int(words[0]), "carry_refit_state": "carried" in words}


def _rate(label: str) -> dict:
    """The periodic refits' learning rate a label names (``@0.3``), as a `BanditParams` override."""
    return {"refit_lr": float(w[1:]) for w in label.split() if w.startswith("@")}


def fixed_budget(scores, V, setting: str, args) -> dict:
    import pulse_jax as pj

    m, n = scores.shape
    batch = 16
    budget = m * batch + max(m * n // 16, 10 * batch)
    steps = -(-(budget - m * batch) // batch)
    config = pj.BanditConfig(n_models=m, n_examples=n, budget=budget, batch_size=batch,
                             refit_every=max(steps // 10, 1), **_schedule(setting))
    res = pj.simulate(scores, config, "pulse", V=V, reps=args.reps, seed=args.seed, progress=False,
                      params=_rate(setting) or None)
    return {"budget": budget, "refit_every": config.refit_every, "run_s": res.seconds - res.compile_seconds,
            "hits": res.is_best(res.best[:, -1]).astype(float).tolist()}


def certify(scores, V, setting: str, args) -> dict:
    import pulse_jax as pj
    from pulse_jax.stats.confidence import BETTING_GRID

    m, n = scores.shape
    config = pj.BanditConfig(n_models=m, n_examples=n, budget=m * n, batch_size=8, refit_every=100,
                             **_schedule(setting), cs_grid=BETTING_GRID, record_steps=False)
    plugins = pj.Plugins("pulse_hedged", pj.top_two(challenger="interval"), "certified")
    res = pj.simulate(scores, config, plugins, V=V, reps=args.reps, seed=args.seed, progress=False,
                      params={"delta": 0.05, "cs_simultaneous": 0.0, **_rate(setting)})
    claims = res.claims()
    return {"run_s": res.seconds - res.compile_seconds, "cells": res.spent[:, -1].tolist(),
            "stopped": claims["stopped_fraction"], "wrong": claims["error_rate"]}


def table(rows: dict) -> str:
    """The rows of every setting measured, per data set: `SETTINGS` in order, then any other label."""
    lines = ["| data | refit epochs | fixed budget: accuracy | vs 10 epochs (paired) | run (s) | "
             "cells to certify | fewer than 10 epochs [95% CI] | certified / wrong | run (s) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for data in dict.fromkeys(k.split("|")[0] for k in rows):
        ref_f, ref_c = rows.get(f"{data}|fixed|10"), rows.get(f"{data}|certify|10")
        measured = [k.split("|")[2] for k in rows if k.startswith(f"{data}|")]
        labels = dict.fromkeys([e for e in SETTINGS if e in measured] + measured)
        for e in labels:
            f, c = rows.get(f"{data}|fixed|{e}"), rows.get(f"{data}|certify|{e}")
            cells = []
            if f:
                hits = np.asarray(f["hits"])
                diff = hits - np.asarray(ref_f["hits"])
                cells += [f"{hits.mean():.3f} +- {hits.std(ddof=1) / np.sqrt(len(hits)):.3f}",
                          f"{diff.mean():+.3f} +- {diff.std(ddof=1) / np.sqrt(len(diff)):.3f}", f"{f['run_s']:.1f}"]
            else:
                cells += ["", "", ""]
            if c:
                s, lo, hi = paired(c["cells"], ref_c["cells"])
                cells += [f"{np.mean(c['cells']):,.0f}", "" if e == "10" else f"{s:+.1f}% [{lo:+.1f}, {hi:+.1f}]",
                          f"{c['stopped']:.0%} / {c['wrong']:.3f}", f"{c['run_s']:.1f}"]
            else:
                cells += ["", "", "", ""]
            lines.append(f"| {data} | {e} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = common.parser(__doc__, reps=300, seed=0, rank=8, out="results/refit_epochs.json")
    p.add_argument("--parts", default="fixed,certify", help="comma-separated: fixed, certify")
    p.add_argument("--settings", default=",".join(SETTINGS),
                   help="comma-separated labels: epochs, then ' carried' and/or ' @RATE' (the periodic refits' "
                        "learning rate, the paper's 0.1 when absent); '10' is the reference")
    args = p.parse_args(argv)
    out = Path(args.out)
    rows = json.loads(out.read_text())["rows"] if out.is_file() else {}
    parts = args.parts.split(",")

    def save():
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"reps": args.reps, "seed": args.seed, "rows": rows}))
        out.with_suffix(".md").write_text(table(rows) + "\n")

    for data, (scores, V) in common.datasets(args.rank).items():
        for part, run in (("fixed", fixed_budget), ("certify", certify)):
            if part not in parts:
                continue
            for e in dict.fromkeys(["10"] + args.settings.split(",")):
                key = f"{data}|{part}|{e}"
                if key not in rows:
                    rows[key] = run(scores, V, e, args)
                    print(f"{key}: {rows[key]['run_s']:.1f} s", file=sys.stderr, flush=True)
                    save()
    save()
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
