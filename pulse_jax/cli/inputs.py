"""Reading what the commands are given: example embeddings or a train split (side information),
text files of names, comma-separated number lists."""
from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import numpy as np

from pulse_jax.errors import PulseInputError, require


def one_side_information(args) -> None:
    """``--embeddings`` is V itself: ``--train`` / ``--hparams`` (what V would be fitted from) beside it
    would be ignored, so they are refused."""
    extra = [o for o, v in (("--train", args.train), ("--hparams", getattr(args, "hparams", None))) if v]
    require(not (args.embeddings and extra), f"--embeddings gives the example embeddings directly, so {' and '.join(extra)} "
                                             "would be ignored; give --embeddings, or --train (with --hparams)")


def check_side_information(args, cand, n) -> None:
    """``--embeddings`` / ``--train`` checked against the candidates without fitting anything."""
    from pulse_jax.fileio import data

    one_side_information(args)
    if args.embeddings:
        load_embeddings(args.embeddings, cand, n)
    if args.train:
        train = data.align_train(cand, data.load(args.train))
        rank = getattr(args, "rank", None)
        given = rank is not None and "rank" not in getattr(args, "defaulted", ("rank",))
        require(not given or rank <= min(train.scores.shape),
                f"--rank {rank}: --train {args.train} has {train.scores.shape[0]} models x {train.scores.shape[1]} "
                f"examples, so the rank is at most {min(train.scores.shape)}")


def load_embeddings(path, cand, n):
    path = Path(path)
    require(path.is_file(), f"{path}: no such file")
    try:
        V = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise PulseInputError(f"--embeddings {path}: not a .npy array file "
                              f"({str(err).splitlines()[0] if str(err) else type(err).__name__})") from None
    require(isinstance(V, np.ndarray) and V.dtype.kind in "biuf", f"--embeddings {path}: expected a numeric .npy array")
    require(V.ndim == 2 and V.shape[0] == n,
            f"{path}: embeddings must have shape ({n}, rank) to match {cand.source}, got {V.shape}")
    require(V.shape[1] >= 1, f"--embeddings {path}: the embeddings have rank 0 (shape {V.shape}); give at least one "
                             "column")
    require(np.isfinite(V).all(), f"--embeddings {path}: contains NaN or inf")
    return V


def side_information(args, cand, n):
    """V from --embeddings, or fitted on --train (aligned to the candidates' examples)."""
    from pulse_jax.fileio import data

    one_side_information(args)
    if args.embeddings:
        return load_embeddings(args.embeddings, cand, n)
    train = data.align_train(cand, data.load(args.train))
    say_missing_history(train, "--train")
    from pulse_jax.stats import factorization     # JAX, once the history is checked

    rank, settings = fit_rank(args, train.scores.shape), factorization.DEFAULT_STAGE0
    if getattr(args, "hparams", None):
        from pulse_jax import tuning

        rank, settings = tuning.load_hparams(args.hparams)
    return factorization.fit_example_embeddings(train.scores, rank=rank, settings=settings, seed=args.seed)


def say_missing_history(train, option: str) -> None:
    """One line when the historical scores have missing cells (empty, ``nan`` or ``NA`` in a CSV): the fit
    uses the cells present, and the user learns that the file has holes."""
    import numpy as np

    missing = np.isnan(train.scores)
    if missing.any():
        print(f"pulse-jax: note: {option} {train.source}: {int(missing.sum()):,} of {missing.size:,} cells are missing "
              "(empty, nan or NA); the fit uses the cells present", file=sys.stderr)


def fit_rank(args, shape) -> int:
    """The embeddings' rank: the default is capped at what the history allows (with a note); a rank
    given with ``--rank`` is used as given (and refused, naming the limit, when too large)."""
    limit = min(shape)
    if args.rank > limit and "rank" in getattr(args, "defaulted", ()):
        print(f"pulse-jax: note: --rank {args.rank} (the default) needs at least {args.rank} historical models; "
              f"--train has {shape[0]} models x {shape[1]} examples, so rank {limit} is used", file=sys.stderr)
        return limit
    return args.rank


def read_lines(path: str, what: str) -> list[str]:
    p = Path(path)
    require(p.exists(), f"{what} {path}: no such file")
    require(p.is_file(), f"{what} {path}: is not a file")
    try:
        text = p.read_text(encoding="utf-8-sig")     # a byte-order mark is not part of the first name
    except OSError as err:
        raise PulseInputError(f"{what} {path}: cannot read it ({err.strerror or err})") from None
    except UnicodeDecodeError:
        raise PulseInputError(f"{what} {path}: not a UTF-8 text file with one entry per line") from None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    require(lines, f"{what} {path}: the file is empty")
    return lines


def number_list(text: str, name: str, kind=float) -> tuple:
    try:
        values = tuple(kind(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise PulseInputError(f"--{name}: expected comma-separated numbers, got {text!r}") from None
    require(values, f"--{name}: no value given")
    return values


def costs_of(args, models, examples, scores):
    """``--cost FILE`` for these candidates (None without it); ``--cheapest`` / ``--front`` need it."""
    from pulse_jax.fileio.costs import load_costs

    wants = [flag for flag, name in (("--cheapest", "cheapest"), ("--front", "front"))
             if getattr(args, name, None) is not None]
    stop = getattr(args, "stop", None)
    if isinstance(stop, str) and stop.split("(")[0] in ("cheapest_within", "cost_front"):
        wants.append(f"--stop {stop}")
    if getattr(args, "cost", None) is None:
        require(not wants, f"{wants[0] if wants else ''} ranks the models by cost: pass --cost FILE ('model,cost' rows)")
        return None
    return load_costs(args.cost, list(models), list(examples), scores)
