"""The paper's count of the budget to 95% accuracy, from a reproduction's stored mean curves.

The paper (its ``make_budget_to_95_csvs.py``) counts *bandit* cells only and takes the *first*
budget whose accuracy reaches 0.95; this project's tables count initialization cells too and wait
until the accuracy *stays* at or above 0.95. This script reads ``curves.npz`` of
``benchmarks/paper/reproduce_paper.py`` (mean accuracy per budget; the first budget is the end of
initialization) and prints the paper's count per setting and method, as a Markdown table. With
per-repetition results (a new reproduction run), ``table.md`` also gives the paper's bootstrap mean
and paired intervals (``pulse_jax.analysis.metrics.paper_budget_to_target``, ``paired_savings``).

    python benchmarks/paper/paper_count.py docs/paper_full/curves.npz
"""
from __future__ import annotations

import sys

import numpy as np


def paper_count(curves, setting: str, method: str) -> float:
    budgets, accuracy = curves[f"{setting}__{method}__budget"], curves[f"{setting}__{method}__acc"]
    hit = np.nonzero(accuracy >= 0.95)[0]
    return float(budgets[hit[0]] - budgets[0]) if len(hit) else float("nan")


def main(path: str) -> None:
    curves = np.load(path)
    methods = [m for m in ("ucbe", "pulse", "naive") if any(k.endswith(f"__{m}__acc") for k in curves)]
    show = lambda x: "not reached" if x != x else f"{int(x):,}"   # noqa: E731
    print("| setting | " + " | ".join(methods) + " | PULSE saves |")
    print("|---|" + "---:|" * (len(methods) + 1))
    for setting in sorted({k.split("__")[0] for k in curves.keys()}):
        cells = {m: paper_count(curves, setting, m) for m in methods}
        saved = 100 * (1 - cells["pulse"] / cells["ucbe"]) if cells.get("ucbe") else float("nan")
        print(f"| {setting} | " + " | ".join(show(cells[m]) for m in methods) + f" | {saved:.0f}% |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs/paper_full/curves.npz")
