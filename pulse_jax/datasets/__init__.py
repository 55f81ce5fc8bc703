"""Real score matrices shipped with pulse-jax (sources, licences and how they were obtained:
``pulse_jax/datasets/README.md``, or ``docs/data.md``).

* ``"cruxeval_o"``: CRUXEval-O, 48 models x 800 examples (ZeroEval, Apache-2.0);
* ``"chembench"``: ChemBench, 22 models x 2,854 questions (irt-on-bench, MIT).

``load(name)`` gives the whole matrix; ``split(name)`` the two halves every study here uses, the
historical models (side information) and the candidates (`pulse_jax.fileio.data.split_models`).
"""
from __future__ import annotations

from pathlib import Path

from pulse_jax.errors import require

#: What each shipped matrix is: name -> (file beside this module, a line for titles).
DATASETS = {
    "cruxeval_o": ("cruxeval_o.csv", "CRUXEval-O (ZeroEval, Apache-2.0)"),
    "chembench": ("chembench.csv", "ChemBench (irt-on-bench, MIT)"),
}


def names() -> tuple[str, ...]:
    """The shipped matrices' names."""
    return tuple(DATASETS)


def path(name: str) -> Path:
    """Where the shipped matrix ``name`` lies (a CSV any command's ``--scores`` or ``--train`` reads)."""
    require(name in DATASETS, f"dataset {name!r}: no such shipped matrix; choose one of {', '.join(DATASETS)}")
    return Path(__file__).with_name(DATASETS[name][0])


def title(name: str) -> str:
    path(name)
    return DATASETS[name][1]


def load(name: str):
    """The shipped matrix ``name`` (a `pulse_jax.fileio.data.ScoreMatrix`)."""
    from pulse_jax.fileio import data

    return data.load(path(name))


def split(name: str, seed: int = 0):
    """``(train, candidates)``: the shipped matrix ``name`` split into historical models and candidates
    (`pulse_jax.fileio.data.split_models` with ``seed``, half and half at random)."""
    from pulse_jax.fileio import data

    train, candidates, _ = data.split_models(load(name), seed=seed)
    return train, candidates
