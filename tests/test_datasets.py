"""The real matrices shipped with the package: present, complete, as documented, split as every study
splits them, and runnable from a clone (``pulse-jax demo --data``)."""
from pathlib import Path

import numpy as np
import pytest

from pulse_jax import cli, datasets
from pulse_jax.errors import PulseInputError

SHAPES = {"cruxeval_o": (48, 800), "chembench": (22, 2854)}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_a_shipped_matrix_is_complete_0_1_and_of_its_documented_shape(name):
    matrix = datasets.load(name)
    assert matrix.scores.shape == SHAPES[name]
    assert set(np.unique(matrix.scores)) == {0.0, 1.0}            # complete: no NaN, graded 0/1
    assert len(set(matrix.models)) == SHAPES[name][0]
    train, cand = datasets.split(name)
    assert train.scores.shape[0] + cand.scores.shape[0] == SHAPES[name][0]
    assert not set(train.models) & set(cand.models)
    assert cand.examples == matrix.examples == train.examples


def test_each_shipped_file_has_its_source_and_licence_beside_it():
    readme = (Path(datasets.__file__).with_name("README.md")).read_text()
    for words in ("ZeroEval", "Apache-2.0", "irt-on-bench", "MIT License", "Copyright (c) 2025 irt-on-bench maintainers"):
        assert words in readme
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert '"pulse_jax.datasets" = ["*.csv", "README.md"]' in pyproject      # installed with the package


def test_an_unknown_name_is_refused_naming_the_choices():
    with pytest.raises(PulseInputError, match="dataset 'mmlu': no such shipped matrix; choose one of cruxeval_o, chembench"):
        datasets.path("mmlu")


@pytest.mark.integration   # compiles three methods: the second test command
def test_the_demo_runs_on_a_shipped_real_matrix(tmp_path, capsys):
    assert cli.main(["demo", "--data", "cruxeval_o", "--reps", "4", "--quiet", "--out", str(tmp_path / "d")]) == 0
    out = capsys.readouterr().out
    assert "CRUXEval-O (ZeroEval, Apache-2.0): 24 candidates x 800 examples, 24 historical models" in out
    assert (tmp_path / "d" / "summary.json").is_file()
