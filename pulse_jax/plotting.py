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
