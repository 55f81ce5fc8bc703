"""``--param PATH=VALUE``: the paths and range checks of ``sweep --grid`` on demo, simulate and select;
the shorthand options set the same numbers; every method's numbers reach summary.json and
provenance.json."""
import json

import numpy as np
import pytest
from conftest import cli_fails

from pulse_jax import cli, synthetic

FAST = ["--reps", "2", "--quiet", "--budget", "900"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("param")
    bench = synthetic.make_benchmark(seed=1, n_models=6, n_examples=120, n_train=20)
    scores, train = folder / "scores.csv", folder / "train.csv"
    for path, matrix in ((scores, bench.scores), (train, bench.train)):
        path.write_text("model," + ",".join(f"e{j}" for j in range(matrix.shape[1])) + "\n" + "\n".join(
            f"m{i}," + ",".join(f"{v:g}" for v in row) for i, row in enumerate(matrix)) + "\n")
    return folder, scores, train


def test_every_methods_own_numbers_reach_the_summary_and_the_provenance(files):
    folder, scores, train = files
    out = folder / "two"
    assert cli.main(["simulate", "--scores", str(scores), "--train", str(train), "--rank", "3", "--method",
                     "ucbe,pulse", "--param", "estimator.fixed_lambda=0.25", "--param", "rule.exploration=0.5",
                     "--param", "refit_lr=0.2", "--out", str(out), *FAST]) == 0
    summary = json.loads((out / "summary.json").read_text())
    provenance = json.loads((out / "provenance.json").read_text())
    for record in (summary["params"], provenance["params"]):
        assert set(record) == {"ucbe", "pulse"}
        assert record["pulse"]["estimator"] == {"fixed_lambda": 0.25}   # PULSE's own number
        assert record["ucbe"]["estimator"] == {}                        # UCB-E has none: not applied there
        assert all(record[m]["rule"]["exploration"] == 0.5 and record[m]["engine"]["refit_lr"] == 0.2
                   for m in ("ucbe", "pulse"))
    pulse = np.load(out / "pulse.npz")
    assert np.all(pulse["lam"][pulse["chosen"] >= 0] == np.float32(0.25))   # the value reached the run


def test_a_param_equals_its_shorthand(files, tmp_path):
    folder, scores, _ = files
    runs = {}
    for name, flags in (("long", ["--stop", "epsilon_good", "--param", "stop.epsilon=0.05", "--param",
                                  "delta=0.2"]),
                        ("short", ["--epsilon", "0.05", "--delta", "0.2"])):
        assert cli.main(["simulate", "--scores", str(scores), "--method", "ucbe", *flags, "--out",
                         str(tmp_path / name), *FAST]) == 0
        runs[name] = np.load(tmp_path / name / "ucbe.npz")
    for key in ("chosen", "estimates", "spent", "stopped"):
        np.testing.assert_array_equal(runs["long"][key], runs["short"][key], err_msg=key)


@pytest.mark.parametrize("flags, needle", [
    (["--param", "explor=1"], "--param explor: not a number of this run; its numbers are engine.delta"),
    (["--param", "estimator.fixed_lambda=2"], "--param estimator.fixed_lambda: estimator.fixed_lambda: "
                                              "fixed_lambda=2.0 is out of range; it must lie in [0, 1] or NaN"),
    (["--param", "delta=1.5"], "--param delta: delta='1.5' is out of range; it must lie in (0, 1)"),
    (["--param", "delta"], "--param 'delta': expected PATH=VALUE (e.g. rule.exploration=0.5)"),
    (["--param", "delta=0.1,0.2"], "--param delta: one value, got 2"),
    (["--param", "delta=0.1", "--param", "delta=0.2"], "--param delta: given twice"),
    (["--param", "delta=0.1", "--delta", "0.2"], "--param delta: --delta sets the same number; give one of them"),
    (["--epsilon", "0.05", "--param", "stop.epsilon=0.1"], "--param stop.epsilon: --epsilon sets the same number"),
    (["--param", "stop.epsilon=0.1"], "--param stop.epsilon: not a number of this run"),
])
def test_a_bad_param_is_one_line_naming_the_option(flags, needle, capsys, tmp_path):
    cli_fails(["demo", "--reps", "2", "--quiet", "--out", str(tmp_path / "o"), *flags], capsys, needle)
    assert not (tmp_path / "o").exists()    # refused before anything ran


def test_select_takes_params_and_refuses_a_bad_one(tmp_path, capsys, monkeypatch):
    from pulse_jax import stand_in
    from pulse_jax.live import journal

    monkeypatch.chdir(tmp_path)
    (tmp_path / "models.txt").write_text("\n".join(stand_in.models()[:4]) + "\n")
    base = ["select", "--models", "models.txt", "--examples", "200", "--budget", "160", "--batch-size", "8",
            "--evaluate", "pulse_jax.stand_in:score", "--method", "ucbe", "--quiet"]
    cli_fails(base + ["--log", "bad.db", "--param", "rule.leader_fraction=2"], capsys,
              "--param rule.leader_fraction: rule.leader_fraction: leader_fraction=2.0 is out of range")
    assert not (tmp_path / "bad.db").exists()
    assert cli.main(base + ["--log", "run.db", "--param", "rule.leader_fraction=0.7", "--stop", "budget"]) == 0
    header, _ = journal.snapshot(tmp_path / "run.db")
    assert header["rule.leader_fraction"] == 0.7
