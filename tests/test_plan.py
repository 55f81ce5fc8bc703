"""`pulse_jax.live.Plan`: one selection plan that ``select``, ``select_best`` and Python share; it
round-trips through the log header and ``report.json``, and every choice is checked when it is made."""
import json
import os

import numpy as np
import pytest
from conftest import tiny_problem

from pulse_jax import choices, cli
from pulse_jax.errors import PulseInputError
from pulse_jax.live import journal
from pulse_jax.live.plan import Plan
from pulse_jax.live.report_files import write_report

OPTIONS = {"budget": 400, "method": "ucbe", "epsilon": 0.02, "param": ["rule.leader_fraction=0.25"], "seed": 3,
           "batch_size": 4, "retries": 5, "price": ["*=3/15"], "budget_usd": 2.5, "concurrency": 4,
           "call_timeout": 30.0, "delta": 0.1}


def _flags(options: dict) -> list[str]:
    out = []
    for key, value in options.items():
        for item in value if isinstance(value, list) else [value]:
            out += ["--" + key.replace("_", "-"), str(item)]
    return out


def _select_plan(tmp_path, options):
    args, extra = cli.app.parse(["select", "--models", "m.txt", "--evaluate", "pulse_jax.stand_in:score", "--log",
                                 str(tmp_path / "run.db"), *_flags(options)])
    assert not extra
    return cli.selection.plan_of(args)


def test_a_plan_round_trips_through_json():
    plan = Plan(log="run.db", **OPTIONS)
    assert Plan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    assert dict(plan.param) == {"rule.leader_fraction": 0.25}


def test_select_and_select_best_build_equal_plans_from_equal_options(tmp_path):
    from_flags = _select_plan(tmp_path, OPTIONS)
    from_keywords = Plan.from_dict({"log": str(tmp_path / "run.db"), **OPTIONS})
    assert from_flags == from_keywords
    pytest.importorskip("inspect_ai", reason="select_best runs inside Inspect (pip install -e '.[harness]')")
    from pulse_jax.harnesses import inspect_select

    manager = inspect_select.select_best(log=tmp_path / "run.db", **OPTIONS)
    assert manager.selection.plan == from_flags
    defaults = inspect_select.select_best(log=tmp_path / "other.db")
    assert defaults.selection.plan == Plan(log=str((tmp_path / "other.db").resolve()))


def test_the_plan_is_in_the_log_header_and_a_resume_keeps_the_logged_one(tmp_path):
    scores, train, _ = tiny_problem(seed=1, m=4, n=48)
    plan = Plan(log=str(tmp_path / "run.db"), budget=120, method="ucbe", batch_size=4, concurrency=1, seed=2)
    selector = plan.selector(["a", "b", "c", "d"], 48)
    request = selector.ask()
    selector.tell(request, scores[request.model_index, list(request.example_index)])
    selector.close()
    header, _ = journal.snapshot(tmp_path / "run.db")
    assert Plan.from_dict(header["plan"]) == plan
    again = Plan(log=str(tmp_path / "run.db"), budget=120, method="ucbe", batch_size=4, concurrency=1, seed=2,
                 retries=7)   # a resume may change how calls are retried
    resumed = again.selector(["a", "b", "c", "d"], 48)
    assert Plan.from_dict(resumed.plan) == plan and resumed.spent == 4
    resumed.close()


def test_report_json_records_the_plan(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from pulse_jax import stand_in

    (tmp_path / "m.txt").write_text("\n".join(stand_in.models()[:3]) + "\n")
    argv = ["select", "--models", "m.txt", "--examples", "60", "--budget", "120", "--evaluate",
            "pulse_jax.stand_in:score", "--method", "ucbe", "--log", "run.db", "--quiet", "--batch-size", "4"]
    assert cli.main(argv) == 0
    report = json.loads((tmp_path / "run_report" / "report.json").read_text())
    args, _ = cli.app.parse(argv)
    cli.selection.check_concurrency(args)    # the scorer's default concurrency, as select resolves it
    assert Plan.from_dict(report["plan"]) == cli.selection.plan_of(args)
    assert report["plan"]["method"] == "ucbe" and report["plan"]["budget"] == 120


@pytest.mark.parametrize("values, needle", [
    ({"batch_size": 0}, "batch_size must be >= 1, got 0"),
    ({"batch_size": 2.5}, "batch_size must be a whole number, got 2.5"),
    ({"delta": 1.5}, "delta 1.5: must lie strictly between 0 and 1"),
    ({"top_k": 2, "stop": "budget"}, "top_k sets the stopping rule; drop stop budget"),
    ({"top_k": 2, "epsilon": 0.1}, "epsilon and top_k: give one certificate"),
    ({"bounds": "some"}, "bounds must be 'all' or 'certification'"),
    ({"sequence": "hoeffding"}, "sequence must be 'bernstein' or 'betting'"),
    ({"concurrency": 0}, "concurrency must be >= 1"),
    ({"retries": -1}, "retries must be >= 0"),
    ({"call_timeout": 0}, "call_timeout must be a number of seconds > 0"),
    ({"grace": float("nan")}, "grace must be a number of seconds >= 0"),
    ({"budget_usd": 1.0}, "budget_usd needs prices: price MODEL=DOLLARS"),
    ({"param": ["delta=0.1"], "delta": 0.2}, "param delta: delta sets the same number; give one of them"),
    ({"param": [("rule.exploration", "x")]}, "param: rule.exploration='x' is not a number"),
    ({"seed": -1}, "seed"),
    ({"delta": "x"}, "delta must be a number, got 'x'"),
    ({"price": ["a=x"]}, "price 'a=x': 'x' is not a number"),
    ({"price": 5}, "price must be text or a list of texts, got 5"),
    ({"train": 5}, "train must be a file name, got 5"),
    ({"cheapest": 0.01}, "cheapest ranks the models by price: give price MODEL=DOLLARS"),
    ({"front": 0.01, "price": ["*=0.001"], "epsilon": 0.01}, "epsilon and front: give one certificate"),
    ({"price": [3]}, "price must be text or a list of texts"),
    ({"force": "yes"}, "force must be True or False"),
])
def test_every_value_is_checked_when_the_plan_is_made(values, needle):
    with pytest.raises(PulseInputError, match=None) as err:
        Plan(log="run.db", **values)
    assert needle in str(err.value), str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("values, needle", [
    ({"method": "ucbe,pulse"}, "method: a selection runs one method"),
    ({"method": "nonesuch"}, "method: unknown method (estimator) 'nonesuch'"),
    ({"rule": "os:system"}, "rule: 'os:system' is a function that needs arguments"),
    ({"param": ["nosuch=1"]}, "param nosuch: not a number of this run"),
    ({"train": "elsewhere.csv"}, "train elsewhere.csv: no such file"),
])
def test_names_and_files_are_checked_when_the_plugins_resolve_before_any_selector(values, needle, tmp_path):
    plan = Plan(log=str(tmp_path / "run.db"), **values)     # making a plan resolves nothing
    for resolve in (plan.plugins, lambda: plan.selector(["a", "b"], 40)):
        with pytest.raises(PulseInputError, match=None) as err:
            resolve()
        assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)
    assert not (tmp_path / "run.db").exists()


def test_making_a_plan_imports_no_plugin_reads_no_file_and_prints_nothing(tmp_path, monkeypatch, capsys):
    (tmp_path / "plan_probe_rule.py").write_text(
        "import pathlib\npathlib.Path(__file__).with_name('imported').write_text('yes')\n"
        "from pulse_jax.rules import ucb_index_rule\nrule = ucb_index_rule()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    looked, stat = [], os.stat
    monkeypatch.setattr(os, "stat", lambda path, *a, **k: looked.append(str(path)) or stat(path, *a, **k))
    plan = Plan(log=str(tmp_path / "run.db"), method="ucbe", rule="plan_probe_rule:rule", budget=40)
    monkeypatch.setattr(os, "stat", stat)
    assert not [p for p in looked if str(tmp_path) in p] and not (tmp_path / "imported").exists()
    assert capsys.readouterr() == ("", "")
    assert Plan.from_dict(plan.to_dict()) == plan and not (tmp_path / "imported").exists()
    assert plan.plugins()[1].name == "ucbe" and (tmp_path / "imported").exists()
    assert plan.plugins() is plan.plugins()              # resolved once


def test_the_command_line_spells_choices_as_flags(tmp_path):
    with pytest.raises(PulseInputError, match="--batch-size must be >= 1, got 0"):
        Plan.from_dict({"log": "run.db", "batch_size": 0}, spell=choices.flag)
    with pytest.raises(PulseInputError, match="--budget-usd needs prices: --price MODEL=DOLLARS"):
        Plan.from_dict({"log": "run.db", "budget_usd": 1.0}, spell=choices.flag)


def test_a_plan_runs_to_the_same_report_as_the_selector_it_builds(tmp_path):
    from pulse_jax import live

    scores, _, _ = tiny_problem(seed=4, m=3, n=40)
    plan = Plan(log=str(tmp_path / "run.db"), budget=90, method="ucbe", batch_size=5, concurrency=2)
    selector = plan.selector(["a", "b", "c"], 40)

    def evaluate(model, ids):
        return scores["abc".index(model), list(ids)]

    report = live.run(evaluate, selector, progress=False, **plan.run_options())
    out = write_report(plan, report, selector, figure=False)
    written = json.loads((out / "report.json").read_text())
    assert written["plan"] == plan.to_dict() and written["spent"] == report.to_dict()["spent"]


def test_select_best_is_at_the_front_door_without_loading_inspect():
    """``pulse_jax.select_best`` after ``import pulse_jax`` (the README's one-liner); Inspect itself loads
    only when a selection runs."""
    import subprocess
    import sys

    code = ("import sys, pulse_jax\n"
            "f = pulse_jax.select_best\n"
            "print(f.__module__, 'inspect_ai' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["pulse_jax.harnesses.inspect_select", "False"], out


def test_a_selection_without_history_runs_ucbe_and_says_how_to_give_history(tmp_path, monkeypatch, capsys):
    """No ``method`` and no historical scores: UCB-E on the observations (a note says how to give history
    for PULSE); with ``train``, the default is PULSE hedged; a method given is kept (and refused without
    the history it needs)."""
    from pulse_jax import stand_in

    monkeypatch.chdir(tmp_path)
    models = stand_in.models()[:3]
    (tmp_path / "m.txt").write_text("\n".join(models) + "\n")
    argv = ["select", "--models", "m.txt", "--examples", "60", "--budget", "120", "--evaluate",
            "pulse_jax.stand_in:score", "--log", "run.db", "--quiet", "--batch-size", "4"]
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    assert "note: no historical scores, so the selection runs UCB-E" in err and "give --train" in err
    report = json.loads((tmp_path / "run_report" / "report.json").read_text())
    assert report["method"] == "ucbe" and report["plan"]["method"] is None
    assert Plan(log="x.db").method_name() == "ucbe"
    (tmp_path / "history.csv").write_text("model,q0\nh0,1\nh1,0\n")
    assert Plan(log="x.db", train="history.csv").method_name() == "pulse_hedged"
    with pytest.raises(PulseInputError, match="train elsewhere.csv: no such file"):
        Plan(log="x.db", train="elsewhere.csv").plugins()
    with pytest.raises(PulseInputError, match="method pulse_hedged needs side information: pass train="):
        Plan(log=str(tmp_path / "y.db"), method="pulse_hedged").selector(models, 60)


def test_a_param_without_a_value_is_told_the_param_syntax():
    with pytest.raises(PulseInputError, match=r"param 'delta': expected PATH=VALUE \(e.g. rule.exploration=0.5\)"):
        Plan(log="run.db", param=["delta"])
    with pytest.raises(PulseInputError, match=r"--param 'delta': expected PATH=VALUE"):
        Plan.from_dict({"log": "run.db", "param": ["delta"]}, spell=choices.flag)


def test_a_certificate_larger_than_the_field_is_refused_by_the_plan(tmp_path):
    """``top_k=7`` with 5 models: one line from the plan, before any plug-in is built for the run."""
    plan = Plan(log=str(tmp_path / "run.db"), method="ucbe", top_k=7)
    with pytest.raises(PulseInputError, match=r"^top_k 7: must be smaller than the number of models \(5\)"):
        plan.selector(["a", "b", "c", "d", "e"], 40)


def test_a_budget_beyond_every_cell_is_a_note_in_the_plans_words(tmp_path, capsys, recwarn):
    selector = Plan(log=str(tmp_path / "run.db"), budget=100_000, method="ucbe").selector(["a", "b"], 40)
    assert selector.config.budget == 80
    selector.close()
    from pulse_jax.errors import PulseNote

    notes = [str(w.message) for w in recwarn if issubclass(w.category, PulseNote)]   # the CLI prints each as a line
    assert "budget 100,000 is more than the 80 cells of 2 models x 40 examples; using 80" in notes, notes
    assert not [w for w in recwarn if issubclass(w.category, UserWarning) and not issubclass(w.category, PulseNote)]


def test_float32_numbers_are_written_at_their_own_precision():
    from pulse_jax.fileio.jsonable import plain_float32

    assert plain_float32(np.float32(0.55)) == 0.55 and plain_float32(np.float32(0.05)) == 0.05
    assert plain_float32(float(np.float32(0.55))) == 0.55          # already widened to float64: the same
    assert plain_float32(np.nan) is None and plain_float32(None) is None


def test_what_a_method_without_predictions_would_ignore_is_refused(tmp_path, capsys):
    from conftest import cli_fails

    for name, value in (("train", "history.csv"), ("rank", 4)):
        with pytest.raises(PulseInputError, match=f"^{name} {value}: method ucbe uses no predictions, so {name} "
                                                  "would be ignored"):
            Plan(log=str(tmp_path / "run.db"), method="ucbe", **{name: value}).selector(["a", "b"], 40)
    (tmp_path / "m.txt").write_text("a\nb\n")
    base = ["select", "--models", str(tmp_path / "m.txt"), "--examples", "40", "--budget", "80", "--evaluate",
            "pulse_jax.stand_in:score", "--log", str(tmp_path / "run.db")]
    cli_fails(base + ["--method", "ucbe", "--rank", "100000"], capsys, "--rank 100000: --method ucbe uses no "
                                                                        "predictions, so --rank would be ignored")
    cli_fails(base + ["--value-map", "C=1"], capsys, "--value-map reads Inspect score values")
    for option, value in (("--inspect-log-dir", str(tmp_path / "logs")), ("--inspect-scorer", "match"),
                          ("--inspect-metric", "acc")):
        cli_fails(base + [option, value], capsys, f"{option} is read by --inspect-task only")
    assert not (tmp_path / "logs").exists() and not (tmp_path / "run.db").exists()


def test_a_dangling_link_as_the_report_folder_is_refused_before_anything_is_paid(tmp_path, capsys):
    from conftest import cli_fails

    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    with pytest.raises(PulseInputError, match="report .*gone: a symbolic link to nothing"):
        Plan(log=str(tmp_path / "run.db"), method="ucbe", report=str(tmp_path / "gone")).selector(["a", "b"], 40)
    assert not (tmp_path / "run.db").exists()          # refused before the log was started
    (tmp_path / "m.txt").write_text("a\nb\n")
    cli_fails(["select", "--models", str(tmp_path / "m.txt"), "--examples", "40", "--budget", "80", "--method", "ucbe",
               "--evaluate", "pulse_jax.stand_in:score", "--log", str(tmp_path / "run.db"), "--report",
               str(tmp_path / "gone")], capsys, "--report " + str(tmp_path / "gone") + ": a symbolic link to nothing")
    cli_fails(["demo", "--out", str(tmp_path / "gone"), "--reps", "2"], capsys, "a symbolic link to nothing")


@pytest.mark.parametrize("history", [False, True])
def test_a_selection_made_through_selector_and_through_plan_is_the_same_selection(tmp_path, history):
    """One set of defaults (`pulse_jax.choices`) behind both doors: ``Selector(...)`` with every choice left
    out and ``Plan(...).selector(...)`` make the same kernel (method, rules, sequences, numbers,
    concurrency) and, on the same scores, the same selection."""
    from pulse_jax import live
    from pulse_jax.fileio import data

    scores, train, _ = tiny_problem(seed=5, m=4, n=48)
    models = ["a", "b", "c", "d"]
    given = {}
    if history:
        data.save_csv(data.ScoreMatrix(train, tuple(f"h{i}" for i in range(len(train))), tuple(map(str, range(48)))),
                      tmp_path / "history.csv")
        given = {"train": str(tmp_path / "history.csv"), "rank": 3}
    plan = Plan(log=str(tmp_path / "plan.db"), budget=160, batch_size=4, **given)
    through_plan = plan.selector(models, 48)
    direct = live.Selector(models, 48, 160, batch_size=4, log=tmp_path / "direct.db",
                           **({"train": train, "rank": 3} if history else {}))
    assert direct.method == through_plan.method == ("pulse_hedged" if history else "ucbe")
    assert direct.config == through_plan.config
    assert direct.params == through_plan.params

    def evaluate(model, ids):
        return scores[models.index(model), list(ids)]

    reports = [live.run(evaluate, s, handle_signals=False) for s in (through_plan, direct)]
    for s in (through_plan, direct):
        s.close()
    assert reports[0].evaluated == reports[1].evaluated and reports[0].claimed == reports[1].claimed
    np.testing.assert_array_equal(reports[0].estimates, reports[1].estimates)


def test_the_concurrency_has_one_owner_and_a_passed_keyword_is_never_ignored(small_bench):
    """The selector's concurrency is the one the runner keeps in flight: ``run`` takes none of its own, and a
    scorer that evaluates fewer batches at once is refused in one line, not run at another concurrency."""
    from pulse_jax import live

    b, V = small_bench
    selector = live.Selector(b.models, 200, 400, V=V, concurrency=4)
    with pytest.raises(TypeError, match="concurrency"):
        live.run(lambda m, ids: [0.0] * len(ids), selector, concurrency=2)

    def one_at_a_time(model, ids):
        return b.scores[b.models.index(model), ids].tolist()

    one_at_a_time.max_concurrency = 1
    with pytest.raises(PulseInputError, match=r"^concurrency 4: this scorer evaluates at most 1 batch\(es\) at "
                                              r"once; make the selector with concurrency=1"):
        live.run(one_at_a_time, selector, handle_signals=False)
    for keyword in ({"delta": 0.1}, {"bounds": "all"}, {"exploration": 2.0}):
        with pytest.raises(PulseInputError, match=f"{next(iter(keyword))} given beside params="):
            live.Selector(b.models, 200, 400, V=V, params={"delta": 0.05}, **keyword)
