"""A local, deterministic stand-in for an LLM evaluation API (examples and tests).

``score(model, example_ids)`` returns the scores of one of the built-in
benchmark's candidates, as a real scorer (API call, local inference, judge)
would. Offline and instant, so the live-selection example runs anywhere::

    python -m pulse_jax.cli.stand_in models > models.txt
    python -m pulse_jax.cli.stand_in train history.csv
    pulse-jax select --models models.txt --examples 1000 --budget 8000 \\
        --evaluate pulse_jax.stand_in:score --train history.csv --log run.db
"""
from __future__ import annotations

import functools

import numpy as np


@functools.lru_cache(maxsize=1)
def benchmark():
    from pulse_jax.synthetic import make_benchmark

    return make_benchmark(seed=0)


def models() -> list[str]:
    return list(benchmark().models)


def check(models, example_ids) -> None:
    """Refuse, in one line and before anything runs, a model the stand-in does not have or an example
    id outside its 0..999 (``select`` calls a scorer's ``check`` before it compiles)."""
    from pulse_jax.errors import PulseInputError

    bench = benchmark()
    unknown = [m for m in models if m not in bench.models]
    if unknown:
        raise PulseInputError(f"the stand-in scorer has no model {unknown[0]!r}"
                              + (f" (nor {len(unknown) - 1} more)" if len(unknown) > 1 else "")
                              + f": its {len(bench.models)} models are {bench.models[0]} ... {bench.models[-1]} "
                              "(python -m pulse_jax.cli.stand_in models lists them)")
    n = bench.scores.shape[1]
    ids = list(range(int(example_ids))) if isinstance(example_ids, (int, np.integer)) else list(example_ids)
    bad = next((e for e in ids if not str(e).isdigit() or not 0 <= int(e) < n), None)
    if bad is not None:
        raise PulseInputError(f"the stand-in scorer has examples 0..{n - 1}; example {bad!r} is not one of them "
                              f"(give --examples {n} or fewer)")


def score(model: str, example_ids) -> list[float]:
    """Scores of ``model`` on ``example_ids`` (integers 0..999); a model or example it does not have is
    refused (`check`), as an API would refuse it, and no retry changes that."""
    check([model], example_ids)
    bench = benchmark()
    return bench.scores[bench.models.index(model), np.asarray(example_ids, dtype=int)].tolist()


#: Called by ``select`` on the candidates and examples before anything compiles.
score.check = check


if __name__ == "__main__":     # the files are written by the command line's module, not by this library one
    import sys

    sys.stderr.write("the stand-in's files: python -m pulse_jax.cli.stand_in models | train FILE.csv | "
                     "candidates FILE.csv\n")
    sys.exit(2)
