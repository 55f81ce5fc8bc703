"""``pulse-jax tune``: the factorization's hyperparameters by K-fold cross-validation (1-SE rule)."""
from __future__ import annotations

import sys

from pulse_jax.cli.inputs import number_list, say_missing_history
from pulse_jax.cli.options import HelpFormatter
from pulse_jax.cli.output import Lines, bars_wanted, check_writable_file
from pulse_jax.errors import require
from pulse_jax.fileio import files

DEFAULT_RANKS = "4,8,16,32"


def add(sub) -> None:
    tune = sub.add_parser("tune", formatter_class=HelpFormatter,
                          help="choose the factorization's hyperparameters by cross-validation (1-SE)",
                          description="K-fold cross-validation of the stage-0 factorization over the observed "
                                      "cells of the train matrix; the 1-SE rule picks the simplest good setting.")
    tune.add_argument("--train", required=True, help="historical models' scores (CSV/NPZ, missing cells allowed)")
    tune.add_argument("--out", required=True, help="JSON file for `simulate --hparams`")
    tune.add_argument("--force", action="store_true", help="write over an existing --out file")
    tune.add_argument("--ranks", default=DEFAULT_RANKS, help="comma-separated ranks to try (the default: those the "
                                                              "history allows)")
    tune.add_argument("--lams", default="0.001,0.01,0.1", help="comma-separated L2 weights to try")
    tune.add_argument("--lrs", default="0.05", help="comma-separated Adam learning rates to try")
    tune.add_argument("--epochs", default="150,300", help="comma-separated numbers of full-batch Adam steps")
    tune.add_argument("--folds", type=int, default=5, help="cross-validation folds (over the observed cells)")
    tune.add_argument("--seed", type=int, default=0, help="random seed of the folds and the fits")


def run(args) -> None:
    from pulse_jax import tuning      # imports JAX only to fit, after `tuning.check_grid`
    from pulse_jax.fileio import data

    from pulse_jax.stats.seeds import check_seed

    check_seed(args.seed, "--seed")
    check_writable_file(args.out, "--out")
    require(args.force or not files.exists(args.out), f"--out {args.out}: exists; pass --force to write over it")
    train = data.load(args.train)
    data.check_history(train)       # two models at least, none without a score
    say_missing_history(train, "--train")
    grid = {"rank": number_list(args.ranks, "ranks", int), "lam": number_list(args.lams, "lams"),
            "lr": number_list(args.lrs, "lrs"), "epochs": number_list(args.epochs, "epochs", int)}
    limit = min(train.scores.shape)
    if args.ranks == DEFAULT_RANKS and max(grid["rank"]) > limit:   # the default grid, cut to what the history allows
        kept = [r for r in grid["rank"] if r <= limit] or [limit]
        print(f"note: --ranks {DEFAULT_RANKS} (the default) needs at least {max(grid['rank'])} historical models and "
              f"examples; --train has {train.scores.shape[0]} x {train.scores.shape[1]}, so ranks "
              f"{','.join(map(str, kept))} are tried", file=sys.stderr)
        grid["rank"] = kept

    tuning.check_grid(train.scores, grid, args.folds)
    lines = None if getattr(args, "quiet", False) or sys.stderr.isatty() else Lines()

    def progress(done, total):
        if bars_wanted(args):
            sys.stderr.write(f"\r  cross-validation: {done}/{total} settings" + ("\n" if done == total else ""))
            sys.stderr.flush()
        elif lines is not None:
            lines(f"  cross-validation: {done}/{total} settings", done == total)

    result = tuning.cross_validate(train.scores, grid, folds=args.folds, seed=args.seed, progress=progress)
    tuning.save_hparams(result, args.out)
    print(f"{'rank':>5} {'lam':>7} {'lr':>6} {'epochs':>6} {'held-out BCE':>14}")
    for row in sorted(result["table"], key=lambda r: r["loss"])[:10]:
        print(f"{row['rank']:>5} {row['lam']:>7g} {row['lr']:>6g} {row['epochs']:>6} "
              f"{row['loss']:>8.4f} +- {row['se']:.4f}")
    print(f"chosen by the 1-SE rule: rank {result['rank']}, lam {result['lam']}, lr {result['lr']}, "
          f"epochs {result['epochs']} -> {args.out}")
