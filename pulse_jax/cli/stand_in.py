"""``python -m pulse_jax.cli.stand_in``: the built-in stand-in "LLM"'s files for trying ``select`` offline
(its model names, its history, its candidates' full scores; `pulse_jax.stand_in`)."""
from __future__ import annotations

import sys

from pulse_jax.cli.app import quiet_stdout
from pulse_jax.stand_in import benchmark, models


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["models"]:
        try:
            print("\n".join(models()))
        except BrokenPipeError:     # the reader went away (``| head``): what it wanted was written
            quiet_stdout()
        return 0
    if argv[:1] in (["train"], ["candidates"]) and len(argv) == 2:
        from pulse_jax.fileio.data import ScoreMatrix, save_csv

        bench = benchmark()
        matrix, names = (bench.train, bench.train_models) if argv[0] == "train" else (bench.scores, bench.models)
        save_csv(ScoreMatrix(matrix.astype(float), tuple(names), tuple(str(j) for j in range(matrix.shape[1]))),
                 argv[1])
        return 0
    print("usage: python -m pulse_jax.cli.stand_in models | train FILE.csv | candidates FILE.csv", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
