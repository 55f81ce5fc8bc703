"""Figures (matplotlib, Agg backend): readable defaults, colour-blind-safe palette."""
from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from pulse_jax import metrics  # noqa: E402

# Okabe & Ito (2008) colour-blind-safe palette.
COLORS = {"pulse": "#0072B2", "ucbe": "#E69F00", "naive": "#CC79A7"}
LABELS = {"pulse": "PULSE", "ucbe": "UCB-E", "naive": "Naive-Pooling"}


def accuracy_vs_budget(results, path, title: str = "", points: int = 60, bandit_only: bool = False):
    """Accuracy@budget with +-1 SE bands for each result; writes ``path`` (PNG or PDF by suffix)."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    for res in results:
        budgets = metrics.budget_grid(res, points)
        acc, se = res.accuracy_at_budget(budgets)
        x = budgets - (res.config.init_cells if bandit_only else 0)
        color = COLORS.get(res.method)
        ax.plot(x, acc, color=color, lw=2, label=f"{LABELS.get(res.method, res.method)} ({res.reps} reps)")
        ax.fill_between(x, np.clip(acc - se, 0, 1), np.clip(acc + se, 0, 1), color=color, alpha=0.25, lw=0)
    ax.set_xlabel("bandit budget (cells evaluated after initialization)" if bandit_only
                  else "budget (cells evaluated, initialization included)")
    ax.set_ylabel("Accuracy@budget (P[guess = true best])")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    if title:
        ax.set_title("\n".join(textwrap.wrap(title, 70)), fontsize=9)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def estimates_with_intervals(report, path):
    """A live selection's estimates with their intervals, best first (PNG or PDF by suffix)."""
    order = [report.models.index(name) for name in report.ranking][:40]
    fig, ax = plt.subplots(figsize=(6.4, 0.3 * len(order) + 1.5), dpi=120)
    y = np.arange(len(order))[::-1]
    est = report.estimates[order]
    ax.errorbar(est, y, xerr=[est - report.low[order], report.high[order] - est], fmt="o", color=COLORS["pulse"],
                ecolor=COLORS["pulse"], capsize=3, label=f"{1 - report.delta:.0%} interval")
    ax.errorbar(est, y, xerr=[est - report.anytime_low[order], report.anytime_high[order] - est], fmt="none",
                ecolor=COLORS["ucbe"], alpha=0.6, lw=4, label="simultaneous bound (stopping rule)", zorder=0)
    ax.set_yticks(y, [report.models[i] for i in order], fontsize=8)
    ax.set_xlabel("estimated mean score")
    ax.set_xlim(0, 1)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(f"{report.method}: {report.spent:,} of {report.budget:,} cells; leader {report.leader}", fontsize=9)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return Path(path)
