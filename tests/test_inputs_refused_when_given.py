"""Inputs refused in one line at the moment they are given (before anything compiles): huge, complex or
duplicated costs, a cost rule without costs, empty names, out-of-range numbers in a plan or a rule, a
rank no method uses, ``--version`` with more words; and ``simulate --cost`` prints no NumPy warning."""
import warnings

import numpy as np
import pytest

import pulse_jax as pj
from pulse_jax import cli
from pulse_jax.errors import PulseInputError
from pulse_jax.fileio.costs import load_costs
from pulse_jax.live import Selector, money
from pulse_jax.live.plan import Plan
from pulse_jax.simulation import check_cost


def test_costs_that_cannot_add_up_or_are_not_real_are_refused():
    scores = np.zeros((2, 3))
    with pytest.raises(PulseInputError, match="too large to add up"):
        check_cost(np.array([1e308, 1.0]), scores)
    with pytest.raises(PulseInputError, match="must be real numbers, got complex"):
        check_cost(np.array([1 + 1j, 2.0]), scores)
    with pytest.raises(PulseInputError, match="dollars is no price"):
        money.parse_prices(["*=1e308"], ["a"])


def test_a_cost_file_with_an_example_column_twice_is_refused(tmp_path):
    path = tmp_path / "cost.csv"
    path.write_text("model,0,0,1\nm0,1,2,1\n")
    with pytest.raises(PulseInputError, match="example column '0' appears twice"):
        load_costs(path, ["m0"], ["0", "1"])


def test_a_rule_about_cost_without_costs_is_refused_by_simulate():
    from pulse_jax import synthetic

    bench = synthetic.make_benchmark(seed=0, n_models=3, n_examples=20, n_train=4)
    config = pj.BanditConfig(n_models=3, n_examples=20, budget=30, batch_size=2)
    with pytest.raises(PulseInputError, match="stopping rule 'cheapest_within' ranks the models by cost, and no cost"):
        pj.simulate(bench.scores, config, pj.Plugins("ucbe", stop=pj.cheapest_within(0.05)), reps=1)


@pytest.mark.parametrize("make, needle", [
    (lambda: pj.cheapest_within(-0.1), r"cheapest_within\(epsilon=-0.1\): epsilon must be a number in \[0, 1\]"),
    (lambda: pj.cost_front(2.0), r"cost_front\(epsilon=2.0\): epsilon must be"),
    (lambda: Plan(log="run.db", exploration=-1), "exploration must be a number >= 0"),
    (lambda: Plan(log="run.db", price=("*=0.01",), budget_usd=0), "budget_usd must be a number of dollars > 0"),
    (lambda: Selector(["a", " "], 10, 20, method="ucbe"), "model 1 has an empty name")])
def test_a_bad_number_or_name_is_refused_when_it_is_given(make, needle):
    with pytest.raises(PulseInputError, match=needle):
        make()


def test_the_command_line_refuses_what_it_would_ignore(tmp_path, capsys):
    scores = tmp_path / "c.csv"
    scores.write_text("model," + ",".join(map(str, range(8))) + "\n"
                      + "".join(f"m{i}," + ",".join(str((i + j) % 2) for j in range(8)) + "\n" for i in range(3)))
    cases = [(["--version", "extra"], "--version takes nothing else"),
             (["simulate", "--scores", str(scores), "--method", "ucbe", "--rank", "100000", "--out",
               str(tmp_path / "o")], "--rank 100000: --method ucbe makes no predictions"),
             (["simulate", "--scores", str(scores), "--method", "ucbe", "--stop", "cost_front", "--batch-size", "2",
               "--out", str(tmp_path / "p")], "--stop cost_front ranks the models by cost: pass --cost FILE")]
    for argv, needle in cases:
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1, err


def test_simulate_with_costs_prints_no_numpy_warning(tmp_path, capsys):
    scores, cost = tmp_path / "c.csv", tmp_path / "cost.csv"
    rng = np.random.default_rng(0)
    table = (rng.random((3, 20)) < np.array([[0.3], [0.5], [0.7]])).astype(int)
    scores.write_text("model," + ",".join(map(str, range(20))) + "\n"
                      + "".join(f"m{i}," + ",".join(map(str, row)) + "\n" for i, row in enumerate(table)))
    cost.write_text("model,cost\nm0,1\nm1,2\nm2,3\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert cli.main(["simulate", "--scores", str(scores), "--cost", str(cost), "--method", "ucbe", "--reps", "4",
                         "--batch-size", "2", "--out", str(tmp_path / "o"), "--quiet"]) == 0


def _write_matrix(path, rows: int, cols: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    body = (rng.random((rows, cols)) < 0.5).astype(int)
    path.write_text("model," + ",".join(f"q{j}" for j in range(cols)) + "\n"
                    + "".join(f"m{i}," + ",".join(map(str, r)) + "\n" for i, r in enumerate(body)))


def test_mistakes_found_by_the_probe_are_refused_before_anything_runs(tmp_path, capsys, monkeypatch):
    """From benchmarks/usability/bench_mistakes.py: a negative ``--exploration`` and a ``--baseline`` that
    names no number are refused at the start, in one line (they were refused after the progress line),
    and checking a seed compiles nothing (it made a PRNG key, so every refusal came after a compile)."""
    from conftest import cli_fails

    _write_matrix(tmp_path / "cand.csv", 6, 80, seed=1)
    monkeypatch.chdir(tmp_path)
    cli_fails(["simulate", "--scores", "cand.csv", "--method", "ucbe", "--exploration", "-1", "--out", "o"], capsys,
              "--exploration must be a number >= 0, got -1.0")
    cli_fails(["sweep", "--scores", "cand.csv", "--method", "ucbe", "--grid", "delta=0.1,0.2", "--baseline",
               "nosuch=1", "--out", "o"], capsys, "--baseline nosuch: unknown parameter 'nosuch'")
    import jax

    from pulse_jax.stats.seeds import check_seed

    def no_key(*args, **kwargs):
        raise AssertionError("a key was made (a compile) to check a seed")

    monkeypatch.setattr(jax.random, "PRNGKey", no_key)
    assert check_seed(2**40 + 3) == 2**40 + 3
    with pytest.raises(PulseInputError, match=r"seed must lie in \[0, 2\*\*64\), got -1"):
        check_seed(-1)


def test_tune_s_default_ranks_are_cut_to_what_the_history_allows(tmp_path, capsys):
    """The default rank grid (4, 8, 16, 32) on a history of 12 models: ranks 4 and 8 are tried, with a note;
    a rank given explicitly above the history is still refused."""
    _write_matrix(tmp_path / "train.csv", 12, 60, seed=2)
    out = tmp_path / "hp.json"
    cli.main(["tune", "--train", str(tmp_path / "train.csv"), "--out", str(out), "--lams", "0.01", "--epochs", "20",
              "--folds", "2"])
    err = capsys.readouterr().err
    assert "--ranks 4,8,16,32 (the default) needs at least 32" in err and "ranks 4,8 are tried" in err
    assert out.is_file()
    from conftest import cli_fails

    cli_fails(["tune", "--train", str(tmp_path / "train.csv"), "--out", str(tmp_path / "x.json"), "--ranks", "16"],
              capsys, "grid rank 16 is not allowed for a (12, 60) train matrix")
