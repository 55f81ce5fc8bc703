"""What the benchmark scripts share: where the repository, the shared data and the published results
are, the command-line options most scripts take, and the real data sets split as every study splits
them.

A script in a group folder (``speed/``, ``statistics/``, ...) imports this module after putting
``benchmarks/`` on ``sys.path``::

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import common
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

#: The repository, the paper-scale factor files shared beside it (docs/data.md), the published results.
ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "docs" / "benchmarks"
#: The factor file of the paper's MMLU-Pro setting (1,000 x 12,032, rank 100).
FACTORS = SHARED / "openllm_v2_mmlu_pro_factors.npz"
#: The real score matrices, by the name the studies give them: shipped with the package
#: (`pulse_jax.datasets`, sources and licences in docs/data.md), so no study skips them.
REAL_FILES = {"cruxeval_o": "cruxeval_o.csv", "chembench": "chembench.csv"}

#: The options many scripts take: name -> (type, help). A script names the ones it takes, with its defaults.
OPTIONS = {
    "reps": (int, "repetitions per configuration"),
    "seed": (int, "base seed"),
    "rank": (int, "rank of the example embeddings fitted on the train split"),
    "delta": (float, "intervals hold with probability 1 - delta"),
    "batch_size": (int, "examples per pull"),
    "refit_every": (int, "bandit steps between refits"),
    "data": (str, "comma-separated data sets: builtin, cruxeval_o, chembench"),
    "methods": (str, "comma-separated estimators"),
    "models": (int, "candidate models"),
    "out": (str, "where the JSON goes (a .md table is written beside it)"),
}


def floor_cells(scores, delta: float = 0.05, first_look: int = 8) -> float:
    """The finite-population information floor of a 0/1 matrix's best-model claim
    (`pulse_jax.stats.information_floor`): the cells no delta-correct method can do without."""
    from pulse_jax.stats.information_floor import information_floor

    return information_floor(scores, delta, first_look).cells


def cells_columns(row: dict, floor: float) -> str:
    """A certification study's row as table cells: mean cells (SE) | cells / floor."""
    return f"{row['mean_cells']:,.0f} ({row['se_cells']:,.0f}) | {row['mean_cells'] / floor:.2f}x"


def certified_columns(row: dict, reps: int) -> str:
    """A certification study's row as table cells: certified of the repetitions | wrong certificates."""
    return f"{row['certified']}/{reps} | {row['wrong']}"


def certified_counts(certified_model, scores) -> dict:
    """``{"certified": runs that certified a model, "wrong": runs that certified one whose true mean (a row
    mean of ``scores``) is not the best}`` from a result's ``certified_model`` (-1: none)."""
    means = np.asarray(scores).mean(1)
    best = set(np.flatnonzero(means >= means.max() - 1e-9).tolist())
    certified = np.asarray(certified_model)
    return {"certified": int((certified >= 0).sum()), "wrong": int(sum(int(c) >= 0 and int(c) not in best for c in certified))}


def shipped_study(argv, doc: str, *, script: str, title: str, study, table, reps: int = 100) -> int:
    """The ``main`` of a study run on each of `shipped_problems`: ``study(name, scores, V, reps, seed)`` per
    matrix, resumable (`study_each`), the table printed at the end."""
    p = parser(doc, reps=reps, seed=0, rank=16, out=f"results/{script}.json")
    args = p.parse_args(argv)

    def run(name, make):
        scores, V = make()
        return study(name, scores, V, args.reps, args.seed)

    done = study_each(shipped_problems(args.rank), args.out, title,
                      f"python benchmarks/statistics/{script}.py --reps {args.reps} --out {args.out}", run, table)
    print(table(done))
    return 0


def parser(doc: str, **defaults) -> argparse.ArgumentParser:
    """An argument parser described by the first paragraph of ``doc`` with each named common option
    (`OPTIONS`) at the given default, e.g. ``parser(__doc__, reps=200, seed=0, out="x.json")``."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in defaults.items():
        kind, text = OPTIONS[name]
        p.add_argument("--" + name.replace("_", "-"), type=kind, default=default, help=f"{text} (default: {default})")
    return p


def real_split(name: str, seed: int = 0):
    """``(train, candidates)`` of a real data set split as every study splits it (`pulse_jax.datasets.split`,
    which is `pulse_jax.fileio.data.split_models`)."""
    from pulse_jax import datasets

    return datasets.split(name, seed=seed)


def datasets(rank: int, names=("builtin", *REAL_FILES)):
    """``name -> (scores, V)``: the candidates and embeddings fitted on a train split (absent files skipped)."""
    import pulse_jax as pj

    out = {}
    for name in names:
        if name == "builtin":
            bench = pj.make_benchmark(seed=0)
            out[name] = (bench.scores, np.asarray(pj.fit_example_embeddings(bench.train, rank=rank)))
        elif (split := real_split(name)) is not None:
            train, cand = split
            out[name] = (cand.scores, np.asarray(pj.fit_example_embeddings(train.scores, rank=rank)))
    return out


def shipped_problems(rank: int) -> dict:
    """``name -> make``, each ``make()`` giving ``(scores, V)`` when called: the built-in live example (the
    stand-in's 40 x 1,000, embeddings fitted on its history) and the shipped real matrices (embeddings
    fitted on their train split, at most as many dimensions as train models: ChemBench has 11)."""
    import pulse_jax as pj
    from pulse_jax import stand_in

    def live():
        bench = stand_in.benchmark()
        return bench.scores, np.asarray(pj.fit_example_embeddings(bench.train, rank=rank))

    def real(name):
        train, cand = real_split(name)
        return cand.scores, np.asarray(pj.fit_example_embeddings(train.scores, rank=min(rank, *train.scores.shape)))

    return {"live example": live, **{name: (lambda name=name: real(name)) for name in REAL_FILES}}


def study_each(problems: dict, out, title: str, command: str, run, table) -> dict:
    """``run(name, make)`` for each of ``problems`` (``name -> make``) that ``out``'s JSON does not hold yet,
    the JSON and a Markdown page (``title``, the ``command``, ``table(done)``) rewritten after each, so an
    interrupted study resumes where it stopped; returns every entry."""
    import json
    from pathlib import Path

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = json.loads(out.read_text()) if out.is_file() else {}
    for name, make in problems.items():
        if name in done:
            continue
        done[name] = run(name, make)
        out.write_text(json.dumps(done, indent=2))
        out.with_suffix(".md").write_text(f"# {title}\n\n`{command}`\n\n{table(done)}\n")
        print(f"{name}: done ({done[name].get('seconds')} s of runs)", file=sys.stderr, flush=True)
    return done


def write_results(out, data, text: str) -> None:
    """``data`` as JSON at ``out`` and ``text`` (a Markdown table) beside it with ``.md``, then ``text`` printed."""
    import json

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2))
    out.with_suffix(".md").write_text(text + "\n")
    print(text)


def train_priors(rank: int, names=("builtin", *REAL_FILES)):
    """``name -> RowPrior``: the Gaussian of the train models' stage-0 rows (``pj.row_prior_from_rows``),
    from the same fits as `datasets`' embeddings."""
    import pulse_jax as pj

    out = {}
    for name in names:
        if name == "builtin":
            train = pj.make_benchmark(seed=0).train
        elif (split := real_split(name)) is not None:
            train = split[0].scores
        else:
            continue
        out[name] = pj.row_prior_from_rows(pj.fit_train_factors(train, rank=rank)[0])
    return out
