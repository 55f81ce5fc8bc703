"""Plot how run time grows with models, examples, rank and repetitions, from bench_scale JSON files.

    python benchmarks/speed/bench_scale.py --models 250,500,1000 --examples 12032 --rank 100 --reps 8 \\
        --bandit-budget 100000 --refit-every 250 --methods ucbe,pulse --out results/scale_models.json
    ... (one file per swept axis) ...
    python benchmarks/speed/plot_scale.py results/scale_*.json --out results/scaling.png

Each file should vary one of models / examples / rank / reps; the plot has one
panel per file, run seconds (compilation excluded) against the varied axis,
one line per method, log-log.
"""
from __future__ import annotations

import json
from pathlib import Path
import sys

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402

AXES = ("models", "examples", "rank", "reps", "bandit_budget")
SYMBOL = {"models": "m", "examples": "n", "rank": "r", "reps": "reps", "bandit_budget": "T"}


def main(argv=None):
    p = common.parser(__doc__, out="results/scaling.png")
    p.add_argument("files", nargs="+")
    args = p.parse_args(argv)
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pulse_jax.analysis.plotting import COLORS, LABELS

    fig, axes = plt.subplots(1, len(args.files), figsize=(4 * len(args.files), 3.4), squeeze=False)
    for ax, path in zip(axes[0], args.files):
        rows = json.loads(Path(path).read_text())["rows"]
        varied = [a for a in AXES if len({row[a] for row in rows}) > 1]
        if len(varied) != 1:
            raise SystemExit(f"{path}: expected exactly one varied axis among {AXES}, found {varied}")
        axis = varied[0]
        for method in dict.fromkeys(row["method"] for row in rows):
            pts = sorted((row[axis], row["run_s"]) for row in rows if row["method"] == method)
            ax.plot(*zip(*pts), "o-", label=LABELS.get(method, method), color=COLORS.get(method))
        ax.set_xscale("log")
        ax.set_yscale("log")
        xs = sorted({row[axis] for row in rows})
        ax.set_xticks(xs, [f"{x:,}" for x in xs])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda y, _: f"{y:g}"))
        ax.set_xlabel(axis.replace("_", " "))
        ax.set_ylabel("run time (s)")
        fixed = {a: rows[0][a] for a in AXES if a != axis}
        ax.set_title(", ".join(f"{SYMBOL[k]}={v:,}" for k, v in fixed.items()), fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend()
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=130)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
