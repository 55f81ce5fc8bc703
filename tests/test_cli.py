"""Bad input gets one clear line; the CLI runs end to end and writes its results."""
import json
import subprocess
import sys

import numpy as np
import pytest

from pulse_jax import cli
from pulse_jax.cli import scorers
from pulse_jax.stats import factorization
from pulse_jax.fileio import data
from pulse_jax.engine import BanditConfig
from pulse_jax.errors import PulseInputError
from pulse_jax.simulation import simulate


def _write(path, text):
    path.write_text(text)
    return path


@pytest.mark.parametrize("kwargs, needle", [
    (dict(n_models=1, n_examples=10, budget=100), "at least 2 candidate models"),
    (dict(n_models=3, n_examples=10, budget=30, batch_size=16), "larger than the number of examples"),
    (dict(n_models=3, n_examples=100, budget=50, batch_size=20), "smaller than the initialization"),
    (dict(n_models=3, n_examples=100, budget=16.5), "budget must be an integer"),
    (dict(n_models=3, n_examples=100, budget=300, refit_every=-1), "refit_every"),
])
def test_config_errors_name_the_parameter(kwargs, needle):
    with pytest.raises(PulseInputError, match=needle):
        BanditConfig(**kwargs)


def test_rank_larger_than_allowed():
    with pytest.raises(PulseInputError, match="rank=50"):
        factorization.fit_example_embeddings(np.zeros((10, 30)), rank=50)


def test_simulate_input_errors():
    config = BanditConfig(n_models=2, n_examples=4, budget=8, batch_size=2)
    good = np.array([[1, 0, 1, 0], [0, 0, 1, 1]], np.float32)
    with pytest.raises(PulseInputError, match="needs side information"):
        simulate(good, config, "pulse")
    with pytest.raises(PulseInputError, match="model row 0 has 1 scored examples"):   # too few for the first batch
        simulate(np.where([[1, 1, 1, 0], [0, 0, 0, 0]], np.nan, good), config, "ucbe")
    with pytest.raises(PulseInputError, match=r"\[0, 1\]"):
        simulate(good * 2, config, "ucbe")
    with pytest.raises(PulseInputError, match="unknown method"):
        simulate(good, config, "thompson")


def test_csv_round_trip_keeps_names_and_missing_cells(tmp_path):
    matrix = data.ScoreMatrix(np.array([[1.0, np.nan, 0.25], [0.0, 1.0, np.nan]]), ("m-a", "m-b"),
                              ("q1", "q2", "q3"), metadata={"created_date": ("2024-01-01", "2024-06-30")})
    data.save_csv(matrix, tmp_path / "s.csv")
    back = data.load_csv(tmp_path / "s.csv")
    assert back.models == matrix.models and back.examples == matrix.examples
    np.testing.assert_array_equal(np.isnan(back.scores), np.isnan(matrix.scores))
    np.testing.assert_allclose(np.nan_to_num(back.scores), np.nan_to_num(matrix.scores))
    assert back.metadata == matrix.metadata


@pytest.mark.parametrize("text, needle", [
    ("model,q1,q2\na,1,x\n", "line 2, column 'q2': 'x' is not a number"),
    ("model,q1,q2\na,1,1.5\n", "line 2, column 'q2': score 1.5 is outside"),
    ("model,q1,q2\na,1,0\na,0,1\n", "model 'a' appears twice (lines 2 and 3)"),
    ("model,q1,q1\na,1,0\n", "example column 'q1' appears twice"),
    ("model,created_date,q1\na,yesterday,1\n", "line 2, column 'created_date': 'yesterday' is not a date"),
    ("model,q1,q2\na,1\n", "line 2 has 2 fields but the header has 3"),
])
def test_csv_errors_name_line_and_column(tmp_path, text, needle):
    path = _write(tmp_path / "bad.csv", text)
    with pytest.raises(PulseInputError) as err:
        data.load_csv(path)
    assert needle in str(err.value) and str(path) in str(err.value)


def test_missing_candidate_cell_and_train_mismatch(tmp_path):
    cand = data.load_csv(_write(tmp_path / "c.csv", "model,q1,q2\na,1,\nb,0,1\n"))
    with pytest.raises(PulseInputError, match=r"model 'a' \(row 1\) has no score for example 'q2'"):
        cand.require_complete()
    train = data.load_csv(_write(tmp_path / "t.csv", "model,q1,q3\nh,1,0\ng,0,1\n"))
    with pytest.raises(PulseInputError, match="train examples differ"):
        data.align_train(cand, train)
    train = data.load_csv(_write(tmp_path / "t2.csv", "model,q2,q1\nh,1,0\ng,0,1\n"))
    assert data.align_train(cand, train).scores.tolist() == [[0.0, 1.0], [1.0, 0.0]]


def test_cli_error_is_one_line_and_exit_code_2(tmp_path):
    path = _write(tmp_path / "bad.csv", "model,q1,q2\na,1,x\nb,0,1\n")
    proc = subprocess.run([sys.executable, "-m", "pulse_jax.cli", "simulate", "--scores", str(path),
                           "--method", "ucbe", "--out", str(tmp_path / "o")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert "'x' is not a number" in proc.stderr


def test_cli_simulate_writes_json_npz_png(tmp_path):
    rng = np.random.default_rng(0)
    cand = data.ScoreMatrix((rng.random((4, 60)) < np.linspace(0.3, 0.7, 4)[:, None]).astype(float),
                            tuple(f"m{i}" for i in range(4)), tuple(f"q{j}" for j in range(60)))
    train = data.ScoreMatrix((rng.random((12, 60)) < 0.5).astype(float), tuple(f"h{i}" for i in range(12)),
                             cand.examples)
    data.save_csv(cand, tmp_path / "cand.csv")
    data.save_csv(train, tmp_path / "train.csv")
    out = tmp_path / "out"
    code = cli.main(["simulate", "--scores", str(tmp_path / "cand.csv"), "--train", str(tmp_path / "train.csv"),
                     "--reps", "6", "--budget", "100", "--batch-size", "5", "--refit-every", "3", "--rank", "3",
                     "--out", str(out), "--quiet"])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["methods"]) == {"ucbe", "pulse", "naive"}
    assert summary["best_model_name"] == "m3"
    assert (out / "accuracy.png").stat().st_size > 1000
    with np.load(out / "pulse.npz") as arrays:
        assert arrays["best"].shape[0] == 6


@pytest.mark.integration   # a long end-to-end run: the second test command
def test_cli_demo_small(tmp_path, capsys):
    code = cli.main(["demo", "--reps", "8", "--budget", "1200", "--out", str(tmp_path / "demo"), "--quiet"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "PULSE" in printed and "UCB-E" in printed and "to 90% acc." in printed
    assert (tmp_path / "demo" / "accuracy.png").exists()


def test_npz_loading_and_errors(tmp_path):
    scores = np.array([[1.0, 0.0, np.nan], [0.5, 1.0, 0.0]])
    np.savez(tmp_path / "s.npz", scores=scores, models=np.array(["a", "b"]), examples=np.array(["x", "y", "z"]))
    loaded = data.load(tmp_path / "s.npz")
    assert loaded.models == ("a", "b") and loaded.examples == ("x", "y", "z")
    np.testing.assert_array_equal(np.isnan(loaded.scores), np.isnan(scores))
    np.savez(tmp_path / "bad.npz", scores=np.array([[0.2, 1.3]]))
    with pytest.raises(PulseInputError, match=r"row 1 \('model-0'\), column 2 \('1'\): score 1.3 is outside"):
        data.load(tmp_path / "bad.npz")
    np.savez(tmp_path / "none.npz", other=np.zeros(3))
    with pytest.raises(PulseInputError, match="no array named 'scores'"):
        data.load(tmp_path / "none.npz")
    with pytest.raises(PulseInputError, match="unknown file type"):
        data.load(tmp_path / "s.txt")


def test_cli_tune_then_simulate_with_hparams(tmp_path, capsys):
    rng = np.random.default_rng(1)
    u, v = rng.normal(0, 1.5, (40, 2)), rng.normal(0, 1.5, (60, 2))
    hist = (rng.random((40, 60)) < 1 / (1 + np.exp(-u @ v.T))).astype(float)
    examples = tuple(f"q{j}" for j in range(60))
    data.save_csv(data.ScoreMatrix(hist, tuple(f"h{i}" for i in range(40)), examples), tmp_path / "train.csv")
    data.save_csv(data.ScoreMatrix(hist[:4], tuple(f"m{i}" for i in range(4)), examples), tmp_path / "cand.csv")
    assert cli.main(["tune", "--train", str(tmp_path / "train.csv"), "--out", str(tmp_path / "h.json"),
                     "--ranks", "1,2", "--lams", "0.01", "--epochs", "100"]) == 0
    assert "chosen by the 1-SE rule" in capsys.readouterr().out
    assert json.loads((tmp_path / "h.json").read_text())["rank"] in (1, 2)
    assert cli.main(["simulate", "--scores", str(tmp_path / "cand.csv"), "--train", str(tmp_path / "train.csv"),
                     "--hparams", str(tmp_path / "h.json"), "--method", "pulse", "--reps", "3", "--budget", "60",
                     "--batch-size", "5", "--out", str(tmp_path / "o"), "--quiet"]) == 0
    assert cli.main(["tune", "--train", str(tmp_path / "train.csv"), "--out", str(tmp_path / "x.json"),
                     "--ranks", "a,b"]) == 2
    assert "--ranks: expected comma-separated numbers" in capsys.readouterr().err


def test_harness_task_examples_all_first_n_or_listed_and_unknown_ids_are_named(tmp_path):
    docs = list(range(5))
    assert scorers.task_examples(None, docs, "arith", "document", scorers.document_id) == docs
    assert scorers.task_examples("3", docs, "arith", "document", scorers.document_id) == [0, 1, 2]
    with pytest.raises(PulseInputError, match=r"--examples 6: the task 'arith' has 5 documents"):
        scorers.task_examples("6", docs, "arith", "document", scorers.document_id)
    listed = _write(tmp_path / "ids.txt", "4\n1\n")
    assert scorers.task_examples(str(listed), docs, "arith", "document", scorers.document_id) == [4, 1]
    with pytest.raises(PulseInputError, match=r"no document 7 in 'arith' \(5 documents\)"):
        scorers.task_examples(str(_write(tmp_path / "bad.txt", "1\n7\n")), docs, "arith", "document", scorers.document_id)
    with pytest.raises(PulseInputError, match=r"document ids \(integers\), got 'x'"):
        scorers.task_examples(str(_write(tmp_path / "text.txt", "x\n")), docs, "arith", "document", scorers.document_id)
    samples = ["a", 2]                      # Inspect sample ids: strings or integers, listed as text
    by_text = {str(i): i for i in samples}
    found = scorers.task_examples(str(_write(tmp_path / "s.txt", "2\na\n")), samples, "t.py@t", "sample",
                               lambda text: by_text.get(text, text))
    assert found == [2, "a"]
    with pytest.raises(PulseInputError, match=r"no sample 'z' in 't.py@t'"):
        scorers.task_examples(str(_write(tmp_path / "z.txt", "z\n")), samples, "t.py@t", "sample",
                           lambda text: by_text.get(text, text))


def test_each_commands_help_states_its_own_defaults():
    """``select --help`` states select's defaults (not "select: ..." beside another command's), ``demo
    --help`` the built-in benchmark's (not a file's); the top level lists ``import inspect``'s source."""
    parser = cli.build_parser()
    words = lambda name: " ".join(parser._subparsers._group_actions[0].choices[name].format_help().split())  # noqa: E731
    select, demo = words("select"), words("demo")
    assert "(default: certification)" in select and "(default: top_two_interval)" in select
    assert "select: certification" not in select and "or --inspect-task: every document or sample" in select
    assert "B (default: 16)" in demo and "on a file" not in demo
    assert "Inspect logs" in " ".join(parser.format_help().split())
