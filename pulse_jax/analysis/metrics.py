"""A simulation's results (`SimulationResult`) and the metrics over its repetitions (paper, Section 5).

All budgets are in cells, initialization included unless a function says otherwise.
"""
from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import numpy as np

from pulse_jax.engine import value_checks
from pulse_jax.engine.params import RunParams
from pulse_jax.errors import require

if TYPE_CHECKING:   # annotations only
    from pulse_jax.engine import BanditConfig, Plugins


@dataclasses.dataclass
class SimulationResult:
    """Repetitions of one method on one score matrix (NumPy arrays, leading axis = repetition).

    ``best[:, k]`` / ``spent[:, k]`` are the best guess (row index) and the
    cells spent after step ``k`` (``k = 0``: after initialization).
    """

    method: str
    config: BanditConfig
    seed: int
    true_means: np.ndarray     # (m,)
    best: np.ndarray           # (R, n_steps + 1)
    spent: np.ndarray          # (R, n_steps + 1), initialization included
    chosen: np.ndarray         # (R, n_steps), -1 = no pull
    estimates: np.ndarray      # (R, m)
    radius: np.ndarray         # (R, m)
    n_obs: np.ndarray          # (R, m)
    n_pulls: np.ndarray        # (R, m)
    seconds: float = 0.0             # wall time, compilation included
    compile_seconds: float = 0.0     # of which XLA compilation (near 0 when the disk cache has it)
    model_names: tuple[str, ...] | None = None
    cs_low: np.ndarray | None = None           # (R, m) running intersection of the confidence sequence
    cs_high: np.ndarray | None = None
    certified_spent: np.ndarray | None = None  # (R,) cells spent at the first certification (-1: never)
    certified_model: np.ndarray | None = None  # (R,) the model certified (-1: never)
    snapshot_cs: np.ndarray | None = None      # (R, K, m) CS half-widths at config.snapshot_budgets
    snapshot_paper: np.ndarray | None = None   # (R, K, m) the paper's radius there
    params: RunParams = RunParams()            # the traced numbers of the run (engine's and plug-ins')
    # With config.record_estimates: every step's estimates and confidence-sequence bounds, (R, n_steps, m).
    step_estimates: np.ndarray | None = None
    step_low: np.ndarray | None = None
    step_high: np.ndarray | None = None
    step_info: dict | None = None              # the estimator's per-step info, field -> (R, n_steps) array
    cs_seq_low: np.ndarray | None = None       # (R, m, C) each confidence sequence on its own (PULSE: raw, proxies)
    cs_seq_high: np.ndarray | None = None
    stopped: np.ndarray | None = None          # (R,) the stopping rule fired
    claimed: np.ndarray | None = None          # (R, m) what its claim named then (plugins.stop.holds checks it)
    money: np.ndarray | None = None            # (R, n_steps + 1) what the cells spent cost (cells without costs)
    cost: np.ndarray | None = None             # (m,) each model's mean cost per cell (None: no costs were given)
    plugins: Plugins | None = None             # estimator, sampling rule, stopping rule of the run

    def info(self, name: str) -> np.ndarray:
        """``(R, n_steps)``: one field of the estimator's per-step info (``step_info``), NaN where the
        estimator does not report it."""
        value = (self.step_info or {}).get(name)
        return np.asarray(value) if value is not None else np.full(np.shape(self.chosen), np.nan, np.float32)

    @property
    def stop(self):
        """The run's stopping rule (`plugins`'; the whole budget's for a result made without them, as a
        result read back from a file is)."""
        from pulse_jax import registry

        return self.plugins.stop if self.plugins is not None else registry.stopping_rule("budget")

    @property
    def lam(self) -> np.ndarray:
        """``(R, n_steps)``: the estimator's per-step ``lam`` (PULSE's lambda), NaN for one without."""
        return self.info("lam")

    @property
    def reps(self) -> int:
        return self.best.shape[0]

    #: Models whose true means differ from the best by at most this tie for the best. The means are
    #: float64 averages of float32 scores, so equal rows (or equal sums) give exactly equal means;
    #: 1e-9 only absorbs summation order, and is far below any gap of 1 / n_examples.
    TIE_TOLERANCE = 1e-9
    CS_TOLERANCE = 1e-5   # float32 bounds vs the float64 truth (see CS_TOLERANCE)

    @property
    def best_model(self) -> int:
        """The first best model (row index); see `best_models` for ties."""
        return int(np.argmax(self.true_means))

    @property
    def best_models(self) -> np.ndarray:
        """Every model tying for the best true mean (within `TIE_TOLERANCE`)."""
        return np.flatnonzero(self.true_means >= self.true_means.max() - self.TIE_TOLERANCE)

    @property
    def n_best(self) -> int:
        """How many models tie for the best (a guess of any of them is correct)."""
        return len(self.best_models)

    def is_best(self, models) -> np.ndarray:
        """Booleans: is each model index a best model? (-1, no guess, is not.)"""
        models = np.asarray(models)
        return (models >= 0) & np.isin(models, self.best_models)

    @property
    def populations(self) -> np.ndarray:
        """(m,) each model's number of scored examples (its benchmark; ragged when cells are missing)."""
        sizes = self.config.populations
        return np.full(self.config.n_models, self.config.n_examples) if sizes is None else np.asarray(sizes)

    def exhausted(self) -> np.ndarray:
        """(R, m) booleans: was every example of the model observed (its mean known exactly)?"""
        return self.n_obs >= self.populations

    # The metrics themselves live in `pulse_jax.analysis.metrics` (one home); these methods call them.

    def correct(self) -> np.ndarray:
        """(R, n_steps + 1) booleans: is the current guess a best model (`correct`)?"""
        return correct(self)

    def best_at_budget(self, budgets) -> np.ndarray:
        """(R, len(budgets)) best guess with at most ``b`` cells spent (`best_at_budget`)."""
        return best_at_budget(self, budgets)

    def accuracy_at_budget(self, budgets) -> tuple[np.ndarray, np.ndarray]:
        """Accuracy@budget and its standard error (`accuracy_at_budget`)."""
        return accuracy_at_budget(self, budgets)

    def coverage(self) -> np.ndarray:
        """(m,) coverage of the final paper intervals (`coverage`)."""
        return coverage(self)

    def cs_covers(self) -> np.ndarray:
        """(R, m) did each confidence sequence cover at every look (`cs_covers`)?"""
        return cs_covers(self)

    def cs_sequence_covers(self) -> np.ndarray:
        """(R, m, C) the same for each of a model's sequences (`cs_sequence_covers`)."""
        return cs_sequence_covers(self)

    def anytime_coverage(self) -> float:
        """Simultaneous anytime coverage (`anytime_coverage`)."""
        return anytime_coverage(self)

    def certification_coverage(self) -> float:
        """The event certification rests on (`certification_coverage`)."""
        return certification_coverage(self)

    def certification(self) -> dict:
        """Certified stopping: how often, how soon, how often wrong (`certification`)."""
        return certification(self)

    def claims(self) -> dict:
        """What the stopping rule claimed: how often, how soon, how often wrong (`claims`)."""
        return claims(self)

    def certificate(self, rep: int = 0) -> str:
        """Repetition ``rep``'s certificate in one line a paper can quote (the stopping rule's statement)."""
        return certificate(self, rep)


def correct(result: SimulationResult) -> np.ndarray:
    """(R, n_steps + 1) booleans: is the current guess a best model (ties count as correct)?"""
    return result.is_best(result.best)


def best_at_budget(result: SimulationResult, budgets) -> np.ndarray:
    """(R, len(budgets)) best guess with at most ``b`` cells spent (init included).

    Budgets below the initialization give -1 (no guess yet).
    """
    require(result.config.record_steps, "this run kept only its summary (BanditConfig(record_steps=False)): "
                                      "there is no best guess per budget; run with record_steps=True for curves")
    budgets = np.asarray(budgets)
    out = np.empty((result.reps, len(budgets)), dtype=np.int64)
    for r in range(result.reps):
        k = np.searchsorted(result.spent[r], budgets, side="right") - 1
        out[r] = np.where(k >= 0, result.best[r, np.maximum(k, 0)], -1)
    return out


def accuracy_at_budget(result: SimulationResult, budgets) -> tuple[np.ndarray, np.ndarray]:
    """Accuracy@budget and its standard error across repetitions."""
    hits = result.is_best(best_at_budget(result, budgets)).astype(np.float64)
    mean = hits.mean(axis=0)
    se = hits.std(axis=0, ddof=1) / np.sqrt(result.reps) if result.reps > 1 else np.zeros_like(mean)
    return mean, se


def coverage(result: SimulationResult) -> np.ndarray:
    """(m,) fraction of repetitions whose final paper interval (estimate +- radius) covers each mean.

    A model observed in full is known exactly and counts as covered: its
    float32 mean differs from the float64 truth by rounding only.
    """
    lo, hi = result.estimates - result.radius, result.estimates + result.radius
    inside = (lo <= result.true_means) & (result.true_means <= hi)
    return (inside | result.exhausted()).mean(axis=0)


#: float32 slack when comparing a confidence sequence with the float64 truth: the bounds are
#: ratios of float32 sums of <= n terms; 1e-5 is above their rounding at n <= 10^5 and far
#: below any width that matters (a CS half-width is >= 1e-3 before a model is exhausted).
CS_TOLERANCE = 1e-5


def cs_covers(result: SimulationResult) -> np.ndarray:
    """(R, m) booleans: did model i's confidence sequence cover its mean at *every* look?

    The stored bounds are the running intersection (max of the lower bounds,
    min of the upper ones over all looks), so they miss at the end exactly
    when some look missed. Naive-Pooling has none (all False).
    """
    if result.cs_low is None:
        return np.zeros(result.n_obs.shape, bool)
    tol = CS_TOLERANCE
    return (result.cs_low - tol <= result.true_means) & (result.true_means <= result.cs_high + tol)


def cs_sequence_covers(result: SimulationResult) -> np.ndarray:
    """(R, m, C) booleans: did each of a model's C confidence sequences (PULSE: the raw scores, then the
    AIPW proxies) cover its mean at every look, on its own? (All False without an interval.)"""
    if result.cs_seq_low is None or not np.isfinite(result.cs_seq_low).all():
        return np.zeros(result.n_obs.shape + (1,), bool)
    tol, mu = CS_TOLERANCE, result.true_means[None, :, None]
    return (result.cs_seq_low - tol <= mu) & (mu <= result.cs_seq_high + tol)


def anytime_coverage(result: SimulationResult) -> float:
    """Fraction of repetitions in which every model's confidence sequence covered its mean at every
    look: the simultaneous guarantee is that this is at least ``1 - delta``."""
    return float(cs_covers(result).all(axis=1).mean())


def certification_coverage(result: SimulationResult) -> float:
    """Fraction of repetitions in which every model's lower bound and a best model's upper bound
    held at every look: the event the certification guarantee rests on, at least ``1 - delta``
    whatever ``BanditParams.cs_simultaneous`` (``docs/confidence.md``). Off it, no wrong model
    can be certified."""
    if result.cs_low is None:
        return 0.0
    tol, mu = CS_TOLERANCE, result.true_means
    best = int(np.argmax(mu))
    lows = (result.cs_low - tol <= mu).all(axis=1)
    return float((lows & (mu[best] <= result.cs_high[:, best] + tol)).mean())


def certification(result: SimulationResult) -> dict:
    """Certified stopping: how often, how soon, how often wrong.

    ``cells`` are the budgets (initialization included) at which each
    repetition first certified a model; ``error_rate`` counts certified
    models that are not a best model, over all repetitions (the guarantee:
    at most ``delta``).
    """
    spent = np.asarray(result.certified_spent if result.certified_spent is not None else np.full(result.reps, -1))
    model = np.asarray(result.certified_model if result.certified_model is not None else np.full(result.reps, -1))
    done = spent >= 0
    wrong = done & ~result.is_best(model)
    return {"certified_fraction": float(done.mean()), "cells": spent[done],
            "median_cells": float(np.median(spent[done])) if done.any() else float("nan"),
            "error_rate": float(wrong.mean()), "errors": int(wrong.sum())}


def claims(result: SimulationResult) -> dict:
    """What the run's stopping rule claimed when it fired (epsilon-good, top-k, tie group, ...):
    ``stopped_fraction``, the ``cells`` each stopped repetition spent (initialization included), their
    median, and ``error_rate``: repetitions whose claim is false (``plugins.stop.holds``) over all
    repetitions -- at most ``delta`` for a valid rule."""
    stop = result.stop
    stopped = np.zeros(result.reps, bool) if result.stopped is None else np.asarray(result.stopped, bool)
    claimed = np.zeros((result.reps, result.true_means.shape[0]), bool) if result.claimed is None \
        else np.asarray(result.claimed, bool)
    own = result.params.stop
    wrong = np.array([bool(s) and not value_checks.check_holds(stop, c, result.true_means, own, result.cost)
                      for s, c in zip(stopped, claimed)])
    cells = result.spent[:, -1][stopped]
    return {"stop": stop.name, "stopped_fraction": float(stopped.mean()), "cells": cells,
            "median_cells": float(np.median(cells)) if stopped.any() else float("nan"),
            "mean_cells": float(cells.mean()) if stopped.any() else float("nan"),
            "error_rate": float(wrong.mean()), "errors": int(wrong.sum())}


def certificate(result: SimulationResult, rep: int = 0) -> str:
    """Repetition ``rep``'s claim as the stopping rule states it, with the run's delta."""
    stop = result.stop
    claimed = np.zeros(result.true_means.shape[0], bool) if result.claimed is None else result.claimed[rep]
    names = result.model_names or tuple(f"model {i}" for i in range(result.true_means.shape[0]))
    fired = result.stopped is not None and bool(result.stopped[rep])
    return stop.statement([names[i] for i in np.flatnonzero(claimed)] if fired else [],
                          float(result.params.delta), result.params.stop)


def budget_grid(result: SimulationResult, points: int = 50) -> np.ndarray:
    """Evenly spaced budgets from the end of initialization to the full budget."""
    cfg = result.config
    return np.unique(np.linspace(cfg.init_cells, cfg.budget, points).round().astype(np.int64))


def first_budget_reaching(accuracy: np.ndarray, budgets: np.ndarray, target: float) -> float:
    """Smallest budget from which accuracy stays >= target to the end (NaN if never).

    "Stays" avoids rewarding a curve that touches the target by chance and
    drops again; on a monotone curve it is the first crossing.
    """
    ok = np.asarray(accuracy) >= target
    if not ok[-1]:
        return float("nan")
    below = np.nonzero(~ok)[0]
    return float(budgets[0 if len(below) == 0 else below[-1] + 1])


class BudgetToTarget(dict):
    """What `budget_to_target` returns: a dict (``target``, ``budget``, ``low``, ``high``,
    ``level``, ``bandit_budget``, ``reached_fraction``) that prints as one line.

    ``budget`` is NaN when the accuracy never reaches the target; ``high`` is ``inf`` when more than
    ``level / 2`` of the bootstrap resamples do not reach it within the budget (printed "> budget";
    strict JSON writers such as ``provenance.clean_json`` turn it into ``null``).
    """

    def __str__(self) -> str:
        if not np.isfinite(self["budget"]):
            return (f"not reached within the budget ({self['reached_fraction']:.0%} of bootstrap resamples "
                    "reach it)")
        return (f"{self['budget']:,.0f} cells [{self['level']:.0%} bootstrap interval "
                f"{_cells(self['low'])}, {_cells(self['high'])}]")


def _cells(x: float) -> str:
    return f"{x:,.0f}" if np.isfinite(x) else ("> budget" if x > 0 else "n/a")


def budget_to_target(result: SimulationResult, target: float = 0.95, budgets=None, n_boot: int = 1000,
                     seed: int = 0, level: float = 0.95) -> BudgetToTarget:
    """Budget at which Accuracy@t reaches ``target``, with a bootstrap interval over repetitions
    (see `BudgetToTarget`)."""
    budgets = budget_grid(result, 200) if budgets is None else np.asarray(budgets)
    hits = result.is_best(result.best_at_budget(budgets)).astype(np.float64)
    point, lo, hi, reached = reaching_with_interval(hits, budgets, target, n_boot, seed, level)
    return BudgetToTarget(target=target, budget=point, low=lo, high=hi, level=level,
                          bandit_budget=point - result.config.init_cells if np.isfinite(point) else float("nan"),
                          reached_fraction=reached)


def reaching_with_interval(hits: np.ndarray, grid: np.ndarray, target: float, n_boot: int, seed: int,
                           level: float) -> tuple[float, float, float, float]:
    """``(point, low, high, reached fraction)``: the first ``grid`` value from which the mean of ``hits``
    (repetitions x grid) stays at or above ``target`` (`first_budget_reaching`), with a bootstrap
    interval over repetitions. A resample that never reaches the target needs more than the grid:
    +inf, so the lower end stays informative and the upper end reads "beyond"."""
    point = first_budget_reaching(hits.mean(0), grid, target)
    rng = np.random.default_rng(seed)
    reps = hits.shape[0]
    boot = np.array([first_budget_reaching(hits[rng.integers(0, reps, reps)].mean(0), grid, target)
                     for _ in range(n_boot)])
    alpha = (1 - level) / 2
    with np.errstate(invalid="ignore"):   # interpolating between two infinite resamples
        lo, hi = np.quantile(np.where(np.isfinite(boot), boot, np.inf), [alpha, 1 - alpha])
    lo, hi = (lo if np.isfinite(lo) else np.inf), (hi if np.isfinite(hi) else np.inf)
    return point, float(lo), float(hi), float(np.isfinite(boot).mean())


def first_step_reaching(accuracy: np.ndarray, target: float) -> float:
    """The first step whose accuracy is at least ``target`` (NaN if none): the paper's crossing rule."""
    hit = np.nonzero(np.asarray(accuracy) >= target)[0]
    return float(hit[0]) if len(hit) else float("nan")


def paper_budget_draws(hits: np.ndarray, batch_size: int, target: float, n_boot: int, seed: int = 0,
                       resamples: np.ndarray | None = None) -> np.ndarray:
    """Per bootstrap resample of the repetitions, the bandit cells (step x ``batch_size``) at the first
    step whose mean accuracy reaches ``target``; NaN for a resample that never does. ``hits`` is the
    (repetitions, steps + 1) correctness record, step 0 being the end of initialization."""
    hits = np.asarray(hits, np.float64)
    if resamples is None:
        resamples = np.random.default_rng(seed).integers(0, hits.shape[0], (n_boot, hits.shape[0]))
    return np.array([first_step_reaching(hits[r].mean(0), target) for r in resamples]) * batch_size


def paper_budget_to_target(result: SimulationResult, target: float = 0.95, n_boot: int = 1000,
                           seed: int = 0) -> dict:
    """The paper's budget-to-target (its ``make_budget_to_95_csvs.py``): *bandit* cells only, counted as
    step x B; per bootstrap resample of the repetitions the *first* step whose mean accuracy reaches
    ``target``; the mean over the resamples that reach it.

    It counts fewer cells than `budget_to_target` (no initialization; the accuracy need only
    touch the target, not stay above it), so the two must not be compared with each other.
    ``reached_fraction`` says how many resamples reach the target within the budget.
    """
    draws = paper_budget_draws(result.correct(), result.config.batch_size, target, n_boot, seed)
    reached = np.isfinite(draws)
    return {"target": target, "bandit_cells": float(np.nanmean(draws)) if reached.any() else float("nan"),
            "reached_fraction": float(reached.mean()), "n_boot": n_boot}


def paired_savings(method: SimulationResult, baseline: SimulationResult, target: float = 0.95, *,
                   n_boot: int = 1000, seed: int = 0, level: float = 0.95, metric: str = "paper") -> dict:
    """Savings of ``method`` against ``baseline`` (run with the same seed, so repetition ``r`` of both saw
    the same draws) with a paired bootstrap interval: each resample takes the same repetitions of both.

    ``metric="paper"``: the paper's bandit cells at the first crossing (`paper_budget_to_target`,
    the mean over resamples, as the paper reports it); ``"strict"``: this project's cells to stay at
    or above the target, initialization included (`budget_to_target`). Returns the point
    savings in percent, its interval, and the fraction of resamples where both reach the target.
    """
    require_same_design(method, baseline)
    require(metric in ("paper", "strict"), f"metric must be 'paper' or 'strict', got {metric!r}")
    resamples = np.random.default_rng(seed).integers(0, method.reps, (n_boot, method.reps))
    if metric == "paper":
        a = paper_budget_draws(method.correct(), method.config.batch_size, target, n_boot, resamples=resamples)
        b = paper_budget_draws(baseline.correct(), baseline.config.batch_size, target, n_boot, resamples=resamples)
        both = np.isfinite(a) & np.isfinite(b)
        point = _saved(np.mean(a[both]), np.mean(b[both])) if both.any() else float("nan")
    else:
        budgets = budget_grid(method, 200)
        ha = method.is_best(method.best_at_budget(budgets)).astype(np.float64)
        hb = baseline.is_best(baseline.best_at_budget(budgets)).astype(np.float64)
        a = np.array([first_budget_reaching(ha[r].mean(0), budgets, target) for r in resamples])
        b = np.array([first_budget_reaching(hb[r].mean(0), budgets, target) for r in resamples])
        both = np.isfinite(a) & np.isfinite(b)
        point = _saved(first_budget_reaching(ha.mean(0), budgets, target),
                       first_budget_reaching(hb.mean(0), budgets, target))
    a, b = a[both], b[both]
    # Both at 0 cells (the target met at initialization) is no saving; the baseline at 0 and the method
    # above it, an unbounded loss.
    ratio = 100.0 * np.where(b > 0, 1.0 - a / np.where(b > 0, b, 1.0), np.where(a > 0, -np.inf, 0.0))
    alpha = (1 - level) / 2
    lo, hi = (np.quantile(ratio, [alpha, 1 - alpha]) if both.any() else (np.nan, np.nan))
    return {"metric": metric, "target": target, "savings_pct": point, "low": float(lo), "high": float(hi),
            "level": level, "both_reached_fraction": float(both.mean())}


def _saved(method_budget: float, baseline_budget: float) -> float:
    """`savings`, 0 for equal budgets (both at 0 cells: the target met at initialization), and -inf for
    a method that needs cells where the baseline needs none."""
    if method_budget == baseline_budget:
        return 0.0
    if baseline_budget == 0 and np.isfinite(method_budget):
        return float("-inf")
    return savings(method_budget, baseline_budget)


def savings(method_budget: float, baseline_budget: float) -> float:
    """Percent of the baseline's budget saved (positive = fewer cells)."""
    if not (np.isfinite(method_budget) and np.isfinite(baseline_budget)) or baseline_budget <= 0:
        return float("nan")
    return 100.0 * (1.0 - method_budget / baseline_budget)


def paired_auc_difference(a: SimulationResult, b: SimulationResult, budgets=None) -> dict:
    """Paired comparison of two methods run with the same seed.

    Per repetition, the mean correctness over the budget grid (area under the
    accuracy curve); returns the mean difference ``a - b``, its SE and z, and
    ``identical`` (every repetition gave the same curve: z = 0, never infinite).
    A constant nonzero difference (SE 0) gives z = NaN.
    """
    require_same_design(a, b)
    budgets = budget_grid(a, 50) if budgets is None else np.asarray(budgets)
    auc_a = a.is_best(a.best_at_budget(budgets)).mean(axis=1)
    auc_b = b.is_best(b.best_at_budget(budgets)).mean(axis=1)
    d = auc_a - auc_b
    se = d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else 0.0
    if se > 0:
        return {"mean": float(d.mean()), "se": float(se), "z": float(d.mean() / se), "identical": False}
    # Every repetition gave the same difference: 0 when the methods agree on every repetition (no
    # difference, z = 0); otherwise a constant nonzero difference, which no standard error describes.
    same = bool(np.all(d == 0))
    return {"mean": float(d.mean()), "se": 0.0, "z": 0.0 if same else float("nan"), "identical": same}


def require_same_design(a: SimulationResult, b: SimulationResult) -> None:
    require(a.seed == b.seed and a.reps == b.reps,
            "paired comparison needs the same seed and number of repetitions")
    require(np.array_equal(a.true_means, b.true_means), "paired comparison needs the same score matrix")


def effective_budget(method: SimulationResult, baseline: SimulationResult, budgets=None) -> np.ndarray:
    """For each budget ``b``, the budget the method needs to match the baseline's accuracy at ``b``.

    NaN where the method never reaches that accuracy on the grid.
    """
    budgets = budget_grid(baseline, 100) if budgets is None else np.asarray(budgets)
    base, _ = baseline.accuracy_at_budget(budgets)
    acc, _ = method.accuracy_at_budget(budgets)
    return np.array([first_budget_reaching(acc, budgets, target) if target > 0 else budgets[0] for target in base])


def top_k_accuracy(result: SimulationResult, k: int, budgets) -> np.ndarray:
    """Fraction of repetitions whose guess is among the true top ``k`` models."""
    top = np.argsort(-result.true_means, kind="stable")[:k]
    return np.isin(result.best_at_budget(budgets), top).mean(axis=0)


def cells_to_certify(result: SimulationResult, n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> dict:
    """Median cells (initialization included) until a model is certified best, with a bootstrap interval.

    A repetition that never certified within the budget counts as needing more
    than the budget (+inf), so the median is finite only when more than half
    certified; ``error_rate`` is the fraction of all repetitions that certified
    a model that is not a best one (the guarantee: at most ``delta``).
    """
    cert = result.certification()
    spent = np.asarray(result.certified_spent if result.certified_spent is not None else np.full(result.reps, -1),
                       np.float64)
    cells = np.where(spent >= 0, spent, np.inf)
    rng = np.random.default_rng(seed)
    boot = np.array([np.median(cells[rng.integers(0, result.reps, result.reps)]) for _ in range(n_boot)])
    alpha = (1 - level) / 2
    with np.errstate(invalid="ignore"):
        lo, hi = np.quantile(boot, [alpha, 1 - alpha])
    finite = lambda x: float(x) if np.isfinite(x) else float("nan")   # noqa: E731
    return {"median": finite(np.median(cells)), "low": finite(lo), "high": finite(hi),
            "certified_fraction": cert["certified_fraction"], "error_rate": cert["error_rate"]}


def paired_certify_savings(method: SimulationResult, baseline: SimulationResult, n_boot: int = 1000, seed: int = 0,
                           level: float = 0.95) -> dict:
    """``1 - median(cells to certify, method) / median(..., baseline)`` in percent, with a paired bootstrap
    interval (each resample takes the same repetitions of both; run them with the same seed).

    Cells are counted as in `cells_to_certify` (a repetition that never certified needs more
    than the budget: +inf), so the saving is NaN when either median is infinite.
    """
    require_same_design(method, baseline)

    def cells(result):
        spent = np.asarray(result.certified_spent if result.certified_spent is not None
                           else np.full(result.reps, -1), np.float64)
        return np.where(spent >= 0, spent, np.inf)

    def saved(a, b):   # along the last axis; NaN where a median is beyond the budget
        ma, mb = np.median(a, axis=-1), np.median(b, axis=-1)
        with np.errstate(invalid="ignore"):
            return np.where(np.isfinite(ma) & np.isfinite(mb), 100.0 * (1.0 - ma / mb), np.nan)

    a, b = cells(method), cells(baseline)
    resamples = np.random.default_rng(seed).integers(0, method.reps, (n_boot, method.reps))
    alpha = (1 - level) / 2
    lo, hi = np.quantile(saved(a[resamples], b[resamples]), [alpha, 1 - alpha])
    return {"savings_pct": float(saved(a, b)), "low": float(lo), "high": float(hi)}


def grid_value_text(x) -> str:
    """A sweep grid value as tables and figures print it: a number, or ``adaptive`` for the NaN that means
    the adaptive choice (``fixed_lambda = nan``: PULSE's own lambda; None in the result rows)."""
    return "adaptive" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:g}"
