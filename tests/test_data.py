"""Messy real-world input: ties, oversized budgets, seeds, and files that must give one-line errors."""
import warnings

import numpy as np
import pytest

import pulse_jax as pj
from conftest import tiny_problem
from pulse_jax import cli
from pulse_jax.fileio import data
from pulse_jax.errors import PulseInputError


def test_a_tie_for_the_best_counts_as_correct():
    """Two models tied at the top and every cell observed: every guess is one of them."""
    rng = np.random.default_rng(0)
    top = (rng.random(40) < 0.7).astype(np.float32)
    scores = np.stack([top, top[::-1].copy(), (rng.random(40) < 0.3).astype(np.float32),
                       (rng.random(40) < 0.4).astype(np.float32)])
    assert scores[0].mean() == scores[1].mean()
    config = pj.BanditConfig(n_models=4, n_examples=40, budget=160, batch_size=4)
    res = pj.simulate(scores, config, "ucbe", reps=30, seed=0)
    assert res.n_best == 2 and set(res.best_models) == {0, 1}
    assert res.correct()[:, -1].all()
    acc, _ = res.accuracy_at_budget([160])
    assert acc[0] == 1.0
    same = np.tile(top, (3, 1))                          # every row identical: every guess is right
    res = pj.simulate(same, pj.BanditConfig(n_models=3, n_examples=40, budget=120, batch_size=4), "ucbe",
                      reps=10, seed=0)
    assert res.n_best == 3 and res.correct().all()


def test_cli_says_when_models_tie(tmp_path, capsys):
    rows = ["model," + ",".join(f"e{j}" for j in range(8)), "a,1,1,0,1,0,1,1,0", "b,1,1,1,0,0,1,1,0",
            "c,0,0,1,0,0,1,0,0"]
    (tmp_path / "c.csv").write_text("\n".join(rows) + "\n")
    assert cli.main(["simulate", "--scores", str(tmp_path / "c.csv"), "--method", "ucbe", "--batch-size", "2",
                     "--reps", "4", "--quiet", "--out", str(tmp_path / "o")]) == 0
    assert "note: 2 models tie for the best true mean (a, b)" in capsys.readouterr().out


def test_a_budget_above_the_matrix_is_clipped_with_a_warning(capsys):
    with pytest.warns(UserWarning, match="budget=10000000 is more than the matrix's 720 cells; clipped to 720"):
        config = pj.BanditConfig(n_models=6, n_examples=120, budget=10_000_000, batch_size=8)
    assert config.budget == 720 and config.n_steps < 100   # no 32 s of empty steps


@pytest.mark.parametrize("seed", [2**32, 2**32 + 7, 2**64 - 1])
def test_large_seeds_are_their_own_streams(seed):
    scores, _, _ = tiny_problem(m=4, n=30)
    config = pj.BanditConfig(n_models=4, n_examples=30, budget=60, batch_size=3)
    big = pj.simulate(scores, config, "ucbe", reps=6, seed=seed)
    low = pj.simulate(scores, config, "ucbe", reps=6, seed=seed % 2**32)
    assert not np.array_equal(big.chosen, low.chosen)
    again = pj.simulate(scores, config, "ucbe", reps=6, seed=seed)
    np.testing.assert_array_equal(big.chosen, again.chosen)


@pytest.mark.parametrize("seed, needle", [(2**70, r"seed must lie in \[0, 2\*\*64\)"), (-1, "must lie in"),
                                          (1.5, "seed must be an integer"), (True, "seed must be an integer")])
def test_bad_seeds_are_refused(seed, needle):
    scores, _, _ = tiny_problem(m=4, n=30)
    config = pj.BanditConfig(n_models=4, n_examples=30, budget=60, batch_size=3)
    with pytest.raises(PulseInputError, match=needle):
        pj.simulate(scores, config, "ucbe", reps=2, seed=seed)


def test_numpy_integers_are_accepted_where_ints_are():
    scores, _, _ = tiny_problem(m=4, n=30)
    config = pj.BanditConfig(n_models=np.int64(4), n_examples=np.int32(30), budget=np.int64(60),
                             batch_size=np.int64(3))
    res = pj.simulate(scores, config, "ucbe", reps=np.int64(2), seed=np.uint64(3), chunk_size=np.int64(2))
    assert res.reps == 2


@pytest.mark.parametrize("kwargs, needle", [(dict(reps=0), "reps must be a positive integer"),
                                            (dict(reps=2.0), "reps must be a positive integer"),
                                            (dict(chunk_size=0), "chunk_size must be a positive integer")])
def test_bad_counts_are_refused(kwargs, needle):
    scores, _, _ = tiny_problem(m=4, n=30)
    config = pj.BanditConfig(n_models=4, n_examples=30, budget=60, batch_size=3)
    with pytest.raises(PulseInputError, match=needle):
        pj.simulate(scores, config, "ucbe", **{"reps": 2, **kwargs})


def _write(path, text, encoding="utf-8"):
    path.write_bytes(text.encode(encoding))
    return path


@pytest.mark.parametrize("content, needle", [
    ("model,a,b\nm1,0_1,1\n", "'0_1' is not a number"),
    ("model,a,,b\nm1,1,0,1\n", "header column 3 has no example id"),
    ("model,a,b\nm1,inf,1\n", "'inf' is not finite"),
])
def test_csv_gaps_are_one_line_errors(tmp_path, content, needle):
    with pytest.raises(PulseInputError, match=needle):
        data.load(_write(tmp_path / "s.csv", content))


def test_latin1_csv_names_the_line(tmp_path):
    path = _write(tmp_path / "s.csv", "model,a,b\nm1,1,0\nmodèle,0,1\n", "latin-1")
    with pytest.raises(PulseInputError, match="line 3 is not UTF-8 text"):
        data.load(path)


@pytest.mark.parametrize("arrays, needle", [
    (dict(scores=np.array([["a", "b"], ["c", "d"]])), "must hold real numbers"),
    (dict(scores=np.array([[1 + 1j, 0], [0, 1]])), "must hold real numbers"),
    (dict(scores=np.ones((2, 2)), models=np.array(["x", "x"])), "model name 'x' appears twice"),
    (dict(scores=np.ones((2, 2)), examples=np.array(["q", "q"])), "example name 'q' appears twice"),
])
def test_npz_problems_are_one_line_errors(tmp_path, arrays, needle):
    path = tmp_path / "s.npz"
    np.savez(path, **arrays)
    with pytest.raises(PulseInputError, match=needle):
        data.load(path)


def test_npz_of_objects_or_not_a_zip(tmp_path):
    path = tmp_path / "obj.npz"
    np.savez(path, scores=np.array([[1, None], [0, 1]], dtype=object))
    with pytest.raises(PulseInputError, match="not a readable .npz score matrix"):
        data.load(path)
    with pytest.raises(PulseInputError, match="not a readable .npz score matrix"):
        data.load(_write(tmp_path / "fake.npz", "model,a\nm,1\n"))


def test_unreadable_file_is_one_line(tmp_path, monkeypatch):
    """A PermissionError on reading (simulated: the suite may run as root, who can read anything)."""
    import builtins

    path = _write(tmp_path / "s.csv", "model,a,b\nm1,1,0\nm2,0,1\n")
    real_open = builtins.open

    def guarded(file, *args, **kwargs):
        if str(file) == str(path):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded)
    with pytest.raises(PulseInputError, match="s.csv: cannot read: Permission denied"):
        data.load(path)


@pytest.fixture
def small_files(tmp_path):
    rows = ["model," + ",".join(f"e{j}" for j in range(12))]
    rng = np.random.default_rng(1)
    for i in range(4):
        rows.append(f"m{i}," + ",".join(str(int(v)) for v in rng.random(12) < 0.3 + 0.1 * i))
    _write(tmp_path / "cand.csv", "\n".join(rows) + "\n")
    _write(tmp_path / "train.csv", "\n".join(rows[:1] + [r.replace("m", "t", 1) for r in rows[1:]]) + "\n")
    return tmp_path


@pytest.mark.parametrize("argv, needle", [
    (["simulate", "--scores", "cand.csv", "--method", "pulse", "--embeddings", "cand.csv", "--batch-size", "2",
      "--out", "o"],
     "--embeddings cand.csv: not a .npy array file"),
    (["simulate", "--scores", "cand.csv", "--method", "ucbe", "--out", "cand.csv"],
     "--out cand.csv: exists and is not a directory"),
    (["simulate", "--scores", "cand.csv", "--method", "ucbe", "--chunk-size", "0", "--batch-size", "2",
      "--out", "o"],
     "--chunk-size must be >= 1, got 0"),
    (["simulate", "--scores", "cand.csv", "--method", "ucbe", "--seed", str(2**70), "--batch-size", "2",
      "--out", "o"],
     "seed must lie in"),
    (["tune", "--train", "train.csv", "--ranks", "2", "--lams", "-1", "--out", "h.json"], "grid lam -1.0 is out of range"),
    (["tune", "--train", "train.csv", "--out", "."], "--out .: is a directory"),
    (["select", "--models", "m.txt", "--examples", "12", "--budget", "40", "--evaluate", "x:y", "--log", "."],
     "--log .: is a directory"),
])
def test_cli_input_errors_are_one_line_and_early(small_files, monkeypatch, capsys, argv, needle):
    monkeypatch.chdir(small_files)
    (small_files / "m.txt").write_text("m0\nm1\n")
    monkeypatch.setattr("pulse_jax.cli.scorers.load_evaluate", lambda spec: (lambda model, ids: [0.0] * len(ids)))
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_cli_budget_above_the_matrix_says_so(small_files, monkeypatch, capsys):
    monkeypatch.chdir(small_files)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # the CLI clips first and says so itself: no Python warning
        assert cli.main(["simulate", "--scores", "cand.csv", "--method", "ucbe", "--batch-size", "2",
                         "--budget", "10000000", "--reps", "3", "--quiet", "--out", "o"]) == 0
    assert "note: --budget 10,000,000 is more than the matrix's 48 cells; using 48" in capsys.readouterr().out
