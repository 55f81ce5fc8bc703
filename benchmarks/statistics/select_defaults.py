"""A best-model certificate's levels in ``select``: the split of delta and the bets' horizon it uses by
default (`pulse_jax.choices.CLAIM_UPPER_SHARE`, `pulse_jax.choices.CLAIM_GAP_HORIZON`) against the
symmetric split with anytime bets, cells to certify the best.

Two parts:

* **Simulation**, paired repetitions (the same seeds and draws for every row) of ``select``'s
  configuration (B = 8, Top-Two with the interval challenger, certification bounds, betting sequences,
  delta 0.05, the whole matrix allowed) for ``pulse_hedged`` and UCB-E on the built-in live example
  and the two shipped real matrices, with each matrix's information floor
  (`pulse_jax.stats.information_floor`) and the wrong certificates.
* **The README's ``select`` command** on the stand-in (40 x 1,000, ``--budget 20000 --batch-size 16
  --refit-every 25``, an instant scorer), seeds 0, 1, 2, ``pulse_hedged`` (``--train history.csv``) and
  UCB-E (``--method ucbe``), each with its defaults and with ``--gap-horizon 0 --param
  cs_upper_share=0.5``: total cells over the three seeds, as ``select``'s report counts them.

Any split of delta and any horizon read from the draws before a batch keep ``P(a wrong claim) <=
delta`` (docs/confidence.md, "Splitting delta" and "Horizons from the data").

    python benchmarks/statistics/select_defaults.py --reps 100 --out docs/benchmarks/select_defaults.json

Prints a table and writes ``--out`` (JSON, each part kept as it finishes, so a rerun resumes) and the
same path with ``.md``.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402

#: ``(label, BanditConfig.gap_horizon, BanditParams.cs_upper_share)``: the symmetric split with anytime bets,
#: and a best-model certificate's defaults.
VARIANTS = (("half each, anytime bets", 0.0, 0.5), ("select's default: 0.95 upper, gap 0.5", 0.5, 0.95))
METHODS = ("pulse_hedged", "ucbe")
SEEDS = (0, 1, 2)


def _config(m: int, n: int, gap: float):
    import pulse_jax as pj

    return pj.BanditConfig(n_models=m, n_examples=n, budget=m * n, batch_size=8, refit_every=1000,
                           cs_grid=1000, record_steps=False, gap_horizon=gap)


def study(name: str, scores, V, reps: int, seed: int) -> dict:
    import pulse_jax as pj

    m, n = scores.shape
    start = time.perf_counter()
    rows = []
    for method in METHODS:
        base = None
        for label, gap, share in VARIANTS:
            res = pj.simulate(scores, _config(m, n, gap), pj.Plugins(method, "top_two_interval", "certified"), V=None if method == "ucbe" else V, reps=reps,
                              seed=seed, params=pj.BanditParams(cs_simultaneous=0.0, cs_upper_share=share),
                              progress=False)
            cells = res.spent[:, -1].astype(float)
            base = cells if base is None else base
            ratio = cells / base
            rows.append({"method": method, "variant": label, "gap_horizon": gap, "cs_upper_share": share,
                         "mean_cells": float(cells.mean()), "se_cells": float(cells.std(ddof=1) / np.sqrt(reps)),
                         "vs_symmetric": float(cells.mean() / base.mean()),
                         "paired_se": float(ratio.std(ddof=1) / np.sqrt(reps)),
                         **common.certified_counts(res.certified_model, scores)})
            print(f"{name} {method} {label}: {cells.mean():,.0f} cells", file=sys.stderr, flush=True)
    return {"data": name, "models": m, "examples": n, "reps": reps, "seconds": round(time.perf_counter() - start, 1),
            "rows": rows, "floor": common.floor_cells(scores, 0.05, 8)}


def _select_cells(folder: Path, name: str, method_args: list, seed: int, extra: list) -> int:
    """Cells of one ``pulse-jax select`` run of the README's example (its ``report.json``)."""
    log = folder / f"{name}-{seed}.db"
    cmd = [sys.executable, "-m", "pulse_jax.cli", "select", "--quiet", "--models", str(folder / "models.txt"),
           "--examples", "1000", "--budget", "20000", "--batch-size", "16", "--refit-every", "25",
           "--evaluate", "pulse_jax.stand_in:score", "--log", str(log), "--seed", str(seed), *method_args, *extra]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    report = json.loads((log.parent / (log.stem + "_report") / "report.json").read_text())
    return int(report["spent"])


def readme_select() -> dict:
    """Total cells over `SEEDS` of the README's ``select`` command, each method with and without the defaults."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for what in ("models", "train"):
            target = folder / ("models.txt" if what == "models" else "history.csv")
            with open(target, "w") as f:
                subprocess.run([sys.executable, "-m", "pulse_jax.cli.stand_in", what]
                               + ([str(target)] if what == "train" else []), check=True, stdout=f if what == "models"
                               else subprocess.DEVNULL)
        for method, method_args in (("pulse_hedged", ["--train", str(folder / "history.csv")]),
                                    ("ucbe", ["--method", "ucbe"])):
            for k, (label, extra) in enumerate((("half each, anytime bets", ["--gap-horizon", "0", "--param",
                                                                             "cs_upper_share=0.5"]),
                                                ("select's default: 0.95 upper, gap 0.5", []))):
                cells = [_select_cells(folder, f"{method}-{k}", method_args, seed, extra) for seed in SEEDS]
                rows.append({"method": method, "variant": label, "cells": cells, "total": sum(cells)})
                print(f"README select {method} {label}: {sum(cells):,} cells", file=sys.stderr, flush=True)
    return {"data": "README select", "seeds": list(SEEDS), "rows": rows}


def table(done: dict) -> str:
    lines = ["| data (m x n; information floor) | method | levels | mean cells (SE) | cells / floor | "
             "vs half each, anytime (paired SE) | certified | wrong |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for entry in done.values():
        if "floor" not in entry:
            continue
        floor = entry["floor"]
        for r in entry["rows"]:
            lines.append(f"| {entry['data']} ({entry['models']} x {entry['examples']:,}; {floor:,.0f}) | {r['method']} | "
                         f"{r['variant']} | {common.cells_columns(r, floor)} | "
                         f"{r['vs_symmetric']:.3f}x ({r['paired_se']:.3f}) | {common.certified_columns(r, entry['reps'])} |")
    readme = done.get("README select")
    if readme:
        ucbe = next(r["total"] for r in readme["rows"] if r["method"] == "ucbe" and r["variant"].startswith("half"))
        lines += ["", f"The README's `select` command, seeds {', '.join(map(str, readme['seeds']))}: total cells "
                      "(and against UCB-E with half each and anytime bets)", "",
                  "| method | levels | cells per seed | total | vs UCB-E, half each |", "|---|---|---|---:|---:|"]
        for r in readme["rows"]:
            lines.append(f"| {r['method']} | {r['variant']} | {', '.join(f'{c:,}' for c in r['cells'])} | "
                         f"{r['total']:,} | {r['total'] / ucbe:.2f}x |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = common.parser(__doc__, reps=100, seed=0, rank=16, out="results/select_defaults.json")
    args = p.parse_args(argv)
    problems = dict(common.shipped_problems(args.rank))
    problems["README select"] = None

    def run(name, make):
        if make is None:
            return readme_select()
        scores, V = make()
        return study(name, scores, V, args.reps, args.seed)

    done = common.study_each(problems, args.out, "A best-model certificate's levels in select",
                             f"python benchmarks/statistics/select_defaults.py --reps {args.reps} --out {args.out}",
                             run, table)
    print(table(done))
    return 0


if __name__ == "__main__":
    sys.exit(main())
