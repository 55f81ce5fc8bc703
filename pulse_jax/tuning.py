"""Hyperparameters of the stage-0 factorization by K-fold cross-validation with the 1-SE rule.

Folds partition the *observed* cells of the train matrix at random. For each
setting (rank, lam, learning rate, epochs) the model is fitted on K-1 folds
and scored by the mean BCE on the held-out fold; the folds of one setting run
as one ``vmap``-ed program, and lam, learning rate and epochs are traced, so
each rank compiles once. The 1-SE rule (Friedman, Hastie & Tibshirani 2010)
keeps the simplest setting whose mean held-out loss is within one standard
error of the best: the lowest rank, then the strongest regularisation, then
the fewest epochs.

JAX is imported by the functions that fit (`cross_validate`, `load_hparams`), not with the module,
so ``pulse-jax tune`` refuses a wrong grid (`check_grid`) before it loads JAX.
"""
from __future__ import annotations

import functools
import itertools
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pulse_jax.errors import PulseInputError, require
from pulse_jax.stats.seeds import seed_key

if TYPE_CHECKING:
    from pulse_jax.stats.factorization import FitSettings

#: The most full-batch Adam steps a setting may take (the step counter is a 32-bit integer, and a
#: million steps on the whole history is already hours).
MAX_EPOCHS = 1_000_000

DEFAULT_GRID = {"rank": (4, 8, 16, 32), "lam": (0.001, 0.01, 0.1), "lr": (0.05,), "epochs": (150, 300)}


@functools.lru_cache(maxsize=8)
def _fold_losses(rank: int, folds: int):
    """jit(vmap over folds) of fit-then-score, for one rank."""
    import jax
    import jax.numpy as jnp
    import optax

    from pulse_jax.stats import factorization

    def one_fold(key, scores, fit_mask, test_mask, setting):
        # setting = (lam, lr, epochs), traced: one compilation serves the whole grid of a rank.
        lam, lr, epochs = setting
        U, V = factorization.fit(key, scores, fit_mask, rank, factorization.FitSettings(epochs, lam, optax.adam(lr)))
        return factorization.masked_bce(U @ V.T, scores, test_mask) / jnp.maximum(jnp.sum(test_mask), 1)

    return jax.jit(jax.vmap(one_fold, in_axes=(None, None, 0, 0, None)))


def check_grid(train, grid: dict | None = None, folds: int = 5) -> dict:
    """The grid over `DEFAULT_GRID` (``grid``'s values in place of its defaults), every value and
    ``folds`` checked against ``train`` (NaN = missing); a wrong one refused in one line."""
    grid = {**DEFAULT_GRID, **(grid or {})}
    train = np.asarray(train, np.float32)
    require(train.ndim == 2, f"train must be 2-D, got shape {train.shape}")
    observed = int(np.sum(~np.isnan(train)))
    require(observed >= 2 * folds, f"train has {observed} observed cells; too few for {folds} folds")
    require(folds >= 2, f"folds must be >= 2, got {folds}")
    for rank in grid["rank"]:
        require(1 <= rank <= min(train.shape), f"grid rank {rank} is not allowed for a {train.shape} train matrix")
    for name, ok, rule in (("lam", lambda v: v >= 0, ">= 0"), ("lr", lambda v: v > 0, "> 0"),
                           ("epochs", lambda v: 1 <= v <= MAX_EPOCHS and float(v) == int(v),
                            f"a whole number from 1 to {MAX_EPOCHS:,}")):
        for value in grid[name]:
            require(np.isfinite(value) and ok(value), f"grid {name} {value!r} is out of range; it must be {rule}")
    return grid


def cross_validate(train, grid: dict | None = None, folds: int = 5, seed: int = 0, progress=None) -> dict:
    """Cross-validate the grid on ``train`` (NaN = missing); return the table and the 1-SE choice."""
    import jax.numpy as jnp

    grid = check_grid(train, grid, folds)
    train = np.asarray(train, np.float32)
    observed = ~np.isnan(train)
    fold_of = np.random.default_rng(seed).integers(0, folds, size=train.shape)
    test_masks = np.stack([observed & (fold_of == k) for k in range(folds)])
    fit_masks = observed[None] & ~test_masks
    scores = jnp.asarray(np.nan_to_num(train))
    key = seed_key(seed)
    rows = []
    settings = list(itertools.product(grid["rank"], grid["lam"], grid["lr"], grid["epochs"]))
    for k, (rank, lam, lr, epochs) in enumerate(settings):
        losses = np.asarray(_fold_losses(int(rank), folds)(key, scores, jnp.asarray(fit_masks), jnp.asarray(test_masks),
                                                            (jnp.float32(lam), jnp.float32(lr), jnp.int32(epochs))))
        rows.append({"rank": int(rank), "lam": float(lam), "lr": float(lr), "epochs": int(epochs),
                     "loss": float(losses.mean()), "se": float(losses.std(ddof=1) / np.sqrt(folds)),
                     "fold_losses": losses.tolist()})
        if progress:
            progress(k + 1, len(settings))
    finite = [r for r in rows if np.isfinite(r["loss"])]    # a fit that diverged (lr too large) has none
    require(finite, f"every fit diverged (held-out loss not finite; e.g. lr {rows[0]['lr']:g}); give smaller "
                    "learning rates")
    best = min(finite, key=lambda r: r["loss"])
    within = [r for r in finite if r["loss"] <= best["loss"] + best["se"]]
    chosen = min(within, key=lambda r: (r["rank"], -r["lam"], r["epochs"], r["lr"]))
    return {"rank": chosen["rank"], "lam": chosen["lam"], "lr": chosen["lr"], "epochs": chosen["epochs"],
            "rule": "1-SE", "folds": folds, "seed": seed, "best": {k: best[k] for k in ("rank", "lam", "lr", "epochs",
                                                                                          "loss", "se")},
            "table": rows}


def save_hparams(result: dict, path) -> None:
    from pulse_jax.fileio.files import write_atomically

    write_atomically(path, json.dumps(result, indent=2))


def load_hparams(path) -> tuple[int, FitSettings]:
    """``(rank, stage-0 settings)`` from a file written by `save_hparams`."""
    path = Path(path)
    require(path.is_file(), f"{path}: no such file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        require(isinstance(data, dict), f"{path}: not a hyperparameter file (a JSON object with rank, lam, lr, epochs)")
        values = {key: data[key] for key in ("rank", "epochs", "lr", "lam")}
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError, KeyError) as err:
        raise PulseInputError(f"{path}: not a hyperparameter file (needs rank, lam, lr, epochs): {err}"[:300]) from None
    for key, kind, low in (("rank", int, 1), ("epochs", int, 1), ("lr", float, None), ("lam", float, 0.0)):
        value = values[key]
        number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        ok = number and (kind is float or float(value).is_integer())
        ok = ok and (value > 0 if low is None else value >= low)
        require(ok, f"{path}: {key} is {value!r}; it must be "
                    + ("a positive number" if low is None else f"{'a whole number' if kind is int else 'a number'} "
                                                               f">= {low:g}"))
    from pulse_jax.stats import factorization

    return int(values["rank"]), factorization.adam_settings(int(values["epochs"]), float(values["lr"]),
                                                            float(values["lam"]))

