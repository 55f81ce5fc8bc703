"""What the commands print and write: progress (bars on a terminal, a line every 10 seconds otherwise), the
comparison table and results folder of a simulation, and the checks an output path passes first."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

from pulse_jax.cli.options import for_method, numbers_of
from pulse_jax.errors import PulseInputError, require


def bars_wanted(args):
    """Progress bars only for someone watching: never with ``--quiet`` or when stderr is not a terminal
    (``2> log`` gets no carriage returns); ``None`` lets the library decide the same way."""
    return False if getattr(args, "quiet", False) else sys.stderr.isatty()


#: Without a terminal, long work says how far it is at most this often (seconds).
PROGRESS_LINE_EVERY = 10.0


class Lines:
    """Progress for a log file or a pipe (no terminal): one plain line at the start (``first``, or the
    first report), then at most one a `PROGRESS_LINE_EVERY` seconds, and one when the work is done."""

    def __init__(self, first: str | None = None):
        self.last = -float("inf")             # without a first line, the first report is printed
        if first is not None:
            sys.stderr.write(first + "\n")
            sys.stderr.flush()
            self.last = time.monotonic()

    def __call__(self, text: str, done: bool = False) -> None:
        now = time.monotonic()
        if done or now - self.last >= PROGRESS_LINE_EVERY:
            self.last = now
            sys.stderr.write(text + "\n")
            sys.stderr.flush()


def simulation_progress(args, name: str):
    """``simulate``'s ``progress``: a bar on a terminal, lines otherwise (`Lines`), none with --quiet."""
    if getattr(args, "quiet", False):
        return False
    if sys.stderr.isatty():
        return True
    lines = Lines(f"  {name}: compiling, then running (a line every 10 s without a terminal)")
    return lambda done, total, seconds: lines(f"  {name}: {done:,}/{total:,} repetitions, {seconds:.0f} s",
                                              done == total)


def run_all(scores, V, config, methods, args, names, *, rules: tuple, cost=None):
    """Each of ``methods`` (``{name: estimator}``) simulated with ``rules`` (`options.rule_and_stop`)."""
    from pulse_jax.simulation import simulate

    results = {}
    for name, estimator in methods.items():
        plugins = for_method(config, estimator, rules, alone=len(methods) == 1)
        results[name] = simulate(scores, config, plugins, params=numbers_of(args, config, plugins),
                                 V=V if estimator.uses_predictions else None, reps=args.reps,
                                   seed=args.seed, chunk_size=args.chunk_size,
                                   progress=simulation_progress(args, name), model_names=names, cost=cost)
    return results


def say_missing(cand):
    """One line when the candidates' benchmarks are ragged (missing cells kept)."""
    missing = np.isnan(cand.scores)
    if missing.any():
        sizes = (~missing).sum(axis=1)
        print(f"note: {int(missing.sum()):,} of {missing.size:,} candidate cells are missing (empty, nan or NA); each model is judged "
              f"on the examples it has a score for ({sizes.min():,}-{sizes.max():,} per model). "
              "--missing drop-examples or drop-models gives a common example set")


def say_ties(result):
    """One line when several models tie for the best true mean (a guess of any counts as correct)."""
    if result.n_best > 1:
        names = [result.model_names[i] if result.model_names else f"row {i}" for i in result.best_models]
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        print(f"note: {result.n_best} models tie for the best true mean ({shown}); a guess of any of them "
              "counts as correct")


def finish(results, out, title, inputs=()):
    from pulse_jax.analysis import results as written

    say_ties(next(iter(results.values())))
    print(written.comparison_table(results))
    paths = written.write_results(results, out, title=title, inputs=inputs)
    for method, r in results.items():
        print(f"  {method:<6} {r.reps} repetitions in {r.seconds:.1f} s (of which compilation {r.compile_seconds:.1f} s)")
    print(f"results: {paths['summary']}  plot: {paths['plot']}  provenance: {paths['provenance']}")


def check_out_dir(path, force: bool = False, option="--out") -> None:
    """The results directory, checked before any computation (`pulse_jax.fileio.files.check_out_dir`)."""
    from pulse_jax.fileio import files

    files.check_out_dir(path, force, option, "--force")


def hash_inputs(*paths) -> list[dict]:
    """The input files' provenance records, taken now, as they are read."""
    from pulse_jax.fileio import provenance

    return provenance.hash_inputs(*paths)


def check_writable_file(path: str, option: str) -> None:
    """Before any computation: ``path`` can be written (its folder exists or can be made, and is writable)."""
    out = Path(path)
    require(not out.is_dir(), f"{option} {out}: is a directory; give a file name")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise PulseInputError(f"{option} {out}: cannot create its folder {out.parent} ({err.strerror or err})") from None
    require(os.access(out.parent, os.W_OK), f"{option} {out}: its folder {out.parent} is not writable")
