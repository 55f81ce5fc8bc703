"""Selection inside Inspect (`pulse_jax.harnesses.inspect_select.select_best`), against the real ``inspect-ai``, offline.

The models are the deterministic ``toy/`` provider of ``tests/inspect_toy.py`` (every score known
exactly; ``INSPECT_TOY_CALLS`` logs each finished call). What is checked: the manager asks exactly
what a plain `pulse_jax.live.Selector` asks on the same seed (so it evaluates what ``select
--inspect-task`` evaluates, and its guarantee is the Selector's), no sample is evaluated twice, the certificate, spend and tie groups reach Inspect's log,
bad set-ups are one line, a second eval on a log in use is refused, and ``kill -9`` at ten random
points, each resumed, ends where an uninterrupted run ends.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("inspect_ai", reason="inspect-ai is not installed (pip install -e \".[harness]\")")

import inspect_toy  # noqa: E402
from inspect_ai import eval as inspect_eval  # noqa: E402

from pulse_jax.harnesses import inspect_select as pj_inspect  # noqa: E402
from pulse_jax import live  # noqa: E402
from pulse_jax.live.plan import Plan  # noqa: E402
from pulse_jax import choices  # noqa: E402
from pulse_jax.errors import PulseInputError  # noqa: E402

pytestmark = pytest.mark.xdist_group("inspect")
HERE = Path(__file__).parent
TASK = str(HERE / "inspect_toy.py") + "@selected"
MODELS = ["toy/m90", "toy/m60", "toy/m40"]
N = 60


def score(model: str, sample_id) -> float:
    k = int(sample_id)
    prompt = f"What is {k} times 7? answer = {7 * k}"
    return float(inspect_toy.answer(model.split("/")[1], prompt).endswith(str(7 * k)))


def plain_selection(tmp_path: Path, seed: int = 0):
    """The same selection as a plain ask/tell loop on the selector's own draws (``select``'s options,
    the toy scores), and each model's order as ``select_best`` puts its samples in."""
    plan = Plan(log=str(tmp_path / "plain.db"), budget=3 * N, method="ucbe", batch_size=6, seed=seed, refit_every=0,
                stop="certified")
    estimator, rule, stop = plan.plugins()
    numbers = plan.numbers((estimator, rule, stop), len(MODELS))
    order = {m: [str(j + 1) for j in live.draw_order(seed, i, N, 6)] for i, m in enumerate(MODELS)}
    # no order given: the selector's own uniform draws, as `select --inspect-task` makes them
    selector = live.Selector(MODELS, [str(k) for k in range(1, N + 1)], 3 * N, method=estimator, batch_size=6,
                             refit_every=0, seed=seed, rule=rule, params=numbers, cs_grid=choices.cs_grid(plan.sequence, choices.keyword), stop=stop)
    while (request := selector.ask()) is not None:
        selector.tell(request, [score(request.model, e) for e in request.example_ids])
    return selector.result(), order


def run_managed(folder: Path, **task_args):
    return inspect_eval(TASK, model=MODELS, task_args={"log": str(folder / "run.db"), "n": N, **task_args},
                        log_dir=str(folder / "logs"), display="none")


@pytest.mark.integration   # two evals and a compilation (~12 s): the second test command; the default run keeps
# draw_order's equality with the selector's draws (tests/test_selector_order.py)
def test_the_manager_asks_what_a_plain_selector_asks_and_logs_its_certificate(tmp_path, monkeypatch):
    history = tmp_path / "history"      # token counts of two other models: what the cost estimate reads
    inspect_eval(inspect_toy.arithmetic(), model=["toy/h50", "toy/h70"], log_dir=str(history), display="none")
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("INSPECT_TOY_CALLS", str(calls))
    logs = run_managed(tmp_path, price="*=2/8", usage=str(history))
    assert [l.status for l in logs] == ["success"] * 3, [l.error for l in logs]
    expected, order = plain_selection(tmp_path)
    report = json.loads((tmp_path / "run_report" / "report.json").read_text())
    # the very same requests: each model's cells, in order, and the same certificate
    assert report["evaluated"] == {m: list(v) for m, v in expected.evaluated.items()}
    assert report["certificate"] == expected.certificate and report["separated"] and report["leader"] == "toy/m90"
    for m, ids in report["evaluated"].items():
        assert ids == order[m][:len(ids)]                   # each model's samples in its own order
    # each evaluated cell called the model once, and nothing else was called
    lines = calls.read_text().splitlines()
    assert len(lines) == len(set(lines)) == report["spent"] < 3 * N
    assert sorted(lines) == sorted(f"{m.split('/')[1]},What is {e} times 7? answer = {7 * int(e)}"
                                   for m, ids in report["evaluated"].items() for e in ids)
    # the certificate, tie groups and spend in every model's Inspect log
    for log in logs:
        summary = log.results.early_stopping
        assert summary.manager == pj_inspect.MANAGER
        meta = summary.metadata
        assert meta["certificate"] == expected.certificate and meta["spent_cells"] == report["spent"]
        assert meta["tie_groups"] == [list(g) for g in expected.groups]
        evaluated = report["evaluated"][log.eval.model]
        assert meta["evaluated"][log.eval.model] == len(evaluated)
        scored = [s for s in log.samples if s.scores]
        assert sorted(str(s.id) for s in scored) == sorted(evaluated)
        t_in = sum(inspect_toy.usage(f"What is {e} times 7? answer = {7 * int(e)}",
                                     inspect_toy.answer(log.eval.model[4:], f"What is {e} times 7? answer = "
                                                                            f"{7 * int(e)}")).input_tokens
                   for e in evaluated)
        assert meta["tokens"][log.eval.model]["input_tokens"] == t_in
        usd = 0.0                           # the spend at $2 / $8 per million input / output tokens
        for m, ids in report["evaluated"].items():
            for e in ids:
                prompt = f"What is {e} times 7? answer = {7 * int(e)}"
                u = inspect_toy.usage(prompt, inspect_toy.answer(m[4:], prompt))
                usd += (2 * u.input_tokens + 8 * u.output_tokens) / 1e6
        assert meta["spend"]["usd"] == pytest.approx(usd, rel=1e-9) and meta["spend"]["cells"] == report["spent"]
        stopped = {str(x.id) for x in summary.early_stops}
        assert stopped == {str(k) for k in range(1, N + 1)} - set(evaluated)
    assert np.allclose([r["estimate"] for r in report["ranking"]],
                       [expected.estimates[expected.models.index(r["model"])] for r in report["ranking"]])


def _one_line_error(logs, needle: str) -> str:
    messages = {l.error.message for l in logs if l.status == "error"}
    assert len(logs) == 3 and messages, [l.status for l in logs]
    message = next(m for m in messages if needle in m)
    assert "\n" not in message, message
    return message


def test_an_unshuffled_task_is_refused_in_one_line(tmp_path):
    logs = run_managed(tmp_path, manager_only=True)
    message = _one_line_error(logs, "does not shuffle its samples")
    assert "select_best(Task(...))" in message
    assert not (tmp_path / "run.db").exists()                # refused before the log was started


def test_one_order_shared_by_every_model_is_refused_in_one_line(tmp_path):
    logs = inspect_eval(TASK, model=MODELS, task_args={"log": str(tmp_path / "run.db"), "n": N, "manager_only": True},
                        log_dir=str(tmp_path / "logs"), display="none", sample_shuffle=5)
    _one_line_error(logs, "see the samples in one order")


def test_bad_options_are_one_line_in_its_keywords(tmp_path):
    with pytest.raises(PulseInputError, match=r"select_best: budgett is not a choice of a selection plan; its "
                                              r"choices are log, budget, ") as err:
        pj_inspect.select_best(log=tmp_path / "a.db", budgett=3)
    assert "\n" not in str(err.value)
    with pytest.raises(PulseInputError, match="select_best: batch_size must be >= 1"):
        pj_inspect.select_best(log=tmp_path / "b.db", batch_size=0)
    with pytest.raises(PulseInputError, match="does not exist"):
        pj_inspect.select_best(log=tmp_path / "nowhere" / "c.db")


def _subprocess(folder: Path, calls: Path, hang_after=None):
    env = {**os.environ, "INSPECT_TOY_CALLS": str(calls), "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent)])}
    env.pop("INSPECT_TOY_HANG_AFTER", None)
    if hang_after is not None:
        env["INSPECT_TOY_HANG_AFTER"] = str(hang_after)
    code = ("import inspect_toy, inspect_ai\n"
            f"logs = inspect_ai.eval({TASK!r}, model={MODELS!r}, task_args={{'log': {str(folder / 'run.db')!r}, "
            f"'n': {N}}}, "
            "log_dir='logs', display='none')\n"
            "assert all(l.status == 'success' for l in logs), [l.error for l in logs]\n")
    return subprocess.Popen([sys.executable, "-c", code], cwd=folder, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)


def _wait_for_calls(proc, calls: Path, count: int) -> None:
    deadline = time.time() + 240
    while not calls.exists() or calls.read_text().count("\n") < count:
        assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
        assert time.time() < deadline, "the run made too few calls"
        time.sleep(0.1)
    time.sleep(1.0)            # every call after `count` hangs; the finished ones are committed meanwhile


@pytest.mark.integration   # an eval and a compilation: the second test command
def test_a_score_is_committed_when_its_scorer_returns_before_inspect_completes_the_sample(tmp_path, monkeypatch):
    """Inspect calls the manager's complete_sample only after writing the sample to its own log (seconds
    later under load: a kill -9 in between lost scored samples, which a rerun generated again). The score
    reaches the selection's log from the scorer's ScoreEvent first; complete_sample finds it there."""
    found = []
    complete = pj_inspect.SelectBest.complete_sample

    async def checking(self, id, epoch, scores):
        selection = self.selection
        held = any(str(id) in map(str, b.scores) for b in selection.batches.get(self.model, []))
        found.append(held or str(id) in map(str, selection.selector.evaluated()[self.model]))
        return await complete(self, id, epoch, scores)

    monkeypatch.setattr(pj_inspect.SelectBest, "complete_sample", checking)
    logs = run_managed(tmp_path, concurrency=0)
    assert [log.status for log in logs] == ["success"] * 3, [log.error for log in logs]
    assert len(found) > 20 and all(found), found.count(False)


@pytest.mark.integration   # subprocesses for minutes: the second test command
def test_kill_9_at_ten_random_points_each_resumed_ends_as_an_uninterrupted_run(tmp_path):
    whole = tmp_path / "whole"
    whole.mkdir()
    done = _subprocess(whole, whole / "calls.txt")
    assert done.wait(timeout=600) == 0, done.stdout.read().decode()[-3000:]
    reference = json.loads((whole / "run_report" / "report.json").read_text())
    spent = reference["spent"]
    killed = tmp_path / "killed"
    killed.mkdir()
    calls = killed / "calls.txt"
    points = sorted(np.random.default_rng(46).choice(np.arange(3, spent - 2), size=10, replace=False).tolist())
    for point in points:
        proc = _subprocess(killed, calls, hang_after=point)
        _wait_for_calls(proc, calls, point)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert calls.read_text().count("\n") == point
    last = _subprocess(killed, calls)
    assert last.wait(timeout=600) == 0, last.stdout.read().decode()[-3000:]
    lines = calls.read_text().splitlines()
    assert len(lines) == len(set(lines)) == spent          # no sample evaluated twice, across 10 kills
    report = json.loads((killed / "run_report" / "report.json").read_text())
    for key in ("certificate", "leader", "separated", "spent", "evaluated", "ranking", "groups"):
        assert report[key] == reference[key], key


@pytest.mark.integration   # a subprocess that holds the log: the second test command
def test_a_second_eval_on_a_log_in_use_is_refused_in_one_line(tmp_path):
    calls = tmp_path / "calls.txt"
    first = _subprocess(tmp_path, calls, hang_after=10)
    try:
        _wait_for_calls(first, calls, 10)
        logs = inspect_eval(TASK, model=MODELS, task_args={"log": str(tmp_path / "run.db"), "n": N},
                            log_dir=str(tmp_path / "logs2"), display="none")
        message = _one_line_error(logs, "run.db")
        assert "in use" in message or "held" in message or "another" in message, message
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert calls.read_text().count("\n") == 10               # the refused run evaluated nothing


@pytest.mark.integration   # a subprocess with its own compilation: the second test command
def test_the_harness_page_inside_inspect_block_runs_as_written(tmp_path):
    import re

    text = (HERE.parent / "docs" / "harness.md").read_text().split("\n## Inside Inspect")[1].split("\n## ")[0]
    python, = re.findall(r"```python\n(.*?)```", text, re.S)
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    done = subprocess.run([sys.executable, "-c", python], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    counts = {line.split()[0]: int(line.split()[1]) for line in lines[:3]}
    assert set(counts) == {"mockllm/s40", "mockllm/s55", "mockllm/s70"} and sum(counts.values()) < 600
    assert lines[3].startswith("mockllm/s70 is the best model, with probability at least 0.95"), lines
    assert (tmp_path / "selection_report" / "report.md").is_file()


@pytest.mark.integration   # a second in-process eval of its own: the second test command
def test_eval_set_runs_the_same_selection(tmp_path):
    from inspect_ai import eval_set
    from inspect_ai.log import read_eval_log

    ok, logs = eval_set(TASK, model=MODELS, task_args={"log": str(tmp_path / "run.db"), "n": N},
                        log_dir=str(tmp_path / "logs"), display="none")
    assert ok
    expected, _ = plain_selection(tmp_path)
    for log in logs:
        full = read_eval_log(log.location)
        assert sorted(str(s.id) for s in full.samples if s.scores) == sorted(expected.evaluated[full.eval.model])
        assert full.results.early_stopping.metadata["certificate"] == expected.certificate


@pytest.mark.integration   # three evals with a compilation each: the second test command
def test_a_failing_model_ends_the_selection_at_once_and_a_rerun_resumes(tmp_path, monkeypatch):
    """One model's API fails (its generate raises from its 5th call on): the eval ends within seconds,
    every model's log says why, and running it again with the model fixed certifies without evaluating
    a sample twice beyond the batches in flight at the failure."""
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("INSPECT_TOY_CALLS", str(calls))
    monkeypatch.setenv("INSPECT_TOY_FAIL", "m60:5")
    inspect_toy.CALLS_BY_MODEL.clear()
    start = time.monotonic()
    logs = run_managed(tmp_path, concurrency=0)           # select_best's default concurrency
    assert time.monotonic() - start < 60
    # Only the failing model's log is an error (Inspect's own); the others end early-stopped, keeping what
    # they scored, and their early-stopping summary says which model failed.
    assert {l.eval.model: l.status for l in logs} == {"toy/m40": "success", "toy/m60": "error", "toy/m90": "success"}
    for log in logs:
        if log.status == "error":
            assert "the API is down" in log.error.message
        else:
            summary = log.results.early_stopping
            assert "toy/m60 failed on sample" in summary.metadata["error"], summary.metadata
    report = json.loads((tmp_path / "run_report" / "report.json").read_text())
    assert "toy/m60 failed on sample" in report["error"]
    first = calls.read_text().splitlines()
    monkeypatch.delenv("INSPECT_TOY_FAIL")
    logs = run_managed(tmp_path, concurrency=0)
    assert [l.status for l in logs] == ["success"] * 3, [l.error for l in logs]
    report = json.loads((tmp_path / "run_report" / "report.json").read_text())
    assert report["separated"] and report["leader"] == "toy/m90"
    lines = calls.read_text().splitlines()
    again = len(lines) - len(set(lines))
    assert again <= 6 * 16, again                           # at most the batches in flight at the failure
    assert len(set(lines)) == report["spent"] and len(first) < len(lines)


@pytest.mark.integration   # two `inspect eval` processes: the second test command
@pytest.mark.parametrize("argument, needle", [("epochs=2", "select_best: the task runs 2 epochs"),
                                              ("method=nosuch", "select_best: method: unknown method")])
def test_a_refusal_under_inspect_eval_is_said_once_without_a_traceback(tmp_path, argument, needle):
    """Refused when the task is made (not per model, in each model's log): Inspect prints the message
    alone, once, and exits with an error."""
    done = subprocess.run([sys.executable, "-m", "inspect_ai", "eval", str(HERE / "inspect_toy.py") + "@selected",
                           "--model", "mockllm/m1,mockllm/m2", "-T", f"log={tmp_path / 'run.db'}", "-T", argument],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, COLUMNS="200"))
    out = done.stdout + done.stderr
    assert done.returncode != 0 and "Traceback" not in out, out[-3000:]
    assert out.count("pulse-jax: error:") == 1 and needle in out, out[-3000:]


@pytest.mark.integration   # two evals (~14 s): the second test command
def test_a_finished_selection_run_again_writes_its_certificate_into_every_log(tmp_path, monkeypatch):
    """Inspect gives a log results (and the early-stopping summary in them) only when the eval scored a
    sample; run again, a finished selection scores none, and each model's log still carries the
    certificate, with every sample an early stop and no model called."""
    first = run_managed(tmp_path)
    assert [l.status for l in first] == ["success"] * 3
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("INSPECT_TOY_CALLS", str(calls))
    again = run_managed(tmp_path)
    assert [l.status for l in again] == ["success"] * 3 and not calls.exists()
    assert all(l.results.early_stopping.manager == pj_inspect.MANAGER for l in again)   # the returned logs too
    expected, _ = plain_selection(tmp_path)
    from inspect_ai.log import read_eval_log
    for log in again:
        on_disk = read_eval_log(log.location)
        summary = on_disk.results.early_stopping
        assert summary.manager == pj_inspect.MANAGER and summary.metadata["certificate"] == expected.certificate
        assert summary.metadata["evaluated"] == {m: len(v) for m, v in expected.evaluated.items()}
        assert sorted(int(x.id) for x in summary.early_stops) == list(range(1, N + 1))
        assert on_disk.results.total_samples == N and not [s for s in on_disk.samples or [] if s.scores]


def _scored(logs) -> set:
    """``(model name, sample id)`` of every sample an eval's logs hold a score for."""
    from inspect_ai.log import read_eval_log

    out = set()
    for log in logs:
        full = read_eval_log(log.location)
        out |= {(full.eval.model.split("/")[1], str(s.id)) for s in full.samples or () if s.scores}
    return out


def _called(lines) -> list:
    """``(model name, sample id)`` of each finished toy call (``name,What is k times 7? ...``)."""
    return [(name, prompt.split()[2]) for name, prompt in (line.split(",", 1) for line in lines)]


@pytest.mark.integration   # six evals with a compilation each: the second test command
@pytest.mark.parametrize("fail_on", [3, 9, 17])
def test_a_rerun_after_a_model_failure_generates_no_scored_sample_again(tmp_path, monkeypatch, fail_on):
    """16 batches in flight (select_best's default), one model failing from its ``fail_on``-th call: the
    rerun generates none of the samples the failed eval scored (they are told from the log, matched by
    model and sample id whatever the order they finished in) and certifies."""
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("INSPECT_TOY_CALLS", str(calls))
    monkeypatch.setenv("INSPECT_TOY_FAIL", f"m60:{fail_on}")
    monkeypatch.setenv("INSPECT_TOY_LATENCY", "0.01")       # samples finish out of the order they were asked
    inspect_toy.CALLS_BY_MODEL.clear()
    first = run_managed(tmp_path, concurrency=0)
    assert "error" in [l.status for l in first]
    scored = _scored(first)
    assert scored
    before = len(calls.read_text().splitlines())
    monkeypatch.delenv("INSPECT_TOY_FAIL")
    second = run_managed(tmp_path, concurrency=0)
    assert [l.status for l in second] == ["success"] * 3, [l.error for l in second]
    again = _called(calls.read_text().splitlines()[before:])
    assert not set(again) & scored, sorted(set(again) & scored)[:5]
    report = json.loads((tmp_path / "run_report" / "report.json").read_text())
    assert report["separated"] and report["leader"] == "toy/m90"


@pytest.mark.integration   # `inspect eval` in a subprocess with its own compilation: the second test command
def test_the_offline_command_line_recipe_runs_as_written(tmp_path):
    """docs/harness.md's "Offline, from the command line" block, run by bash as written: the `inspect`
    command finds pulse-jax's stand-in provider through the entry point, with no network."""
    import re

    text = (HERE.parent / "docs" / "harness.md").read_text().split("### Offline, from the command line")[1]
    block, = re.findall(r"```bash\n(.*?)```", text.split("\n## ")[0], re.S)
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    report = json.loads((tmp_path / "run_report" / "report.json").read_text())
    assert report["leader"] == "pulse-stand-in/candidate-023" and report["separated"]
    assert report["spent"] < 4 * 400
