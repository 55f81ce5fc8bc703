"""Accuracy vs budget, one panel per setting, from a reproduction's ``curves.npz``.

``curves.npz`` holds, per ``<setting>__<method>``, the budgets, Accuracy@budget and its standard
error (``docs/paper_full/curves.npz`` is the full-scale run on the H100)::

    python benchmarks/paper/plot_paper_grid.py docs/paper_full/curves.npz docs/paper_full/accuracy_grid.png
"""
from __future__ import annotations

import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

LABELS = {"ucbe": "UCB-E", "pulse": "PULSE", "naive": "Naive-Pooling"}
COLORS = {"ucbe": "tab:blue", "pulse": "tab:red", "naive": "tab:gray"}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    src, out = argv[0], argv[1]
    data = np.load(src)
    settings = sorted({k.split("__")[0] for k in data.files}, key=lambda s: (s.startswith(("c",)), s))
    # settings whose curves are identical (the same realized gap) are drawn once
    distinct, seen = [], {}
    for s in settings:
        sig = data[f"{s}__ucbe__acc"].tobytes()
        if sig not in seen:
            seen[sig] = s
            distinct.append(s)
    cols = 3
    rows = -(-len(distinct) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax, s in zip(axes.flat, distinct):
        for method in ("ucbe", "pulse", "naive"):
            key = f"{s}__{method}"
            if f"{key}__acc" not in data.files:
                continue
            b, acc, se = data[f"{key}__budget"], data[f"{key}__acc"], data[f"{key}__se"]
            ax.plot(b / 1000, acc, color=COLORS[method], label=LABELS[method], lw=1.5)
            ax.fill_between(b / 1000, acc - se, acc + se, color=COLORS[method], alpha=0.2, lw=0)
        ax.axhline(0.95, color="k", lw=0.6, ls=":")
        ax.set_title(s, fontsize=10)
        ax.set_xlabel("cells (thousands, initialization included)")
        ax.set_ylabel("Accuracy@budget")
        ax.set_ylim(0, 1.02)
    for ax in list(axes.flat)[len(distinct):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out} ({len(distinct)} panels)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
