"""Figures (matplotlib, Agg backend): readable defaults, colour-blind-safe palette."""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import matplotlib

if "ipykernel" not in sys.modules:   # scripts and CI: no display; notebooks keep their inline backend
    matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from pulse_jax.analysis import metrics  # noqa: E402

# Okabe & Ito (2008) colour-blind-safe palette.
COLORS = {"pulse": "#0072B2", "ucbe": "#E69F00", "naive": "#CC79A7"}
LABELS = {"pulse": "PULSE", "ucbe": "UCB-E", "naive": "Naive-Pooling"}


def _save(fig, path):
    """Write the figure to ``path`` (format from the suffix: .png, .pdf, ...) and close it."""
    import io

    from pulse_jax.fileio.files import write_atomically

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    fig.savefig(buffer, format=Path(path).suffix.lstrip(".").lower() or "png")
    plt.close(fig)
    return write_atomically(path, buffer.getvalue())


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
    return _save(fig, path)


def interval_label(report) -> str:
    """What the plotted intervals are: simultaneous confidence sequences, or, at certification levels,
    intervals that each hold on their own (not all at once) and certify the best model."""
    if getattr(report, "simultaneous", True):
        return f"{1 - report.delta:.0%} confidence sequence (simultaneous, every look)"
    return f"certification bounds: each holds alone, not all at once; a certified best is right w.p. {1 - report.delta:.0%}"


def estimates_with_intervals(report, path):
    """A live selection's estimates with their intervals, best first (PNG or PDF by suffix)."""
    order = [report.models.index(name) for name in report.ranking][:40]
    fig, ax = plt.subplots(figsize=(6.4, 0.3 * len(order) + 1.5), dpi=120)
    y = np.arange(len(order))[::-1]
    est = report.estimates[order]
    # Lines, not error bars: PULSE's estimate (the mean of its one-step estimates) need not lie
    # inside the confidence sequence, whose centre is a different weighted mean.
    ax.hlines(y, report.low[order], report.high[order], color=COLORS["ucbe"], alpha=0.6, lw=4, zorder=0,
              label=interval_label(report))
    ax.plot(est, y, "o", color=COLORS["pulse"], label="estimate")
    ax.set_yticks(y, [report.models[i] for i in order], fontsize=8)
    ax.set_xlabel("estimated mean score")
    ax.set_xlim(0, 1)
    ax.grid(axis="x", alpha=0.3)
    ax.set_ylim(-0.7, len(order) - 0.3)
    # Above the axes, under the title: inside them it covered the last models' rows.
    ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), fontsize=8, frameon=False, ncol=1,
              borderaxespad=0.2)
    fig.suptitle(f"{report.method}: {report.spent:,} of {report.budget:,} cells; leader {report.leader}", fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


def cost_accuracy(path, cost, estimates, names, *, low=None, high=None, claimed=None, title: str = "",
                  label: str = "estimate", unit: str = ""):
    """Mean score against cost per cell (log axis): each model's estimate with its interval when given,
    the models a certificate claims marked (``claimed``: booleans, or the share of repetitions that
    claimed each model), and the claimed front joined by a line from the cheapest. Names are written
    where they fit (`_labels`: the claimed models first, then by estimate), so 40-200 models stay
    readable; with one price for every model the x axis is the rank by estimate instead (a cost axis
    would stack every model on one line). ``unit``: the costs' unit for the axis (e.g. "$")."""
    cost, est = np.asarray(cost, float), np.asarray(estimates, float)
    share = np.zeros(len(est)) if claimed is None else np.asarray(claimed, float)
    one_price = bool(np.ptp(cost) == 0)
    x = (np.argsort(np.argsort(-est, kind="stable"), kind="stable") + 1.0) if one_price else _dodged(cost, est)
    crowd = 0 if one_price else int(np.unique(cost, return_counts=True)[1].max())
    # Tall enough for one line per name of the most crowded price (up to 100 of them).
    fig, ax = plt.subplots(figsize=(7.2, max(4.8, min(crowd, 100) * 7.5 / 72 + 1.8)), dpi=120)
    if low is not None and high is not None:
        ax.vlines(x, low, high, color=COLORS["ucbe"], alpha=0.5, lw=3, zorder=0, label="confidence sequence")
    ax.plot(x, est, "o", color=COLORS["pulse"], ms=4 if len(est) > 60 else 5, label=label)
    hit = share > 0
    if hit.any():
        ax.scatter(x[hit], est[hit], s=40 + 160 * share[hit], facecolors="none", edgecolors="black", lw=1.5,
                   zorder=3, label="claimed by the certificate" + (" (size: share of repetitions)"
                                                                    if share.max() < 1 or share.min() > 0 else ""))
        if hit.sum() > 1 and not one_price:
            order = np.lexsort((x[hit], cost[hit]))
            ax.plot(x[hit][order], est[hit][order], "-", color="black", lw=0.8, alpha=0.6)
    if one_price:
        ax.set_xlabel(f"rank by estimate (every model costs {unit}{cost[0]:g} per cell)")
    else:
        ax.set_xscale("log")
        ax.set_xlabel(f"cost per cell{f' ({unit})' if unit else ''}, log scale")
        ax.margins(x=0.08)
        ax.set_xlim(x.min() / 10 ** 0.15, x.max() * 10 ** 0.6)     # room for the names to the right
    ax.set_ylabel("mean score")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(textwrap.fill(title or "cost and accuracy", 95), fontsize=9)
    fig.tight_layout()
    if one_price:
        _labels(fig, ax, x, est, names, share)
    else:
        _label_columns(fig, ax, x, est, names, share, cost=cost)
    return _save(fig, path)


#: How far (in decades of the log cost axis) the models of one price are spread apart, so that each has
#: its own point and interval instead of one stacked line.
_DODGE_DECADES = 0.1


def _dodged(cost, est):
    """Each model's x: its cost, with the models of one price spread over `_DODGE_DECADES` around it, best
    estimate leftmost (the axis is logarithmic, so the spread looks the same at every price)."""
    x = cost.copy()
    for price in np.unique(cost):
        group = np.flatnonzero(cost == price)
        if len(group) > 1:
            rank = np.argsort(np.argsort(-est[group], kind="stable"), kind="stable")
            x[group] = price * 10 ** (_DODGE_DECADES * (rank / (len(group) - 1) - 0.5))
    return x


def _label_columns(fig, ax, x, y, names, share, *, cost) -> None:
    """The models of each price named in a column right of their points, spread so no two names overlap,
    each joined to its point by a thin line when moved; a price whose names do not all fit keeps the
    claimed models and the best estimates and says how many more there are."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    step = 7.5 * fig.dpi / 72            # one 6-point line, in pixels
    fits = max(int((frame.height - step) // step), 1)
    for price in np.unique(cost):
        group = np.flatnonzero(cost == price)
        keep = sorted(group, key=lambda k: (not share[k] > 0, -float(y[k])))
        hidden = len(keep) - fits if len(keep) > fits else 0
        keep = keep[:len(keep) - hidden] if hidden else keep
        points = {k: ax.transData.transform((x[k], y[k])) for k in keep}
        column = max(points[k][0] for k in keep) + 10
        order = sorted(keep, key=lambda k: points[k][1])
        spots = _spread([points[k][1] for k in order], step, frame.y0 + step / 2, frame.y1 - step / 2)
        for k, spot in zip(order, spots):
            px, py = points[k]
            moved = abs(spot - py) > step / 2
            ax.annotate(str(names[k])[:24], (x[k], y[k]), xycoords="data", xytext=(column - px, spot - py),
                        textcoords="offset pixels", fontsize=6, va="center", ha="left",
                        fontweight="bold" if share[k] > 0 else "normal",
                        arrowprops=dict(arrowstyle="-", lw=0.4, color="0.5", shrinkA=0, shrinkB=2) if moved else None)
        if hidden:
            ax.annotate(f"+{hidden} more at this price", (column, frame.y0 + step / 2), xycoords="figure pixels",
                        fontsize=6, va="center", style="italic")


def _spread(wanted, gap, low, high):
    """Positions as near ``wanted`` (ascending) as possible, at least ``gap`` apart, within [low, high]."""
    spots = list(np.clip(wanted, low, high))
    for k in range(1, len(spots)):
        spots[k] = max(spots[k], spots[k - 1] + gap)
    over = spots[-1] - high if spots else 0
    if over > 0:
        spots = [s - over for s in spots]
        for k in range(len(spots) - 2, -1, -1):
            spots[k] = min(spots[k], spots[k + 1] - gap)
    return spots


def _labels(fig, ax, x, y, names, share) -> None:
    """Write each model's name beside its point where it fits: the claimed models first, then by
    estimate; a name that would overlap one already written, or leave the axes, is left out (a name
    near the right edge is written to the left of its point)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    placed = []
    for i in sorted(range(len(y)), key=lambda k: (not share[k] > 0, -float(y[k]))):
        px, py = ax.transData.transform((x[i], y[i]))
        right = px > frame.x0 + 0.75 * frame.width
        text = ax.annotate(str(names[i])[:24], (x[i], y[i]), fontsize=6, xytext=(-4 if right else 4, 2),
                           textcoords="offset points", ha="right" if right else "left",
                           fontweight="bold" if share[i] > 0 else "normal")
        box = text.get_window_extent(renderer)
        inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
        if (not inside and share[i] <= 0) or any(box.overlaps(other) for other in placed):
            if share[i] <= 0:
                text.remove()
                continue
        placed.append(box)


def budget_to_target_bars(panels: dict, path, target: float = 0.95):
    """Budget to reach ``target`` accuracy per method (bootstrap interval), one panel per setting.

    ``panels``: ``{setting name: {method: metrics.budget_to_target(...) dict}}``. Bars of
    methods after the first (the baseline) carry their savings relative to it.
    """
    names = list(panels)
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names) + 0.6, 3.6), dpi=120, squeeze=False)
    for ax, name in zip(axes[0], names):
        found = panels[name]
        methods = list(found)
        base = found[methods[0]]["budget"]
        for x, k in enumerate(methods):
            b = found[k]["budget"]
            height = b if np.isfinite(b) else 0.0
            lo, hi = found[k].get("low", np.nan), found[k].get("high", np.nan)
            err = [[max(height - lo, 0)], [max(hi - height, 0)]] if np.isfinite(lo) and np.isfinite(hi) else None
            ax.bar(x, height, color=COLORS.get(k), yerr=err, capsize=4, label=LABELS.get(k, k))
            if not np.isfinite(b):
                ax.text(x, 0, "not\nreached", ha="center", va="bottom", fontsize=8)
            elif k != methods[0] and np.isfinite(base):
                ax.text(x, height, f"{metrics.savings(b, base):+.0f}%", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(methods)), [LABELS.get(k, k) for k in methods], fontsize=8)
        ax.set_title(name, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel(f"budget to {target:.0%} accuracy (cells)")
    fig.tight_layout()
    return _save(fig, path)


def effective_budget_plot(results, path):
    """Budget each method needs to match the first result's accuracy at each budget (the baseline, e.g.
    UCB-E: the diagonal)."""
    base, *others = results
    budgets = metrics.budget_grid(base, 60)
    fig, ax = plt.subplots(figsize=(5.2, 4.2), dpi=120)
    ax.plot(budgets, budgets, color=COLORS.get(base.method), lw=2, label=LABELS.get(base.method, base.method))
    for res in others:
        eff = metrics.effective_budget(res, base, budgets)
        ax.plot(budgets, eff, color=COLORS.get(res.method), lw=2, label=LABELS.get(res.method, res.method))
    ax.set_xlabel(f"{LABELS.get(base.method, base.method)} budget (cells)")
    ax.set_ylabel("budget needed for the same accuracy (cells)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    fig.tight_layout()
    return _save(fig, path)




def _budget(row, tag: str, end: str = "") -> float:
    value = row[f"budget_to_{tag}{end}"]
    return np.nan if value is None else value


def _sweep_line(sweep, rows, a: str, tag: str):
    """Budget to the target against the one varying parameter ``a``, with error bars."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120, layout="constrained")
    xs = np.arange(len(rows))
    ys = np.array([_budget(r, tag) for r in rows])
    lo = np.array([_budget(r, tag, "_low") for r in rows])
    hi = np.array([_budget(r, tag, "_high") for r in rows])
    ax.errorbar(xs, ys, yerr=[np.nan_to_num(ys - lo), np.nan_to_num(hi - ys)], fmt="o-",
                color=COLORS.get(sweep.method, "k"), capsize=4)
    for x, y in zip(xs, ys):
        if not np.isfinite(y):
            ax.annotate("not reached", (x, 0.5), xycoords=("data", "axes fraction"), ha="center", fontsize=8)
    ax.set_xticks(xs, [metrics.grid_value_text(r[a]) for r in rows])
    ax.set_xlabel(a)
    ax.set_ylabel(f"cells to {tag}% accuracy (initialization included)")
    return fig


def _heat_panel(ax, group, axes_values, tag: str, limits):
    """One heatmap panel: the budget of each (a, b) point, annotated with its interval."""
    (a, a_vals), (b, b_vals) = axes_values
    vmin, vmax = limits
    grid = np.full((len(b_vals), len(a_vals)), np.nan)
    for r in group:
        i, j = b_vals.index(r[b]), a_vals.index(r[a])
        grid[i, j] = _budget(r, tag)
        lo, hi = r[f"budget_to_{tag}_low"], r[f"budget_to_{tag}_high"]
        text = ("not\nreached" if not np.isfinite(grid[i, j]) else
                f"{grid[i, j]:,.0f}\n[{'-' if lo is None else f'{lo:,.0f}'}, "
                f"{'beyond' if hi is None else f'{hi:,.0f}'}]")
        dark = np.isfinite(grid[i, j]) and vmax > vmin and (grid[i, j] - vmin) / (vmax - vmin) > 0.6
        ax.text(j, i, text, ha="center", va="center", fontsize=6.5, color="white" if dark else "black")
    image = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis_r", vmin=vmin, vmax=vmax, aspect="auto",
                      origin="lower")
    ax.set_xticks(range(len(a_vals)), [metrics.grid_value_text(v) for v in a_vals])
    ax.set_yticks(range(len(b_vals)), [metrics.grid_value_text(v) for v in b_vals])
    ax.set_xlabel(a)
    ax.set_ylabel(b)
    return image


def _sweep_heatmaps(rows, varying, tag: str):
    """A heatmap over the first two varying parameters, one panel per combination of the rest."""
    a, b = varying[:2]
    rest = varying[2:]
    order = lambda v: -1 if v is None else v   # noqa: E731
    axes_values = ((a, sorted({r[a] for r in rows}, key=order)), (b, sorted({r[b] for r in rows}, key=order)))
    groups = {}
    for r in rows:
        groups.setdefault(tuple(r[c] for c in rest), []).append(r)
    fig, axes = plt.subplots(1, len(groups), figsize=(4.6 * len(groups) + 1, 4.2), dpi=120, squeeze=False,
                             layout="constrained")
    finite = [_budget(r, tag) for r in rows if np.isfinite(_budget(r, tag))]
    limits = (min(finite), max(finite)) if finite else (0, 1)
    image = None
    for ax, (key, group) in zip(axes[0], groups.items()):
        image = _heat_panel(ax, group, axes_values, tag, limits)
        if rest:
            ax.set_title(", ".join(f"{c} = {metrics.grid_value_text(v)}" for c, v in zip(rest, key)), fontsize=9)
    fig.colorbar(image, ax=axes[0].tolist(), label=f"cells to {tag}% accuracy")
    return fig


def sweep_figure(sweep, rows, path, target: float = 0.95):
    """Budget to ``target`` accuracy over a sweep, with bootstrap intervals.

    One varying parameter: budget against its values (error bars). Two or
    more: a heatmap over the first two, one panel per combination of the
    rest, each cell annotated with the budget and its interval ("not
    reached" where the target was never held within the budget).
    """
    tag = f"{target * 100:g}"
    varying = [a for a in sweep.axes if len({str(r[a]) for r in rows}) > 1] or list(sweep.axes[:1])
    fig = _sweep_line(sweep, rows, varying[0], tag) if len(varying) == 1 else _sweep_heatmaps(rows, varying, tag)
    fig.suptitle(f"{LABELS.get(sweep.method, sweep.method)}: budget to {tag}% accuracy over the sweep\n"
                 f"({sweep.results[0].reps} repetitions per point, 95% bootstrap intervals)", fontsize=9)
    return _save(fig, path)
