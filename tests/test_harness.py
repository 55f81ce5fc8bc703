"""Evaluation harnesses in the loop, against the real lm-evaluation-harness (offline): its
``--log_samples`` folders imported into a score matrix, live scoring through it, and a live
selection through it killed with ``kill -9`` and resumed without the model computing any document
twice. Long tables (CSV, JSONL, Parquet) too."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import log_records, recovered_records

from pulse_jax import cli
from pulse_jax.harnesses import lm_evaluation
from pulse_jax.errors import PulseInputError

TESTS = Path(__file__).resolve().parent
# The lm-eval runs behind these tests are built once: every test that uses them runs in one worker.
pytestmark = pytest.mark.xdist_group("lm_eval")
N_DOCS = 40
CANDIDATES = {f"pulse_arith:skill={skill},seed={seed}": seed for seed, skill in ((1, 0.9), (2, 0.6), (3, 0.4), (4, 0.2))}
HISTORY = [f"pulse_arith:skill={0.1 * k:.1f},seed={10 + k}" for k in range(1, 9)]


# ----------------------------------------------------------------------------- long tables


def _long_rows():
    return [("m1", "q1", 1.0), ("m1", "q2", 0.0), ("m2", "q1", 0.5), ("m2", "q3", 1.0), ("m1", "q1", 1.0)]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_long_tables_become_a_matrix_with_missing_cells(tmp_path, suffix):
    rows = _long_rows()
    path = tmp_path / f"scores{suffix}"
    if suffix == ".csv":
        path.write_text("who,item,value\n" + "".join(f"{m},{e},{s}\n" for m, e, s in rows))
    elif suffix == ".jsonl":
        path.write_text("".join(json.dumps({"who": m, "item": e, "value": s}) + "\n" for m, e, s in rows))
    else:
        pa = pytest.importorskip("pyarrow", reason="Parquet needs pyarrow (the harness extra)")
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"who": [r[0] for r in rows], "item": [r[1] for r in rows],
                                 "value": [r[2] for r in rows]}), path)
    matrix = lm_evaluation.read_long(path, model="who", example="item", score="value")
    assert matrix.models == ("m1", "m2") and matrix.examples == ("q1", "q2", "q3")
    np.testing.assert_array_equal(np.isnan(matrix.scores), [[False, False, True], [False, True, False]])
    assert matrix.scores[0, 0] == 1.0 and matrix.scores[1, 0] == 0.5
    assert "2 models x 3 examples, 2 of 6 cells missing" in lm_evaluation.describe(matrix)


@pytest.mark.parametrize("text, needle", [
    ("model,example,score\nm1,q1,1\nm1,q1,0\n", "has score 1 on line 2 and 0 on line 3"),
    ("model,example,score\nm1,q1,7\n", "line 2: score 7 is outside [0, 1]; pulse-jax needs scores in [0, 1]; rescale"),
    ("model,example,score\nm1,q1,yes\n", "line 2: score 'yes' is not a number"),
    ("model,item,score\nm1,q1,1\n", "no column 'example' (columns: model, item, score)"),
])
def test_bad_long_tables_are_refused_naming_the_line(tmp_path, text, needle):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(PulseInputError) as err:
        lm_evaluation.read_long(path)
    assert needle in str(err.value) and str(path) in str(err.value)


# ----------------------------------------------------------------------------- lm-eval, for real

RUNNER = textwrap.dedent("""
    # Runs lm-eval's own command line once per model spec, in one process (lm-eval imports slowly).
    import sys
    sys.path.insert(0, {tests!r})
    import lm_eval_models  # noqa: F401  (registers the deterministic test model "pulse_arith")
    from lm_eval.__main__ import cli_evaluate
    from lm_eval.tasks import TaskManager

    # The task lives in the include path: skip indexing lm-eval's built-in tasks (~6 s per call). The
    # command line, the evaluation and the logs are lm-eval's own.
    _index = TaskManager.__init__
    TaskManager.__init__ = lambda self, *a, **k: _index(self, *a, **dict(k, include_defaults=False))

    if any(spec.startswith("hf:") for spec in sys.argv[2::2]):
        import lm_eval.models.huggingface  # noqa: F401  (registers "hf"; the test model's registration came first)
    for out, spec in zip(sys.argv[1::2], sys.argv[2::2]):
        kind, _, args = spec.partition(":")
        device = ["--device", "cpu"] if kind == "hf" else []
        sys.argv = ["lm_eval", "--model", kind, "--model_args", args, *device, "--tasks", "pulse_arith",
                    "--include_path", {task_dir!r}, "--output_path", out, "--log_samples"]
        cli_evaluate()
""")


def _env(**extra):
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", TQDM_DISABLE="1", **extra)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    return env


# Session scope: built once per test worker, even when the scheduler interleaves other modules' tests.
@pytest.fixture(scope="session")
def lm_eval_run(tmp_path_factory):
    """A local multiple-choice task and real ``lm_eval --log_samples`` folders: the 4 candidates in
    one output folder, 8 historical models in another."""
    pytest.importorskip("lm_eval", reason="lm-eval is not installed (pip install -e '.[harness]')")
    root = tmp_path_factory.mktemp("lm_eval")
    task_dir = root / "task"
    task_dir.mkdir()
    with open(task_dir / "arith.jsonl", "w") as handle:
        for i in range(N_DOCS):
            right = i + i % 7
            handle.write(json.dumps({"question": f"Question {i}: what is {i} + {i % 7}?",
                                     "choices": [str(right + 1), str(right), str(right - 2), str(2 * right + 3)],
                                     "answer": 1}) + "\n")
    (task_dir / "pulse_arith.yaml").write_text(textwrap.dedent(f"""\
        task: pulse_arith
        dataset_path: json
        dataset_kwargs:
          data_files:
            test: {task_dir / 'arith.jsonl'}
        test_split: test
        output_type: multiple_choice
        doc_to_text: "{{{{question}}}}\\nAnswer:"
        doc_to_choice: "{{{{choices}}}}"
        doc_to_target: answer
        metric_list:
          - metric: acc
            aggregation: mean
            higher_is_better: true
        """))
    runner = root / "run_lm_eval.py"
    runner.write_text(RUNNER.format(tests=str(TESTS), task_dir=str(task_dir)))
    args = []
    for spec in CANDIDATES:
        args += [str(root / "candidates"), spec]
    for spec in HISTORY:
        args += [str(root / "history"), spec]
    done = subprocess.run([sys.executable, str(runner), *args], cwd=root, env=_env(), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return {"root": root, "task_dir": task_dir, "candidates": root / "candidates", "history": root / "history",
            "runner": runner}


@pytest.mark.integration   # real lm-eval runs (the session fixture): the second test command
def test_lm_eval_logs_import_and_equal_live_scores(lm_eval_run):
    matrix = lm_evaluation.read_lm_eval([lm_eval_run["candidates"]], "pulse_arith", "acc")
    assert set(matrix.models) == set(CANDIDATES)
    assert matrix.examples == tuple(str(i) for i in range(N_DOCS)) and not np.isnan(matrix.scores).any()
    means = dict(zip(matrix.models, matrix.scores.mean(axis=1)))
    assert means["pulse_arith:skill=0.9,seed=1"] > means["pulse_arith:skill=0.2,seed=4"]   # skill shows
    sys.path.insert(0, str(TESTS))
    import lm_eval_models  # noqa: F401

    scorer = lm_evaluation.LmEvalScorer("pulse_arith", list(CANDIDATES), include_path=lm_eval_run["task_dir"])
    assert scorer.doc_ids == list(range(N_DOCS))
    rng = np.random.default_rng(0)
    for model in CANDIDATES:
        ids = rng.choice(N_DOCS, size=7, replace=False).tolist()
        live = scorer(model, ids)
        np.testing.assert_array_equal(live, matrix.scores[matrix.models.index(model), ids])
    assert scorer.calls == 4 and 0 < scorer.model_seconds <= scorer.lm_eval_seconds <= scorer.total_seconds


def _copy_logs(src: Path, dst: Path):
    import shutil

    shutil.copytree(src, dst)
    return dst


def _edit_first_sample(folder: Path, edit):
    path = sorted(folder.rglob("samples_*.jsonl"))[0]
    lines = path.read_text().splitlines()
    row = json.loads(lines[0])
    edit(row)
    lines[0] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.integration   # real lm-eval runs (the session fixture): the second test command
def test_lm_eval_import_refuses_bad_logs_in_one_line(lm_eval_run, tmp_path):
    cands, hist = lm_eval_run["candidates"], lm_eval_run["history"]
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = [
        (lambda: lm_evaluation.read_lm_eval([empty], "pulse_arith", "acc"), "no lm-eval sample files"),
        (lambda: lm_evaluation.read_lm_eval([cands], "mmlu", "acc"), "no samples for task 'mmlu'; tasks present: pulse_arith"),
        (lambda: lm_evaluation.read_lm_eval([cands], "pulse_arith", "f1"), "no metric 'f1'; metrics present: acc"),
        (lambda: lm_evaluation.read_lm_eval([cands], "pulse_arith", "acc", "strict-match"),
         "no samples with filter 'strict-match'; filters present: none"),
        (lambda: lm_evaluation.read_lm_eval([cands, _copy_logs(cands, tmp_path / "again")], "pulse_arith", "acc"),
         "two folders hold a model of that name"),
    ]
    scaled = _copy_logs(cands, tmp_path / "scaled")
    _edit_first_sample(scaled, lambda row: row.update(acc=2.0))
    cases.append((lambda: lm_evaluation.read_lm_eval([scaled], "pulse_arith", "acc"), "outside [0, 1]; pulse-jax needs"))
    other = _copy_logs(hist, tmp_path / "other_docs")
    _edit_first_sample(other, lambda row: row.update(doc_hash="0" * 64))
    cases.append((lambda: lm_evaluation.read_lm_eval([cands, other], "pulse_arith", "acc"),
                  "differs between"))
    for call, needle in cases:
        with pytest.raises(PulseInputError) as err:
            call()
        assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)


@pytest.mark.integration   # real lm-eval runs (the session fixture): the second test command
def test_cli_imports_lm_eval_logs_and_long_tables(lm_eval_run, tmp_path, capsys):
    out = tmp_path / "history.csv"
    assert cli.main(["import", "lm-eval", str(lm_eval_run["history"]), "--task", "pulse_arith", "--metric", "acc",
                     "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "8 models x 40 examples, 0 of 320 cells missing, scores in [0, 1] (binary)" in printed
    assert out.read_text().startswith("model,0,1,2,")
    assert cli.main(["import", "lm-eval", str(lm_eval_run["history"]), "--task", "pulse_arith", "--metric", "acc",
                     "--out", str(out)]) == 2
    assert "exists; pass --force" in capsys.readouterr().err
    long = tmp_path / "long.jsonl"
    long.write_text("".join(json.dumps({"model": m, "example": e, "score": s}) + "\n" for m, e, s in _long_rows()))
    assert cli.main(["import", "long", str(long), "--out", str(tmp_path / "wide.csv")]) == 0
    assert "2 models x 3 examples" in capsys.readouterr().out


def _calls(path: Path) -> Counter:
    """How many times the model computed each (seed, document): 4 requests (one per choice) per document."""
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter(lines)


@pytest.mark.slow
@pytest.mark.integration   # minutes of real harness subprocesses: the second test command
def test_live_select_through_lm_eval_survives_kill_9_without_recomputing(lm_eval_run, tmp_path):
    """4 candidates x 40 documents through lm-eval, with 8 historical models' logs as side information;
    killed with SIGKILL mid-run and resumed: every (model, document) the model computed, it computed
    once, and the resumed run ends like an uninterrupted one."""
    assert cli.main(["import", "lm-eval", str(lm_eval_run["history"]), "--task", "pulse_arith", "--metric", "acc",
                     "--out", str(tmp_path / "history.csv")]) == 0
    (tmp_path / "models.txt").write_text("\n".join(CANDIDATES) + "\n")
    args = [sys.executable, "-m", "pulse_jax.cli", "select", "--models", "models.txt", "--budget", "140",
            "--batch-size", "4", "--refit-every", "5", "--rank", "3", "--stop", "budget", "--quiet",
            "--lm-eval-task", "pulse_arith", "--lm-eval-include", str(lm_eval_run["task_dir"]),
            "--lm-eval-plugin", "lm_eval_models", "--train", "history.csv"]
    calls = tmp_path / "calls.txt"
    env = _env(PULSE_LM_CALLS=str(calls), PULSE_LM_DELAY="0.02")
    first = subprocess.Popen(args + ["--log", "run.db"], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    log = tmp_path / "run.db"
    deadline = time.time() + 300
    while time.time() < deadline and len(log_records(log)) <= 11:
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=60)
    told_before = len(recovered_records(log))
    assert 0 < told_before < 35, "the run must be killed mid-way"
    second = subprocess.run(args + ["--log", "run.db"], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    counts = _calls(calls)
    # Each document once (4 requests), except that the one request the SIGKILL landed on, between its
    # computation and lm-eval's cache write, is computed again: nothing can save a result the kill erased.
    off = {k: v for k, v in counts.items() if v != 4}
    assert counts and (not off or (len(off) == 1 and set(off.values()) == {5})), off
    records = log_records(log)
    cells = [(r["model"], e) for r in records for e in r["examples"]]
    assert len(cells) == len(set(cells)) == 140
    assert len(counts) == 140                         # the model computed exactly the cells that were logged
    report = json.loads((tmp_path / "run_report" / "report.json").read_text())
    clean = subprocess.run(args + ["--log", "clean.db"], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                           timeout=600)
    assert clean.returncode == 0, clean.stderr[-3000:]
    again = json.loads((tmp_path / "clean_report" / "report.json").read_text())
    assert report["leader"] == again["leader"] and report["spent"] == again["spent"] == 140


TINY_HF = textwrap.dedent("""
    # Tiny randomly initialised GPT-2 models with a tokenizer trained here: a real Hugging Face model
    # for lm-eval's "hf" backend, built offline.
    import sys
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    texts = [f"Question {i}: what is {i} + {i % 7}? Answer: {i + i % 7} {2 * i} {i - 2}" for i in range(120)]
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=["[UNK]", "[EOS]"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="[EOS]", pad_token="[EOS]")
    for folder, seed in zip(sys.argv[1::2], sys.argv[2::2]):
        fast.save_pretrained(folder)
        torch.manual_seed(int(seed))
        config = GPT2Config(vocab_size=fast.vocab_size, n_positions=64, n_embd=16, n_layer=1, n_head=2,
                            eos_token_id=fast.eos_token_id, bos_token_id=fast.eos_token_id)
        GPT2LMHeadModel(config).save_pretrained(folder)
""")


LIVE_HF = textwrap.dedent("""
    import json
    from pulse_jax.harnesses import lm_evaluation
    scorer = lm_evaluation.LmEvalScorer("pulse_arith", {specs!r}, include_path={task_dir!r})
    scores = {{spec: [float(x) for x in scorer(spec, {ids!r})] for spec in {specs!r}}}
    loaded = len(scorer._models)
    scorer({specs!r}[0], [1, 2])
    print(json.dumps({{"scores": scores, "loaded": loaded, "after": len(scorer._models)}}))
""")


@pytest.mark.slow
@pytest.mark.integration   # minutes of real harness subprocesses: the second test command
def test_tiny_hugging_face_models_through_lm_eval_logs_and_live(lm_eval_run, tmp_path):
    """lm-eval's Hugging Face backend on tiny random GPT-2 models built offline: their --log_samples
    logs import, and live scores through the adapter equal the logged ones."""
    pytest.importorskip("transformers", reason="the Hugging Face backend is not installed (transformers, torch)")
    pytest.importorskip("torch", reason="the Hugging Face backend is not installed (transformers, torch)")
    builder = tmp_path / "build.py"
    builder.write_text(TINY_HF)
    folders = [tmp_path / f"tiny{seed}" for seed in (1, 2)]
    built = subprocess.run([sys.executable, str(builder)] + [x for f, s in zip(folders, (1, 2)) for x in (str(f), str(s))],
                           env=_env(), capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    specs = [f"hf:pretrained={folder},dtype=float32" for folder in folders]
    done = subprocess.run([sys.executable, str(lm_eval_run["runner"])] + [x for spec in specs
                                                                          for x in (str(tmp_path / "logs"), spec)],
                          env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    matrix = lm_evaluation.read_lm_eval([tmp_path / "logs"], "pulse_arith", "acc")
    assert sorted(matrix.models) == sorted(specs) and matrix.scores.shape == (2, N_DOCS)
    ids = [0, 5, 11, 23, 38]
    # The live scorer runs in its own process: torch stays out of this test worker, which runs JAX tests
    # after this one (a worker that had loaded torch crashed in XLA's loading of a cached program).
    live = subprocess.run([sys.executable, "-c", LIVE_HF.format(specs=specs, task_dir=str(lm_eval_run["task_dir"]),
                                                                ids=ids)],
                          env=_env(), capture_output=True, text=True, timeout=600)
    assert live.returncode == 0, live.stderr[-3000:]
    out = json.loads(live.stdout.splitlines()[-1])
    for spec in specs:
        np.testing.assert_array_equal(out["scores"][spec], matrix.scores[matrix.models.index(spec), ids])
    assert out["loaded"] == out["after"] == 2        # each model loaded once
