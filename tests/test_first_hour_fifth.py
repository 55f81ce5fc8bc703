"""What a newcomer meets on the command line: a pipe closed early, the help for prices, budgets refused
when given."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pulse_jax import cli
from pulse_jax.errors import PulseInputError
from pulse_jax.live import Selector
from pulse_jax.live.plan import Plan

HERE = Path(__file__).parent


def test_log_show_into_a_pipe_closed_early_ends_quietly(tmp_path):
    log = tmp_path / "run.db"
    with Selector(["a", "b", "c"], 60, 180, method="ucbe", batch_size=2, stop="budget", log=log,
                  concurrency=1) as sel:
        while (r := sel.ask()) is not None:
            sel.tell(r, [float(int(e) % 3 == 0) for e in r.example_ids])
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    done = subprocess.run(f"{sys.executable} -m pulse_jax.cli log show {log} | head -3", shell=True, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 3
    assert "Broken pipe" not in done.stderr and "Error" not in done.stderr, done.stderr


def test_select_help_documents_both_price_forms(capsys):
    with pytest.raises(SystemExit):
        cli.main(["select", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "MODEL=DOLLARS per call" in text and "MODEL=IN/OUT dollars per million" in text


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), True])
def test_a_money_budget_of_nothing_is_refused_when_the_plan_is_made(tmp_path, value):
    with pytest.raises(PulseInputError, match="budget_usd must be a number of dollars > 0"):
        Plan(log=str(tmp_path / "run.db"), price=("*=0.01",), budget_usd=value)


@pytest.mark.parametrize("models, examples, needle", [
    (["candidate-000", "gpt-9"], "100", "the stand-in scorer has no model 'gpt-9'"),
    (["candidate-000", "candidate-001"], "2000", "example 1000 is not one of them (give --examples 1000 or fewer)")])
def test_the_stand_in_scorer_refuses_what_it_lacks_before_anything_compiles(tmp_path, capsys, monkeypatch, models,
                                                                          examples, needle):
    import pulse_jax.live.selector as selector_module

    def no_selector(*args, **kwargs):
        raise AssertionError("a selector was made (and compiled) before the refusal")

    monkeypatch.setattr(selector_module, "Selector", no_selector)
    (tmp_path / "models.txt").write_text("\n".join(models) + "\n")
    argv = ["select", "--models", str(tmp_path / "models.txt"), "--examples", examples, "--budget", "400", "--method", "ucbe",
            "--evaluate", "pulse_jax.stand_in:score", "--log", str(tmp_path / "run.db"), "--quiet"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1, err


def test_a_scorer_that_refuses_a_request_is_not_retried(tmp_path):
    from pulse_jax.live import EvaluationError, run

    calls = []

    def scorer(model, ids):
        calls.append(model)
        if model == "c":
            raise PulseInputError("no model 'c' here")
        return [0.5] * len(ids)

    with Selector(["a", "b", "c"], 60, 180, method="ucbe", batch_size=2, stop="budget", concurrency=1) as sel:
        with pytest.raises(EvaluationError, match="evaluate refused model 'c' .* not retried: no model 'c' here"):
            run(scorer, sel, retry_wait=0.0, handle_signals=False)
    assert calls.count("c") == 1


@pytest.mark.parametrize("name, text", [
    ("candidates.csv", "model,0,1,2\ncandidate-000,1,0,1\ncandidate-001,0,1,1\n"),
    ("names.txt", "model,0,1,2\ncandidate-000,1,0,1\ncandidate-001,0,1,1\n"),
    ("long.txt", "a\n" + "b" * 3000 + "\n")])
def test_a_table_given_as_the_models_is_refused_before_anything_runs(tmp_path, capsys, name, text):
    (tmp_path / name).write_text(text)
    argv = ["select", "--models", str(tmp_path / name), "--examples", "100", "--budget", "400", "--method", "ucbe",
            "--evaluate", "pulse_jax.stand_in:score", "--log", str(tmp_path / "run.db"), "--quiet"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ("looks like a table" in err or "is no model name" in err), err
    assert not (tmp_path / "run.db").exists()


def test_progress_without_a_terminal_says_the_pace_and_what_is_left(tmp_path, monkeypatch):
    """Without a terminal, select writes a line every 10 seconds with the cells left at the pace so far."""
    import io

    from pulse_jax.cli import output, selection

    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    clock = iter([0.0, 0.0, 11.0, 15.0, 22.0])
    monkeypatch.setattr(output.time, "monotonic", lambda: next(clock))
    report = selection._live_progress(type("Args", (), {"quiet": False})())

    class FakeSelector:
        spent = 100
        config = type("Config", (), {"budget": 1000})()

    selector = FakeSelector()
    report(selector, 4, 1.0)                # within 10 s of the "started" line: not printed
    selector.spent = 300
    report(selector, 4, 11.0)               # 11 s after it: printed, with what is left at this pace
    selector.spent = 350
    report(selector, 4, 15.0)               # 4 s later: not printed
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and lines[0] == "  select: started" and "300/1,000 cells" in lines[-1]
    assert "at most 38 s left at this rate" in lines[-1]           # 700 cells at 200 cells / 11 s


def test_the_same_command_on_a_finished_selection_says_so_without_compiling(tmp_path, capsys, monkeypatch):
    from pulse_jax import stand_in

    (tmp_path / "models.txt").write_text("\n".join(stand_in.models()[:3]) + "\n")
    argv = ["select", "--models", str(tmp_path / "models.txt"), "--examples", "60", "--budget", "120",
            "--batch-size", "4", "--method", "ucbe", "--stop", "budget", "--evaluate", "pulse_jax.stand_in:score",
            "--log", str(tmp_path / "run.db"), "--quiet", "--concurrency", "1"]
    assert cli.main(argv) == 0
    first = capsys.readouterr().out
    import pulse_jax.live.selector as selector_module

    def no_selector(*args, **kwargs):
        raise AssertionError("a selector was made (and compiled) for a finished selection")

    monkeypatch.setattr(selector_module, "Selector", no_selector)
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    assert "this selection already finished" in err and err.count("\n") == 1
    assert out.splitlines()[0] in first and "120/120" not in err
    bigger = list(argv)
    bigger[bigger.index("--budget") + 1] = "180"
    with pytest.raises(AssertionError, match="a selector was made"):    # a larger budget goes on from the log
        cli.main(bigger)


def test_a_hung_call_is_said_once_even_without_progress(monkeypatch, capsys):
    from pulse_jax.live import run, runner

    monkeypatch.setattr(runner, "HUNG_CALL", 0.2)
    calls = []

    def scorer(model, ids):
        calls.append(model)
        if len(calls) == 4:
            import time

            time.sleep(0.6)
        return [0.5] * len(ids)

    with Selector(["a", "b", "c"], 30, 60, method="ucbe", batch_size=2, stop="budget", concurrency=1) as sel:
        run(scorer, sel, handle_signals=False, progress=False)
    err = capsys.readouterr().err
    assert err.count("has run for") == 1 and "no --call-timeout" in err, err


def test_the_library_stand_in_run_as_a_module_points_to_the_command_that_writes_its_files():
    """``python -m pulse_jax.stand_in models`` (the library module) printed nothing and exited 0; it names
    the command line's module, whose ``models`` does print the names."""
    wrong = subprocess.run([sys.executable, "-m", "pulse_jax.stand_in", "models"], capture_output=True, text=True)
    assert wrong.returncode == 2 and wrong.stdout == ""
    assert "python -m pulse_jax.cli.stand_in models" in wrong.stderr and wrong.stderr.count("\n") == 1
    right = subprocess.run([sys.executable, "-m", "pulse_jax.cli.stand_in", "models"], capture_output=True, text=True)
    assert right.returncode == 0 and len(right.stdout.split()) == 40


@pytest.mark.parametrize("command", ["demo", "simulate", "sweep", "tune", "select"])
def test_every_option_a_commands_help_names_is_one_of_its_own(command, capsys):
    """``select --help`` named a ``--cost`` that only ``simulate`` has: every ``--option`` the help text
    mentions is in the command's own usage line."""
    import re

    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = re.sub(r"(?<=\w)-\n\s+", "-", capsys.readouterr().out)     # a name the wrapping broke at a hyphen
    usage, _, body = text.partition("\n\n")
    own = set(re.findall(r"--[a-z][a-z0-9-]*", usage)) | {"--help"}
    # "as sweep --grid", "`simulate --hparams`": another command's option, named with its command
    other = r"(?<!sweep )(?<!simulate )(?<!select )(?<!tune )(?<!demo )"
    named = set(re.findall(other + r"(?<![\w-])--[a-z][a-z0-9-]*", body))
    assert named <= own, sorted(named - own)
