"""What a new user meets in the first hour: one-line errors before any computation, help that states
every default, one set of run defaults, a sweep baseline that shows savings, results that are never
overwritten silently and say where they came from, readable budget intervals, the compilation cache
and progress bars from Python."""
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pulse_jax import cli, synthetic
from pulse_jax.fileio import data
from pulse_jax.analysis import metrics
from pulse_jax.engine import BanditConfig
from pulse_jax.fileio.provenance import clean_json
from pulse_jax.simulation import simulate
from pulse_jax.sweeps import sweep


def _error_line(capsys, argv) -> str:
    """Run the CLI, expect exit 2 and exactly one stderr line; return it."""
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.fixture
def no_computation(monkeypatch):
    """Any data loading or benchmark generation fails the test: errors must come first."""
    def refuse(*args, **kwargs):
        raise AssertionError("computation started before the arguments were checked")

    monkeypatch.setattr(synthetic, "make_benchmark", refuse)
    monkeypatch.setattr(data, "load", refuse)


@pytest.mark.parametrize("argv", [
    ["demo", "--seed", "-1"],
    ["sweep", "--grid", "exploration=1,2", "--seed", "-1", "--out", "{out}"],
    ["simulate", "--scores", "x.csv", "--seed", "-1", "--out", "{out}"],
    ["select", "--models", "m.txt", "--examples", "10", "--budget", "100", "--evaluate", "a:b", "--log", "l.jsonl",
     "--seed", "-1"],
])
def test_a_negative_seed_is_one_line_before_any_computation(argv, tmp_path, capsys, no_computation):
    argv = [a.replace("{out}", str(tmp_path / "out")) for a in argv]
    assert _error_line(capsys, argv) == "pulse-jax: error: --seed must lie in [0, 2**64), got -1"


@pytest.mark.parametrize("extra, needle", [
    (["--target", "1.5"], "--target must lie in (0, 1), got 1.5"),
    (["--reps", "0"], "--reps must be >= 1"),
    (["--batch-size", "0"], "--batch-size must be >= 1"),
    (["--refit-every", "-2"], "--refit-every must be >= 0"),
    (["--refit-epochs", "-1"], "--refit-epochs must be >= 0, got -1"),
])
def test_sweep_checks_every_number_before_computing(extra, needle, tmp_path, capsys, no_computation):
    line = _error_line(capsys, ["sweep", "--grid", "exploration=1,2", "--out", str(tmp_path / "o"), *extra])
    assert needle in line


def test_a_non_empty_output_folder_is_refused_unless_forced(tmp_path, capsys, no_computation):
    out = tmp_path / "results"
    out.mkdir()
    (out / "summary.json").write_text("{}")
    for argv in (["demo", "--out", str(out)], ["sweep", "--grid", "exploration=1,2", "--out", str(out)],
                 ["simulate", "--scores", "x.csv", "--train", "t.csv", "--out", str(out)]):
        line = _error_line(capsys, argv)
        assert f"--out {out}: already holds 1 file(s) (summary.json); pass --force" in line
    with pytest.raises(AssertionError, match="computation started"):   # --force lets it go on
        cli.main(["demo", "--out", str(out), "--force"])


def test_help_states_every_default_and_the_version(capsys):
    parser = cli.build_parser()
    subparsers = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, sub in subparsers.choices.items():
        text = sub.format_help()
        for action in sub._actions:
            if action.default in (None, False, [], "==SUPPRESS==") or action.help is None:
                continue
            flag = action.option_strings[0] if action.option_strings else action.dest
            shown = cli.options.HelpFormatter(prog="x")._get_help_string(action)
            assert "default" in shown, f"pulse-jax {name} {flag}: the help does not say its default"
        assert "--help" in text
    sweep_help = subparsers.choices["sweep"].format_help()
    assert "comma-separated estimators" not in sweep_help and "the estimator:" in sweep_help
    assert "comma-separated estimators" in subparsers.choices["simulate"].format_help()
    assert "0 = only the initial fit" in " ".join(subparsers.choices["simulate"].format_help().split())
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0
    from pulse_jax import __version__

    assert capsys.readouterr().out.strip() == f"pulse-jax {__version__}"


def test_select_names_the_cli_flag_for_missing_side_information(tmp_path, capsys):
    (tmp_path / "m.txt").write_text("a\nb\n")
    line = _error_line(capsys, ["select", "--models", str(tmp_path / "m.txt"), "--examples", "50", "--budget", "100",
                                "--evaluate", "pulse_jax.stand_in:score", "--log", str(tmp_path / "run.jsonl"),
                                "--method", "pulse_hedged"])
    assert "--method pulse_hedged needs side information: pass --train FILE" in line and "train=" not in line


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("files")
    bench = synthetic.make_benchmark(seed=2, n_models=4, n_examples=600, n_train=30)
    data.save_csv(data.ScoreMatrix(bench.scores.astype(float), bench.models, bench.examples), folder / "cand.csv")
    data.save_csv(data.ScoreMatrix(bench.train.astype(float), bench.train_models, bench.examples),
                  folder / "hist.csv")
    return folder


def test_simulate_and_sweep_share_one_set_of_defaults_and_record_provenance(tiny_files, tmp_path, capsys):
    cand = tiny_files / "cand.csv"
    assert cli.main(["simulate", "--scores", str(cand), "--method", "ucbe", "--reps", "2", "--quiet",
                     "--out", str(tmp_path / "sim")]) == 0
    assert cli.main(["sweep", "--scores", str(cand), "--method", "ucbe", "--grid", "exploration=1,2", "--reps", "2",
                     "--quiet", "--out", str(tmp_path / "sw")]) == 0
    capsys.readouterr()
    sim = json.loads((tmp_path / "sim" / "provenance.json").read_text())
    swp = json.loads((tmp_path / "sw" / "provenance.json").read_text())
    for key in ("batch_size", "refit_every", "budget", "init_batches"):
        assert sim["config"][key] == swp["config"][key], key
    assert sim["config"]["batch_size"] == cli.options.RUN_DEFAULTS["file"]["batch_size"]
    assert sim["config"]["refit_every"] == cli.options.RUN_DEFAULTS["file"]["refit_every"]
    # Provenance: inputs with their hashes, versions, backend, config, params, seed, command line.
    (record,) = sim["inputs"]
    assert record["path"] == str(cand.resolve())
    assert record["sha256"] == hashlib.sha256(cand.read_bytes()).hexdigest()
    import jax

    assert sim["versions"]["jax"] == jax.__version__ and sim["versions"]["jaxlib"] and sim["versions"]["pulse-jax"]
    assert sim["backend"] == jax.default_backend() and sim["seed"] == 0 and sim["method"] == ["ucbe"]
    assert sim["plugins"]["ucbe"]["rule"]["name"] == swp["plugins"]["rule"]["name"] == "ucbe"
    assert swp["plugins"]["estimator"]["name"] == "ucbe" and swp["plugins"]["stop"]["name"] == "budget"
    assert all(p["rule"]["exploration"] == 1.0 for p in sim["params"].values())
    assert "command" in sim and swp["points"] == [{**swp["points"][0]}, {**swp["points"][1]}]


def test_sweep_savings_default_to_the_papers_point_else_the_best(tiny_files):
    bench = synthetic.make_benchmark(seed=3, n_models=8, n_examples=200, n_train=20)
    config = BanditConfig(n_models=8, n_examples=200, budget=8 * 16 + 800, batch_size=16)
    res = sweep(bench.scores, config, "ucbe", {"exploration": [0.25, 1.0, 4.0]}, reps=16, seed=0)
    assert res.baseline == 1 and res.baseline_reason == "every swept number at its default"
    res = sweep(bench.scores, config, "ucbe", {"exploration": [0.25, 4.0]}, reps=16, seed=0)
    auc = [r.correct().mean() for r in res.results]
    assert res.baseline == int(np.argmax(auc)) and "most accurate" in res.baseline_reason
    res = sweep(bench.scores, config, "ucbe", {"exploration": [0.25, 4.0]}, reps=16, seed=0,
                baseline={"exploration": 4.0})
    assert res.baseline == 1 and res.baseline_reason == "given"


def test_budget_intervals_beyond_the_budget_read_as_such():
    found = metrics.BudgetToTarget(target=0.95, budget=5000.0, low=4200.0, high=math.inf, level=0.95,
                                   bandit_budget=4000.0, reached_fraction=0.9)
    assert str(found) == "5,000 cells [95% bootstrap interval 4,200, > budget]"
    assert "nan" not in str(found).lower()
    json.dumps(clean_json(dict(found)), allow_nan=False)      # strict JSON: inf becomes null
    never = metrics.BudgetToTarget(target=0.95, budget=math.nan, low=math.inf, high=math.inf, level=0.95,
                                   bandit_budget=math.nan, reached_fraction=0.02)
    assert str(never).startswith("not reached within the budget (2% of bootstrap resamples")
    bench = synthetic.make_benchmark(seed=3, n_models=8, n_examples=200, n_train=20)
    res = simulate(bench.scores, BanditConfig(n_models=8, n_examples=200, budget=8 * 16 + 320, batch_size=16),
                   "ucbe", reps=20, seed=0)
    real = metrics.budget_to_target(res, 0.99, n_boot=100)
    assert not math.isnan(real["high"]) and not math.isnan(real["low"])   # a number or inf, never NaN


def test_progress_bars_from_python_follow_the_terminal(capsys, monkeypatch):
    import importlib

    simulate_module = importlib.import_module("pulse_jax.simulation")

    bench = synthetic.make_benchmark(seed=3, n_models=8, n_examples=200, n_train=20)
    config = BanditConfig(n_models=8, n_examples=200, budget=8 * 16 + 160, batch_size=16)
    simulate(bench.scores, config, "ucbe", reps=4, seed=0)                 # default: nobody is watching
    assert capsys.readouterr().err == ""
    simulate(bench.scores, config, "ucbe", reps=4, seed=0, progress=True)
    assert "4/4 repetitions" in capsys.readouterr().err
    assert simulate_module._interactive() is False                          # under pytest
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    monkeypatch.setitem(sys.modules, "ipykernel", object())                # a notebook kernel
    assert simulate_module._interactive() is True


@pytest.mark.integration   # subprocesses that compile cold: the second test command
def test_the_python_api_uses_the_compilation_cache_unless_turned_off(tmp_path):
    """From Python the cache is one call away (the library itself changes no JAX setting:
    tests/test_library_leaves_the_process_alone.py); PULSE_JAX_CACHE=off turns that call off."""
    script = textwrap.dedent("""
        import sys, jax, pulse_jax as pj
        pj.enable_compilation_cache()
        b = pj.make_benchmark(seed=0, n_models=6, n_examples=200, n_train=20)
        pj.simulate(b.scores, pj.BanditConfig(n_models=6, n_examples=200, budget=6 * 16 + 160, batch_size=16),
                    "ucbe", reps=2)
        print(jax.config.jax_compilation_cache_dir)
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    cache = tmp_path / "xla"
    on = subprocess.run([sys.executable, "-c", script], env={**env, "PULSE_JAX_CACHE": str(cache)},
                        capture_output=True, text=True, timeout=300)
    assert on.returncode == 0, on.stderr[-2000:]
    assert on.stdout.strip().splitlines()[-1] == str(cache) and any(cache.iterdir())
    off = subprocess.run([sys.executable, "-c", script], env={**env, "PULSE_JAX_CACHE": "off"},
                         capture_output=True, text=True, timeout=300)
    assert off.returncode == 0, off.stderr[-2000:]
    assert off.stdout.strip().splitlines()[-1] == "None"


def test_bounds_option_and_the_select_defaults(tmp_path, monkeypatch):
    """``--bounds`` maps to ``cs_simultaneous``; simulations keep the paper's defaults, select takes the
    configuration measured to certify with the fewest cells (docs/confidence.md)."""
    from pulse_jax import cli, registry

    monkeypatch.chdir(tmp_path)
    (tmp_path / "h.csv").write_text("model,q0\nh0,1\nh1,0\n")      # a history (the plan checks it exists)

    parser = cli.build_parser()
    parse = lambda argv: cli.parse(argv, parser)[0]   # noqa: E731  (the command-dependent defaults filled)
    sim = parse(["simulate", "--scores", "s.csv", "--out", "o"])
    assert (sim.method, sim.rule, sim.bounds) == ("ucbe,pulse,naive", "ucbe", "all")
    assert cli.options.numbers_of(sim)["cs_simultaneous"] == 1.0 and "exploration" not in cli.options.numbers_of(sim)   # the rule's own
    assert cli.options.numbers_of(parse(["simulate", "--scores", "s.csv", "--out", "o", "--bounds", "certification"])
                       )["cs_simultaneous"] == 0.0
    sel = parse(["select", "--models", "m.txt", "--budget", "10", "--log", "l.jsonl", "--train", "h.csv"])
    assert (sel.rule, sel.bounds, sel.sequence) == ("top_two_interval", "certification", "betting")
    assert cli.options.numbers_of(sel)["cs_simultaneous"] == 0.0 and cli.options.cs_grid(sel) == 1000
    assert cli.selection.plan_of(sel).method_name() == "pulse_hedged"     # with history; ucbe without
    hedged = registry.estimator(cli.selection.plan_of(sel).method_name())
    assert hedged.name == "pulse_hedged" and hedged.n_sequences == 2
    assert dict(hedged.settings)["lambda_rule"] == "constant_lambda(0.5)"
    certify = registry.estimator("pulse_certify")
    assert certify.name == "pulse_certify" and certify.n_sequences == 1
    rule = registry.sampling_rule(sel.rule)
    assert rule.needs_interval and dict(rule.settings)["challenger"] == "interval"
    # --sequence picks the confidence sequences' family (BanditConfig.cs_grid)
    bet = parse(["simulate", "--scores", "s.csv", "--out", "o", "--sequence", "betting"])
    bet.batch_size, bet.refit_every = 16, 10
    assert sim.sequence == "bernstein" and cli.options.bandit_config(bet, 4, 100, 400).cs_grid == 1000
    bet.sequence = "bernstein"
    assert cli.options.bandit_config(bet, 4, 100, 400).cs_grid == 0
    # --refit-epochs sets the periodic refits' epochs; without it, the paper's 10
    assert cli.options.bandit_config(bet, 4, 100, 400).refit_epochs == 10
    fast = parse(["simulate", "--scores", "s.csv", "--out", "o", "--refit-epochs", "3"])
    fast.batch_size, fast.refit_every = 16, 10
    assert cli.options.bandit_config(fast, 4, 100, 400).refit_epochs == 3


@pytest.mark.parametrize("extra, needle", [
    (["--budget", "0"], "--budget must be >= 1, got 0"),
    (["--budget", "10"], "--budget 10 is smaller than the first look: 3 models (in models.txt) x --batch-size 8 x "
                         "--init-batches 1 = 24 cells; give --budget 24 or more"),
    (["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
    (["--refit-every", "-1"], "--refit-every must be >= 0, got -1"),
    (["--rank", "0"], "--rank must be >= 1, got 0"),
    (["--delta", "0"], "--delta 0: must lie strictly between 0 and 1"),
])
def test_select_errors_speak_in_options(tmp_path, capsys, monkeypatch, extra, needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models.txt").write_text("a\nb\nc\n")
    argv = ["select", "--models", "models.txt", "--examples", "100", "--budget", "400", "--evaluate",
            "pulse_jax.stand_in:score", "--method", "ucbe", "--log", "run.db"]
    line = _error_line(capsys, argv + extra)
    assert needle in line and "n_models" not in line and "batch_size" not in line, line
    assert not (tmp_path / "run.db").exists()                 # refused before the log was opened


@pytest.mark.integration   # a long end-to-end run: the second test command
def test_one_model_and_another_examples_count_name_their_option(tmp_path, capsys, monkeypatch):
    from pulse_jax import stand_in
    from pulse_jax.cli import stand_in as stand_in_cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "one.txt").write_text("only\n")
    assert "--models one.txt: 1 model; a selection needs at least 2 candidates" in _error_line(
        capsys, ["select", "--models", "one.txt", "--examples", "50", "--budget", "100", "--evaluate",
                 "pulse_jax.stand_in:score", "--method", "ucbe", "--log", "run.db"])
    (tmp_path / "models.txt").write_text("\n".join(stand_in.models()[:4]) + "\n")
    stand_in_cli.main(["train", str(tmp_path / "history.csv")])
    argv = ["select", "--models", "models.txt", "--budget", "64", "--batch-size", "8", "--rank", "3", "--evaluate",
            "pulse_jax.stand_in:score", "--method", "pulse", "--train", "history.csv", "--log", "p.db", "--quiet"]
    assert cli.main(argv + ["--examples", "200"]) == 0
    line = _error_line(capsys, argv + ["--examples", "300"])
    assert "examples: this run has 300 examples, but p.db was started with 200; give the same examples " \
           "(--examples)" in line


@pytest.mark.parametrize("text, needle", [
    ("0,1,1\n1,0,1\n0,0,1\n", "its first line looks like scores, not a header row (pulse-jax reads one row per model"),
    ("model,e1,e2\n1,0,1\n1,1,0\n", "model '1' appears twice (lines 2 and 3); is the file transposed, or missing its "
                                     "header row?"),
    ("example,gpt,claude\ne1,0,1\ne2,1,1\n", "the first column is named 'example', so the file has one row per "
                                             "example; pulse-jax reads one row per model"),
])
def test_a_csv_laid_out_otherwise_says_what_it_looks_like(tmp_path, text, needle):
    from pulse_jax.errors import PulseInputError

    (tmp_path / "s.csv").write_text(text)
    with pytest.raises(PulseInputError) as err:
        data.load(tmp_path / "s.csv")
    assert needle in str(err.value), str(err.value)


def test_no_carriage_returns_when_stderr_is_not_a_terminal(tmp_path, capsys):
    """``pulse-jax demo 2> log``: no progress bar (capsys's stderr is not a terminal)."""
    assert cli.main(["demo", "--reps", "4", "--method", "ucbe", "--out", str(tmp_path / "d")]) == 0
    assert "\r" not in capsys.readouterr().err


@pytest.mark.integration   # the README's whole command-line block: the second test command
def test_the_readmes_command_line_block_runs_top_to_bottom_in_an_empty_folder(tmp_path, monkeypatch, capsys):
    """Every line of the README's CLI block, in order, in an empty folder (repetitions and the tuning grid
    cut so the suite stays quick; nothing else changed)."""
    import re
    import shlex

    from pulse_jax.cli import stand_in as stand_in_cli

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme.split("## The command line in 12 lines")[1].split("```bash\n")[1].split("```")[0]
    lines = [line.split("   #")[0].strip() for line in block.replace("\\\n", " ").splitlines() if line.strip()]
    monkeypatch.chdir(tmp_path)
    for line in lines:
        for command in line.split(";"):
            argv = shlex.split(re.sub(r"--reps \d+", "--reps 4", command))
            if argv[:3] == ["python", "-m", "pulse_jax.cli.stand_in"]:
                out = argv.index(">") if ">" in argv else None
                if out is not None:
                    assert stand_in_cli.main(argv[3:out]) == 0
                    (tmp_path / argv[out + 1]).write_text(capsys.readouterr().out)
                else:
                    assert stand_in_cli.main(argv[3:]) == 0
                continue
            assert argv[0] == "pulse-jax", command
            if argv[1] == "sweep":
                argv += ["--reps", "4"]
            if argv[1] == "tune":
                argv += ["--ranks", "2", "--lams", "0.1", "--epochs", "5", "--folds", "2"]
            if argv[1] in ("--help", "--version"):
                with pytest.raises(SystemExit) as done:
                    cli.main(argv[1:])
                assert done.value.code == 0
                continue
            assert cli.main(argv[1:]) == 0, (command, capsys.readouterr().err[-2000:])
    assert (tmp_path / "results" / "summary.json").is_file() and (tmp_path / "run_report" / "report.md").is_file()
    priced = json.loads((tmp_path / "priced_report" / "report.json").read_text())   # the price table's selection
    assert priced["stop"] == "cheapest_within" and priced["stopped"] and priced["claimed"][0] in priced["certificate"]
    assert priced["spend"]["usd"] > 0 and (tmp_path / "priced_report" / "cost_accuracy.png").is_file()


def test_a_model_evaluated_on_every_example_reports_its_exact_mean_as_its_interval():
    """cs_low / cs_high are the interval certification uses: an exhausted model's is its exact mean."""
    scores = synthetic.make_benchmark(seed=3, n_models=4, n_examples=48, n_train=10).scores
    config = BanditConfig(n_models=4, n_examples=48, budget=4 * 48, batch_size=8)
    result = simulate(scores, config, "ucbe", reps=3, seed=0)
    exhausted = result.n_obs >= 48
    assert exhausted.any()
    means = np.broadcast_to(scores.mean(1), result.cs_low.shape)
    np.testing.assert_allclose(result.cs_low[exhausted], means[exhausted], atol=1e-6)
    np.testing.assert_allclose(result.cs_high[exhausted], means[exhausted], atol=1e-6)


def test_the_default_rank_is_capped_by_a_small_history_with_a_note(tmp_path, capsys):
    b = synthetic.make_benchmark(seed=0, n_models=6, n_examples=60, n_train=10)
    np.savez(tmp_path / "cand.npz", scores=b.scores)
    np.savez(tmp_path / "train.npz", scores=b.train)
    base = ["simulate", "--scores", str(tmp_path / "cand.npz"), "--train", str(tmp_path / "train.npz"), "--method",
            "pulse", "--reps", "2", "--batch-size", "4", "--quiet"]
    assert cli.main(base + ["--out", str(tmp_path / "a")]) == 0
    assert "--rank 16 (the default) needs at least 16 historical models; --train has 10 models" in \
        capsys.readouterr().err
    assert cli.main(base + ["--rank", "16", "--out", str(tmp_path / "b")]) == 2     # given explicitly: refused
    assert "rank=16 is not allowed" in capsys.readouterr().err


def test_paired_savings_are_defined_when_the_target_is_met_at_initialization():
    import warnings

    scores = np.zeros((5, 64), np.float32)
    scores[2] = 1.0                                   # the best is obvious after the first look
    config = BanditConfig(n_models=5, n_examples=64, budget=5 * 8 + 80, batch_size=8)
    a = simulate(scores, config, "ucbe", reps=8, seed=0)
    b = simulate(scores, config, "ucbe", reps=8, seed=0, params={"rule.exploration": 4.0})
    with warnings.catch_warnings():
        warnings.simplefilter("error")                # no RuntimeWarning
        for metric in ("paper", "strict"):
            out = metrics.paired_savings(a, b, target=0.9, n_boot=50, metric=metric)
            assert out["savings_pct"] == 0.0 and out["low"] == out["high"] == 0.0, out


def test_the_notebooks_stored_outputs_come_from_this_version():
    """A notebook's saved output that prints the version shows this one (the outputs were re-run)."""
    from pulse_jax import __version__

    for path in sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        text = "".join("".join(o.get("text", [])) for c in cells if c["cell_type"] == "code" for o in c.get("outputs", []))
        versions = re.findall(r"pulse-jax (\d+\.\d+\.\d+)", text)
        assert set(versions) <= {__version__}, (path.name, versions)


@pytest.mark.integration   # the whole demo (300 repetitions of three methods): the second test command
def test_the_readmes_demo_table_is_what_the_demo_prints(tmp_path, capsys):
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    table = readme.split("<!-- demo-table -->\n```text\n")[1].split("```")[0].splitlines()
    assert cli.main(["demo", "--out", str(tmp_path / "demo")]) == 0
    printed = capsys.readouterr().out.splitlines()
    start = printed.index(table[0])
    rows = printed[start:start + len(table)]
    assert [r.split("|")[0] for r in rows] == [t.split("|")[0] for t in table]       # every row, in order
    for row, want in zip(rows, table):
        # An accuracy is a share of 300 repetitions: float differences between compiled programs (a cold
        # or a cached one) can flip a tie in one repetition, 1/300 = 0.0033 (0.0045 printed to three
        # decimals); everything else is exact.
        got, expected = re.findall(r"0\.\d{3}(?= \+-)", row), re.findall(r"0\.\d{3}(?= \+-)", want)
        assert len(got) == len(expected) and all(abs(float(a) - float(b)) <= 0.0045 for a, b in zip(got, expected)), \
            (row, want)
        assert re.sub(r"\d\.\d{3} \+- \d\.\d{3}", "x", row) == re.sub(r"\d\.\d{3} \+- \d\.\d{3}", "x", want), (row, want)
