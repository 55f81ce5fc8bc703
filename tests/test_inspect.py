"""Inspect in the loop, against the real ``inspect-ai`` package, offline: its logs in (scores and
tokens), live scoring through it (each sample evaluated once, across a kill -9), money budgets.

The models are Inspect's built-in mock model with deterministic custom outputs (Python API) and a
deterministic ``toy/`` provider registered by the task file (CLI runs, ``tests/inspect_toy.py``);
both answer by ``inspect_toy.answer``, so every expected score is known exactly.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("inspect_ai", reason="inspect-ai is not installed (pip install -e \".[harness]\")")

import inspect_toy  # noqa: E402
from inspect_ai import Task, eval as inspect_eval  # noqa: E402
from inspect_ai.dataset import Sample  # noqa: E402
from inspect_ai.model import ModelOutput, get_model  # noqa: E402
from inspect_ai.scorer import Score, mean, scorer  # noqa: E402
from inspect_ai.solver import generate  # noqa: E402

from conftest import cli_fails  # noqa: E402
from pulse_jax.errors import PulseInputError  # noqa: E402
from pulse_jax.harnesses import inspect_logs as ih  # noqa: E402
from pulse_jax.live import money  # noqa: E402

pytestmark = pytest.mark.xdist_group("inspect")
HERE = Path(__file__).parent


def mock(name: str):
    """Inspect's mock model answering by ``inspect_toy.answer`` (with token usage, so no tokenizer)."""
    def outputs(input, tools, tool_choice, config):
        prompt = input[-1].text
        text = inspect_toy.answer(name, prompt)
        out = ModelOutput.from_content(model=name, content=text)
        out.usage = inspect_toy.usage(prompt, text)
        return out
    return get_model(f"mockllm/{name}", custom_outputs=outputs)


def expected(name: str, task) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scores, input and output tokens that model ``name`` must get on every sample of ``task``."""
    rows = []
    for s in task.dataset:
        text = inspect_toy.answer(name, s.input)
        u = inspect_toy.usage(s.input, text)
        rows.append((float(text.endswith(s.target)), u.input_tokens, u.output_tokens))
    return tuple(np.array(c, dtype=float) for c in zip(*rows))


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """Full-run logs of three mock models on the toy task."""
    folder = tmp_path_factory.mktemp("inspect_history")
    names = ["m80", "m60", "m40"]
    inspect_eval(inspect_toy.arithmetic(), model=[mock(n) for n in names], log_dir=str(folder), display="none")
    return folder, names


def test_import_reads_every_score_and_its_tokens_exactly(history):
    folder, names = history
    logs = ih.read_inspect([folder])
    task = inspect_toy.arithmetic()
    assert logs.task == "arithmetic" and logs.scorer == "match"
    assert set(logs.scores.models) == {f"mockllm/{n}" for n in names}
    assert logs.scores.examples == tuple(str(k) for k in range(1, inspect_toy.N_SAMPLES + 1))
    for n in names:
        row = logs.scores.models.index(f"mockllm/{n}")
        s, t_in, t_out = expected(n, task)
        np.testing.assert_array_equal(logs.scores.scores[row], s)
        np.testing.assert_array_equal(logs.input_tokens[row], t_in)
        np.testing.assert_array_equal(logs.output_tokens[row], t_out)
    # the skill ordering the toy rule encodes shows through (a check that the scores are not all equal)
    means = logs.scores.scores.mean(1)
    assert means[logs.scores.models.index("mockllm/m80")] > means[logs.scores.models.index("mockllm/m40")]


def test_cli_import_writes_scores_and_tokens(history, tmp_path, capsys):
    from pulse_jax import cli
    from pulse_jax.fileio import data

    folder, _ = history
    out = tmp_path / "scores.csv"
    assert cli.main(["import", "inspect", str(folder), "--out", str(out)]) == 0
    assert "3 models x 60 examples" in capsys.readouterr().out
    matrix = data.load_csv(out)
    logs = ih.read_inspect([folder])
    np.testing.assert_array_equal(matrix.scores, logs.scores.scores)
    lines = (tmp_path / "scores.tokens.csv").read_text().splitlines()
    assert lines[0] == "model,example,input_tokens,output_tokens" and len(lines) == 1 + 3 * 60
    cli_fails(["import", "inspect", str(folder), "--out", str(out)], capsys, "exists; pass --force")


def _score_task(values, name="valued", epochs=1):
    """A task whose scorer returns ``values[k]`` on sample k (no model skill involved)."""
    @scorer(metrics=[mean()])
    def fixed():
        async def score(state, target):
            return Score(value=values[int(state.sample_id) - 1])
        return score
    return Task(name=name, dataset=[Sample(input=f"q{k} = 1", target="1", id=k) for k in range(1, len(values) + 1)],
                solver=generate(), scorer=fixed(), epochs=epochs)


def test_value_map_epochs_and_bad_logs_are_one_line_errors(tmp_path):
    logs = tmp_path / "letters"
    inspect_eval(_score_task(["C", "I", "P", "N"], epochs=2), model=mock("m50"), log_dir=str(logs), display="none")
    (logs / "notes.json").write_text("{}")       # a folder's other JSON files are passed over
    got = ih.read_inspect([logs])
    assert got.scores.scores.tolist() == [[1.0, 0.0, 0.5, 0.0]]
    assert ih.read_inspect([logs], value_map={"P": 0.0}).scores.scores.tolist() == [[1.0, 0.0, 0.0, 0.0]]
    apart = ih.read_inspect([logs], epochs="separate")
    assert apart.scores.examples[:2] == ("1@1", "1@2") and apart.scores.shape == (1, 8)
    # tokens: averaged epochs sum the tokens of both epochs
    np.testing.assert_array_equal(got.input_tokens, apart.input_tokens[:, ::2] + apart.input_tokens[:, 1::2])

    bad = tmp_path / "bad"
    inspect_eval(_score_task([0.5, 2.0]), model=mock("m50"), log_dir=str(bad), display="none")
    with pytest.raises(PulseInputError, match=r"sample 2 .*2 is outside \[0, 1\]"):
        ih.read_inspect([bad])
    words = tmp_path / "words"
    inspect_eval(_score_task(["yes", "C"], name="worded"), model=mock("m50"), log_dir=str(words), display="none")
    with pytest.raises(PulseInputError, match="'yes' is not a number and not in the value map.*--value-map yes=X"):
        ih.read_inspect([words])
    assert ih.read_inspect([words], value_map={"yes": 1}).scores.scores.tolist() == [[1.0, 1.0]]
    with pytest.raises(PulseInputError, match=r"no scorer 'exact'; scorers present: fixed"):
        ih.read_inspect([words], scorer="exact")
    with pytest.raises(PulseInputError, match="several tasks .*choose one with --task"):
        ih.read_inspect([words, logs])


def test_differing_samples_duplicated_runs_and_non_logs_are_refused(tmp_path):
    a = tmp_path / "a"
    inspect_eval(inspect_toy.arithmetic(), model=mock("m70"), log_dir=str(a), display="none", sample_id=[1, 2, 3])
    inspect_eval(inspect_toy.arithmetic(), model=mock("m30"), log_dir=str(a), display="none", sample_id=[1, 2])
    # which log is the reference depends on the files' order (same second, random suffixes): either way
    # the line names sample 3
    with pytest.raises(PulseInputError, match=r"other samples than .*\(1 (missing|more), e.g. sample 3 epoch 1\)"):
        ih.read_inspect([a])
    b = tmp_path / "b"
    for _ in range(2):
        inspect_eval(inspect_toy.arithmetic(), model=mock("m70"), log_dir=str(b), display="none", sample_id=[1, 2])
    with pytest.raises(PulseInputError, match="duplicated runs"):
        ih.read_inspect([b])
    c = tmp_path / "c"
    inspect_eval(inspect_toy.arithmetic(), model=mock("m70"), log_dir=str(c), display="none", sample_id=[1],
                 log_samples=False)
    with pytest.raises(PulseInputError, match="no samples"):
        ih.read_inspect([c])
    junk = tmp_path / "junk.json"
    junk.write_text(json.dumps({"hello": 1}))
    with pytest.raises(PulseInputError, match="junk.json: not a readable Inspect log"):
        ih.read_inspect([junk])


def test_live_scores_equal_the_full_runs_and_no_sample_is_evaluated_twice(history, tmp_path):
    folder, names = history
    full = ih.read_inspect([folder])
    scorer = ih.InspectScorer(inspect_toy.arithmetic(), {f"mockllm/{n}": mock(n) for n in names}, tmp_path / "live")
    assert scorer.sample_ids == list(range(1, 61))
    rng = np.random.default_rng(0)
    asked = 0
    for model in scorer.models:
        ids = sorted(rng.choice(scorer.sample_ids, 12, replace=False).tolist())
        got = scorer(model, ids)
        row = full.scores.models.index(model)
        assert got == [full.scores.scores[row, i - 1] for i in ids]
        asked += len(ids)
    assert scorer.evaluated == asked
    again = scorer("mockllm/m80", sorted(scorer._done["mockllm/m80"])[:4])
    assert scorer.evaluated == asked and len(again) == 4     # already scored: read, not evaluated
    # a new scorer on the same folder (a resumed run) reads every finished sample back
    resumed = ih.InspectScorer(inspect_toy.arithmetic(), {f"mockllm/{n}": mock(n) for n in names}, tmp_path / "live")
    for model in resumed.models:
        ids = sorted(resumed._done[model])
        assert resumed(model, ids) == scorer(model, ids)
    assert resumed.evaluated == 0
    assert resumed.usage()["mockllm/m80"][0] == 12
    s, t_in, t_out = expected("m80", inspect_toy.arithmetic())
    ids = sorted(resumed._done["mockllm/m80"])
    assert resumed.tokens("mockllm/m80", ids) == (t_in[np.array(ids) - 1].sum(), t_out[np.array(ids) - 1].sum())


def _select(folder: Path, *extra):
    return [sys.executable, "-m", "pulse_jax.cli", "select", "--models", "models.txt", "--inspect-task",
            str(folder / "inspect_toy.py") + "@arithmetic", "--budget", "150", "--batch-size", "6",
            "--log", "run.db", "--method", "ucbe", "--stop", "budget", "--quiet", *extra]


@pytest.mark.integration   # subprocesses for seconds each: the second test command
def test_kill_9_mid_batch_then_resume_evaluates_every_sample_once(tmp_path):
    shutil.copy(HERE / "inspect_toy.py", tmp_path)
    (tmp_path / "models.txt").write_text("toy/c80\ntoy/c60\ntoy/c40\n")
    calls = tmp_path / "calls.txt"
    env = {**os.environ, "INSPECT_TOY_CALLS": str(calls), "INSPECT_TOY_HANG_AFTER": "40", "PYTHONPATH": str(HERE.parent)}
    proc = subprocess.Popen(_select(tmp_path), cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 240
    while time.time() < deadline and (not calls.exists() or calls.read_text().count("\n") < 40):
        assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
        time.sleep(0.2)
    time.sleep(1.0)                       # the 41st call is now in flight (it never returns)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert calls.read_text().count("\n") == 40
    env.pop("INSPECT_TOY_HANG_AFTER")
    done = subprocess.run(_select(tmp_path), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = calls.read_text().splitlines()
    assert len(lines) == len(set(lines)) == 150      # every (model, sample) finished exactly once
    report = json.loads((tmp_path / "run_report" / "report.json").read_text())
    assert report["spent"] == 150
    for name, ids in report["evaluated"].items():   # the log's scores are the toy rule's
        row = next(r for r in report["ranking"] if r["model"] == name)
        truth = [float(inspect_toy.answer(name.split("/")[1], f"What is {k} times 7? answer = {7 * k}")
                       .endswith(str(7 * k))) for k in ids]
        assert row["cells"] == len(ids) and row["estimate"] == pytest.approx(np.mean(truth), abs=1e-6)   # float32 estimates


@pytest.mark.integration   # a real Inspect subprocess: the second test command
def test_money_budget_stops_before_passing_it_and_reports_the_spend(history, tmp_path):
    folder, _ = history
    shutil.copy(HERE / "inspect_toy.py", tmp_path)
    (tmp_path / "models.txt").write_text("toy/c80\ntoy/c60\ntoy/c40\n")
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    done = subprocess.run(_select(tmp_path, "--price", "*=2/8", "--budget-usd", "0.01", "--usage", str(folder)),
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    first = done.stdout.splitlines()[0]
    assert first.startswith("cost: up to about $0.01 (the money budget)"), first
    spend = json.loads((tmp_path / "run_report" / "report.json").read_text())["spend"]
    assert spend["stopped_by_budget"] and spend["usd"] <= 0.01
    assert "(running)" not in (tmp_path / "run_report" / "report.md").read_text()   # the money budget ended it
    # the measured spend is the toy tokens of exactly the evaluated cells at the price
    report = json.loads((tmp_path / "run_report" / "report.json").read_text())
    usd = 0.0
    for name, ids in report["evaluated"].items():
        for k in ids:
            prompt = f"What is {k} times 7? answer = {7 * k}"
            u = inspect_toy.usage(prompt, inspect_toy.answer(name.split("/")[1], prompt))
            usd += (2 * u.input_tokens + 8 * u.output_tokens) / 1e6
    assert spend["usd"] == pytest.approx(usd, rel=1e-9)
    assert spend["cells"] == report["spent"] < 150


def test_prices_and_the_meter():
    models = ["a", "b"]
    prices = money.parse_prices(["a=1/2", "*=3/4"], models, cost_per_call=0.01)
    assert prices["a"] == money.Price(1, 2, 0.01) and prices["b"] == money.Price(3, 4, 0.01)
    # "a=1" is a price per call now; three numbers are no price
    for bad, needle in [(["c=1/2"], "no candidate 'c'"), (["a=1/2/3"], "expected IN/OUT"), (["a=x/2"], "'x' is not"),
                        (["a=1/2"], "no price for 'b'"), (["a=-1/2", "*=1/1"], "non-negative")]:
        with pytest.raises(PulseInputError, match=needle):
            money.parse_prices(bad, models)
    flat = money.parse_prices([], models, cost_per_call=0.5)
    meter = money.Meter(models, flat, money.expected_cost_per_cell(models, flat), budget_usd=3.0)
    assert meter.update({"a": [1, 2], "b": [1]}) == 1.5
    assert meter.update({"a": [1, 2, 3], "b": [1]}) == 2.0          # only the new cell is added
    told = {"a": [1, 2, 3], "b": [1]}
    assert meter.fits("a", 2, told) and not meter.fits("a", 3, told)
    assert meter.stopped and "stopped: the next batch, a at $1.50, does not fit in the $1.00 left" in meter.line()
    assert meter.fits("b", 1, told) and not meter.stopped                  # a refusal is not final
    # cells paid for and not returned (in flight, or lost at a kill) count at their own model's price
    assert meter.update(told, {"a": 5, "b": 1}) == 3.0 and meter.cells == 6
    assert not meter.fits("b", 1, told)
    with pytest.raises(PulseInputError, match="needs a token history"):
        money.expected_cost_per_cell(models, prices)


@pytest.mark.integration   # minutes of real harness subprocesses: the second test command
def test_the_harness_page_inspect_part_runs_as_written(tmp_path):
    import re

    text = (HERE.parent / "docs" / "harness.md").read_text().split("\n## From Inspect")[1]
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    shell = re.findall(r"```bash\n(.*?)```", text, re.S)
    assert len(shell) == 2
    out = ""
    for block in shell:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
        out += done.stdout
    assert "6 models x 200 examples, 0 of 1,200 cells missing" in out
    assert out.count("cost: up to about $") == 1
    report = json.loads((tmp_path / "inspect_report" / "report.json").read_text())
    spend = report["spend"]
    assert spend["usd"] <= 0.25 and spend["cells"] == report["spent"]
    # the estimate behind the cost line, for the cells actually spent, is within 10% of the spend
    assert abs(spend["expected_usd"] - spend["usd"]) <= 0.10 * spend["usd"], spend
    assert len(list((tmp_path / "inspect.db.inspect").glob("*.eval"))) >= 3
    python, = re.findall(r"```python\n(.*?)```", text, re.S)
    done = subprocess.run([sys.executable, "-c", python], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("mockllm/s70 200 ")


def test_a_token_history_reads_logs_where_each_model_saw_other_samples(tmp_path):
    """``usage=`` / ``--usage`` reads a selection's own earlier logs, where each model was evaluated on the
    samples the selection asked for: as a token history, not a score matrix that needs the same samples."""
    logs = tmp_path / "own"
    inspect_eval(_score_task([1, 0, 1, 1], name="shared"), model=mock("m50"), log_dir=str(logs), display="none")
    inspect_eval(_score_task([1, 1, 0], name="shared"), model=mock("m80"), log_dir=str(logs), display="none")
    with pytest.raises(PulseInputError, match="has other samples than"):
        ih.read_inspect([logs])
    history = ih.usage_history([logs])
    assert history.scores.shape == (2, 4) and np.isnan(history.input_tokens).sum() == 1
    assert np.isfinite(np.nanmean(history.input_tokens, axis=1)).all()


def test_select_best_wraps_each_scorer_keeping_its_name_and_metrics(tmp_path, monkeypatch):
    """The wrapped scorers are the task's own to Inspect: same registry name, same metrics."""
    from inspect_ai._util.registry import registry_info, registry_unqualified_name
    from inspect_ai.model._model import active_model   # noqa: F401 -- the layout select_best reads

    from pulse_jax.harnesses import inspect_select

    monkeypatch.setattr(inspect_select, "_active_model", lambda: "toy/m70")
    original = inspect_toy.match()
    task = inspect_select.select_best(Task(dataset=inspect_toy.questions(12), solver=generate(), scorer=original),
                                      log=str(tmp_path / "run.db"), method="ucbe", batch_size=4, seed=0)
    (wrapped,) = task.scorer
    assert wrapped is not original and wrapped.__wrapped__ is original
    assert registry_unqualified_name(wrapped) == registry_unqualified_name(original) == "match"
    assert registry_info(wrapped).metadata == registry_info(original).metadata


def test_scorers_that_share_a_name_are_left_to_the_hook(tmp_path, monkeypatch):
    """Two scorers named alike get unique names in the log only later: select_best leaves them as they are
    (their scores are committed by the on_sample_event hook)."""
    from pulse_jax.harnesses import inspect_select

    monkeypatch.setattr(inspect_select, "_active_model", lambda: "toy/m70")
    scorers = [inspect_toy.match(), inspect_toy.match()]
    task = inspect_select.select_best(Task(dataset=inspect_toy.questions(12), solver=generate(), scorer=scorers),
                                      log=str(tmp_path / "run.db"), method="ucbe", batch_size=4, seed=0)
    assert task.scorer == scorers
