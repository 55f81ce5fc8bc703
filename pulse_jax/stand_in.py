"""A local, deterministic stand-in for an LLM evaluation API (examples and tests).

``score(model, example_ids)`` returns the scores of one of the built-in
benchmark's candidates, as a real scorer (API call, local inference, judge)
would. Offline and instant, so the live-selection example runs anywhere::

    python -m pulse_jax.stand_in models > models.txt
    python -m pulse_jax.stand_in train history.csv
    pulse-jax select --models models.txt --examples 1000 --budget 8000 \\
        --evaluate pulse_jax.stand_in:score --train history.csv --log run.db
"""
from __future__ import annotations

import functools
import sys

import numpy as np


@functools.lru_cache(maxsize=1)
def benchmark():
    from pulse_jax.synthetic import make_benchmark

    return make_benchmark(seed=0)


def models() -> list[str]:
    return list(benchmark().models)


def score(model: str, example_ids) -> list[float]:
    """Scores of ``model`` on ``example_ids`` (integers 0..999)."""
    bench = benchmark()
    row = bench.models.index(model)   # ValueError for an unknown model, as an API would refuse it
    return bench.scores[row, np.asarray(example_ids, dtype=int)].tolist()


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["models"]:
        print("\n".join(models()))
        return 0
    if argv[:1] in (["train"], ["candidates"]) and len(argv) == 2:
        from pulse_jax.fileio.data import ScoreMatrix, save_csv

        bench = benchmark()
        matrix, names = (bench.train, bench.train_models) if argv[0] == "train" else (bench.scores, bench.models)
        save_csv(ScoreMatrix(matrix.astype(float), tuple(names), tuple(str(j) for j in range(matrix.shape[1]))),
                 argv[1])
        return 0
    print("usage: python -m pulse_jax.stand_in models | train FILE.csv | candidates FILE.csv", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
