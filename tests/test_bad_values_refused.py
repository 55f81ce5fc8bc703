"""Bad values get one line naming what and where, never a traceback and never a silent acceptance:
the scorer's return values, long tables' ids, hyperparameter files, .npz files, huge numbers and an
Inspect log nested without bound."""
import json
import time

import numpy as np
import pytest

from pulse_jax import cli
from pulse_jax.errors import PulseInputError
from pulse_jax.fileio import data
from pulse_jax.harnesses import inspect_logs, lm_evaluation
from pulse_jax.live import Selector
from pulse_jax.live.request import check_scores


@pytest.fixture(scope="module")
def request_and_selector():
    sel = Selector(["a", "b"], 40, 2 * 8 + 8, batch_size=8, method="ucbe")
    return sel, sel.ask()


@pytest.mark.parametrize("scores, needle", [
    (np.full(8, 0.5 + 0.1j), "complex numbers"),
    (np.full(8, 0.5).astype(str), "strings"),
    (np.ones(8, bool), "booleans"),
    (np.ma.masked_array(np.full(8, 0.5), mask=[True] + [False] * 7), "masked values"),
    ([10**400] + [0] * 7, "integer too large"),
    ([0.5] * 7 + [0.5j], "not numbers in [0, 1]"),
])
def test_the_scorers_return_value_is_refused_in_one_line(request_and_selector, scores, needle):
    sel, request = request_and_selector
    with pytest.raises(PulseInputError) as err:
        check_scores(request, scores)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_an_unmasked_masked_array_and_plain_numbers_are_accepted(request_and_selector):
    sel, request = request_and_selector
    ok = check_scores(request, np.ma.masked_array(np.full(8, 0.25), mask=False))
    assert ok.dtype == np.float32 and (ok == 0.25).all()
    assert (check_scores(request, [1] * 8) == 1).all()


@pytest.mark.parametrize("value, needle", [
    ({"x": 1}, "must be a name"), ([1, 2], "must be a name"), (float("nan"), "must be a name"),
    ("a\x00b", "control character"), (True, "must be a name"), ("  ", "empty"),
])
def test_long_table_ids_must_be_names(tmp_path, value, needle):
    path = tmp_path / "long.jsonl"
    rows = [{"model": "m", "example": "e1", "score": 1}, {"model": "m", "example": value, "score": 0}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(PulseInputError, match=needle) as err:
        lm_evaluation.read_long(path)
    assert "line 2" in str(err.value)


def test_long_table_integral_float_ids_and_huge_scores(tmp_path):
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps({"model": "m", "example": 3.0, "score": 1}) + "\n")
    assert lm_evaluation.read_long(path).examples == ("3",)
    path.write_text('{"model": "m", "example": 1, "score": ' + "9" * 400 + "}\n")
    with pytest.raises(PulseInputError, match="400 digits"):
        lm_evaluation.read_long(path)


@pytest.mark.parametrize("field, value, needle", [
    ("epochs", -1, "epochs is -1"), ("epochs", 2.5, "epochs is 2.5"), ("rank", 0, "rank is 0"),
    ("lr", 0, "lr is 0"), ("lam", -0.1, "lam is -0.1"), ("lr", "fast", "lr is 'fast'"), ("epochs", True, "epochs is True"),
])
def test_hyperparameter_files_are_checked(tmp_path, field, value, needle):
    from pulse_jax import tuning

    good = {"rank": 4, "epochs": 100, "lr": 0.05, "lam": 0.01}
    path = tmp_path / "h.json"
    path.write_text(json.dumps({**good, field: value}))
    with pytest.raises(PulseInputError, match=needle):
        tuning.load_hparams(path)
    path.write_text(json.dumps(good))
    assert tuning.load_hparams(path)[0] == 4


def test_npz_files_that_are_not_score_matrices(tmp_path):
    npy = tmp_path / "scores.npz"
    with open(npy, "wb") as handle:
        np.save(handle, np.zeros((3, 4)))
    with pytest.raises(PulseInputError, match="not a readable .npz score matrix: not a zip archive"):
        data.load(npy)
    two_d = tmp_path / "two.npz"
    np.savez(two_d, scores=np.zeros((2, 3)), models=np.array([["a", "b"], ["c", "d"]]))
    with pytest.raises(PulseInputError, match="'models' must be a 1-D array of names, got shape \\(2, 2\\)"):
        data.load(two_d)


def test_a_csv_field_longer_than_the_csv_limit(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("model,e1\n" + "m," + '"' + "1" * 200_000 + '"\n')
    with pytest.raises(PulseInputError, match="not a readable CSV score matrix"):
        data.load(path)


@pytest.mark.parametrize("argv, needle", [
    (["demo", "--reps", "99999999999999999999"], "--reps 99999999999999999999: at most 2,147,483,647"),
    (["demo", "--budget", str(2**40)], "--budget 1099511627776: at most"),
    (["select", "--models", "m.txt", "--examples", "10", "--budget", "100", "--log", "x.db", "--evaluate", "a:b",
      "--retries", "-1"], "--retries must be >= 0"),
    (["select", "--models", "m.txt", "--examples", "10", "--budget", "100", "--log", "x.db", "--evaluate", "a:b",
      "--retry-wait", "nan"], "--retry-wait must be a number of seconds >= 0"),
])
def test_numbers_out_of_range_are_refused_before_anything_is_written(tmp_path, monkeypatch, capsys, argv, needle):
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []           # no log, no embeddings, no folder


def test_an_lm_eval_samples_file_of_another_shape(tmp_path, capsys):
    folder = tmp_path / "out" / "model"
    folder.mkdir(parents=True)
    (folder / "samples_other_2024-01-01T00-00-00.jsonl").write_text(json.dumps({"metrics": 5}) + "\n")
    assert cli.main(["import", "lm-eval", str(tmp_path / "out"), "--task", "mine", "--metric", "acc", "--out",
                     str(tmp_path / "x.csv")]) == 2
    err = capsys.readouterr().err
    assert "not an lm-eval sample" in err and len(err.strip().splitlines()) == 1


def test_an_inspect_log_nested_without_bound_is_refused_quickly_in_bounded_memory(tmp_path):
    """100,000 nested brackets (200 KB): refused before Inspect's parser sees it, in well under a second;
    brackets inside strings do not count."""
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    start = time.perf_counter()
    assert inspect_logs._check_depth(path).startswith("its JSON nests 100,000 levels deep")
    assert time.perf_counter() - start < 1.0
    assert inspect_logs.json_depth(b'{"a": "[[[[[[", "b": [1, {"c": "\\"]]]"}]}') == 3
    pytest.importorskip("inspect_ai", reason="reading an Inspect log needs inspect-ai (the harness extra)")
    with pytest.raises(PulseInputError, match="nests 100,000 levels deep"):
        inspect_logs.read_inspect([path])
