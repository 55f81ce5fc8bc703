"""Bad input is refused before any computation, in one line (exit 2) that names the file or option and the fix."""
import errno
import warnings

import numpy as np
import pytest
from conftest import cli_fails, tiny_problem

from pulse_jax.errors import PulseInputError
from pulse_jax.live import EvaluationError, Selector, run


@pytest.fixture
def files(tmp_path):
    scores, train, V = tiny_problem(seed=2, m=6, n=40)
    np.savez(tmp_path / "cand.npz", scores=scores)
    np.savez(tmp_path / "train.npz", scores=train)
    np.savez(tmp_path / "other.npz", scores=train[:, :30])
    np.save(tmp_path / "V.npy", V)
    np.save(tmp_path / "short.npy", V[:30])
    return tmp_path


def test_tune_checks_seed_and_output_before_cross_validating(files, capsys):
    base = ["tune", "--train", str(files / "train.npz"), "--ranks", "2", "--lams", "0.1", "--epochs", "5"]
    cli_fails(base + ["--out", str(files / "h.json"), "--seed", "-1"], capsys, "--seed must lie in [0, 2**64)")
    (files / "blocker").write_text("a file, not a folder")
    err = cli_fails(base + ["--out", str(files / "blocker" / "sub" / "h.json")], capsys, "cannot create its folder")
    assert "cross-validation" not in err


def test_sweep_refuses_a_grid_value_given_twice(tmp_path, capsys):
    cli_fails(["sweep", "--grid", "exploration=1,1", "--reps", "2", "--quiet", "--out", str(tmp_path / "s")], capsys,
           "--grid exploration: the value 1 is given more than once")


@pytest.mark.parametrize("option, name, needle", [("--embeddings", "short.npy", "embeddings must have shape (40, rank)"),
                                                  ("--train", "other.npz", "examples")])
def test_simulate_refuses_unused_side_information_of_the_wrong_shape(files, capsys, option, name, needle):
    cli_fails(["simulate", "--scores", str(files / "cand.npz"), "--method", "ucbe", option, str(files / name),
            "--reps", "2", "--batch-size", "4", "--quiet", "--out", str(files / "out")], capsys, needle)


def test_select_options_name_what_is_wrong(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models.txt").write_text("a\nb\nc\n")
    (tmp_path / "folder").mkdir()
    base = ["select", "--evaluate", "pulse_jax.stand_in:score", "--budget", "100", "--method", "ucbe", "--log",
            "run.jsonl"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # no UserWarning before the error line
        cli_fails(base + ["--models", "models.txt", "--examples", "0"], capsys, "--examples 0: give a positive number")
    cli_fails(base + ["--models", "models.txt", "--examples", "-3"], capsys, "--examples -3: give a positive number")
    cli_fails(base + ["--models", "folder", "--examples", "10"], capsys, "--models folder: is not a file")


def test_reordered_models_and_a_scorer_returning_none(small_bench, tmp_path):
    b, V = small_bench
    log = tmp_path / "run.jsonl"
    Selector(b.models, 200, 6 * 8 + 80, batch_size=8, V=V, log=log).close()
    with pytest.raises(PulseInputError, match="models are the same 6 entries in another order .* give them in the "
                                              "log's order"):
        Selector(list(reversed(b.models)), 200, 6 * 8 + 80, batch_size=8, V=V, log=log)
    sel = Selector(b.models, 200, 6 * 8 + 80, batch_size=8, V=V)
    with pytest.raises(PulseInputError, match="the scorer returned None; it must return one score in .0, 1. for "
                                              "each of the 8 examples"):
        run(lambda model, ids: None, sel)
    assert EvaluationError   # (the runner's own failures stay EvaluationError; a None is bad input)


def test_a_full_disk_leaves_no_truncated_embeddings_file(small_bench, tmp_path, monkeypatch):
    b, V = small_bench

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "save", full)
    with pytest.raises(PulseInputError, match=r"run.jsonl.embeddings.npy: cannot save the embeddings beside the log "
                                              r"\(No space left on device\); free space there"):
        Selector(b.models, 200, 6 * 8 + 80, batch_size=8, V=V, log=tmp_path / "run.jsonl")
    assert not list(tmp_path.glob("*.npy*"))
