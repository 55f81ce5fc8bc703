"""Inputs that once gave a traceback, a silent wrong answer, or an overwritten file: each is now refused in
one line naming the file, option or field (exit 2), or handled as documented."""
import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import cli_fails, tiny_problem

from pulse_jax import cli
from pulse_jax.errors import PulseInputError


@pytest.fixture
def files(tmp_path):
    scores, train, V = tiny_problem(seed=2, m=6, n=40)
    np.savez(tmp_path / "cand.npz", scores=scores)
    np.savez(tmp_path / "train.npz", scores=train)
    np.save(tmp_path / "V.npy", V)
    np.save(tmp_path / "rank0.npy", np.zeros((40, 0), np.float32))
    data = (tmp_path / "cand.npz").read_bytes()
    (tmp_path / "truncated.npz").write_bytes(data[:len(data) // 2])
    (tmp_path / "fake.npz").write_bytes(b"PK\x03\x04 not a zip at all")
    return tmp_path


def _simulate(files, *extra):
    return ["simulate", "--reps", "2", "--batch-size", "4", "--quiet", "--out", str(files / "out"), *extra]


@pytest.mark.parametrize("name", ["fake.npz", "truncated.npz"])
def test_a_damaged_npz_is_one_line(files, capsys, name):
    cli_fails(_simulate(files, "--scores", str(files / name), "--method", "ucbe"), capsys,
           f"{files / name}: not a readable .npz score matrix")
    cli_fails(_simulate(files, "--scores", str(files / "cand.npz"), "--method", "pulse", "--embeddings",
                     str(files / name)), capsys, "not a .npy array file")


def test_embeddings_of_rank_0_are_refused(files, capsys):
    cli_fails(_simulate(files, "--scores", str(files / "cand.npz"), "--method", "pulse", "--embeddings",
                     str(files / "rank0.npy")), capsys, "the embeddings have rank 0")


def test_side_information_given_twice_is_refused_not_ignored(files, capsys):
    cli_fails(_simulate(files, "--scores", str(files / "cand.npz"), "--method", "pulse", "--embeddings",
                     str(files / "V.npy"), "--train", str(files / "train.npz")), capsys,
           "--embeddings gives the example embeddings directly, so --train would be ignored")
    cli_fails(["sweep", "--scores", str(files / "cand.npz"), "--embeddings", str(files / "V.npy"), "--train",
            str(files / "train.npz"), "--grid", "exploration=1,2", "--reps", "2", "--quiet", "--out", str(files / "s")],
           capsys, "so --train would be ignored")


def test_a_method_without_an_interval_is_never_silently_given_another_rule(files, capsys):
    base = _simulate(files, "--scores", str(files / "cand.npz"), "--train", str(files / "train.npz"), "--rank", "3",
                     "--budget", "100")
    cli_fails(base + ["--method", "naive", "--rule", "lucb"], capsys, "method 'naive' has no valid interval, so it "
                                                                   "cannot use rule='lucb'")
    cli_fails(base + ["--method", "naive", "--stop", "certified"], capsys, "cannot use stop='certified'")
    assert cli.main(base + ["--method", "ucbe,naive", "--rule", "lucb", "--force"]) == 0   # a comparison: said
    assert "naive has no confidence interval, so it runs with rule lucb -> ucbe beside the other methods" in \
        capsys.readouterr().err


def test_evaluate_modules_that_fail_to_import_are_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models.txt").write_text("a\nb\nc\n")
    (tmp_path / "broken.py").write_text("def score(:\n")
    (tmp_path / "raising.py").write_text("raise RuntimeError('no API key')\n")
    base = ["select", "--models", "models.txt", "--examples", "10", "--budget", "100", "--method", "ucbe", "--log",
            "run.db"]
    cli_fails(base + ["--evaluate", "broken:score"], capsys, "module 'broken' has a syntax error: invalid syntax")
    cli_fails(base + ["--evaluate", "raising:score"], capsys, "importing module 'raising' failed: RuntimeError: no API key")
    cli_fails(base[:4] + ["99999999999999999999"] + base[5:] + ["--evaluate", "pulse_jax.stand_in:score"], capsys,
           "--examples 99999999999999999999: more examples than a run can index")


def test_the_working_folder_never_shadows_an_installed_package(tmp_path):
    """A ``json.py`` beside the user's scorer: the scorer loads, and ``json`` is still the standard one."""
    (tmp_path / "json.py").write_text("raise RuntimeError('the wrong json')\n")
    (tmp_path / "myscore.py").write_text("def score(model, ids):\n    return [0.5] * len(ids)\n")
    code = ("import sys; sys.path = [p for p in sys.path if p not in ('', '.')]\n"
            "from pulse_jax import registry\nf = registry.load_attribute('myscore:score', '--evaluate')\n"
            "import importlib; import json as j; importlib.reload(j); print(j.dumps(f('m', [1, 2])))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[0.5, 0.5]"


@pytest.mark.parametrize("name, content, needle", [
    ("dec.csv", b"model,example,score\nm1,e1,0,5\n", "line 2: 4 fields but the header has 3 (a decimal comma?"),
    ("short.csv", b"model,example,score\nm1,e1\n", "line 2: 2 fields but the header has 3"),
    ("huge.csv", b"model,example,score\nm1,e1,\"" + b"1" * 200_000 + b"\"\n", "not a readable CSV table (field larger"),
    ("latin.csv", b"model,example,score\nm\xe9,e1,1\n", "not UTF-8 text"),
    ("bad.parquet", b"PAR1 not really", "cannot read the table"),
    ("latin.jsonl", b'{"model": "a", "example": "b", "score": 1}\n\xff\n', "line 2: not UTF-8 text"),
    ("deep.jsonl", b"[" * 100_000 + b"]" * 100_000 + b"\n", "line 1: JSON nested too deeply"),
    ("bigint.jsonl", b'{"model": "a", "example": "b", "score": ' + b"1" * 5000 + b"}\n", "unreadable JSON value"),
])
def test_long_table_inputs_are_one_line(tmp_path, capsys, name, content, needle):
    if name.endswith(".parquet"):
        pytest.importorskip("pyarrow")
    (tmp_path / name).write_bytes(content)
    cli_fails(["import", "long", str(tmp_path / name), "--out", str(tmp_path / "x.csv")], capsys, needle)


def test_a_byte_order_mark_is_not_part_of_a_name(tmp_path):
    from pulse_jax.fileio import data
    from pulse_jax.harnesses import lm_evaluation

    (tmp_path / "m.csv").write_bytes("\ufeffmodel,e1,e2\nm1,1,0\nm2,0,1\n".encode())
    assert data.load(tmp_path / "m.csv").models == ("m1", "m2")
    (tmp_path / "long.csv").write_bytes("\ufeffmodel,example,score\nm1,e1,1\nm2,e1,0\n".encode())
    assert lm_evaluation.read_long(tmp_path / "long.csv").models == ("m1", "m2")
    (tmp_path / "models.txt").write_bytes("\ufeffgpt-x\nclaude-y\n".encode())
    assert cli.inputs.read_lines(str(tmp_path / "models.txt"), "--models") == ["gpt-x", "claude-y"]


@pytest.mark.parametrize("doc_id, ok", [(1.7, False), ("1.7", False), (True, False), (3, True), (3.0, True), ("3", True)])
def test_lm_eval_doc_ids_are_integers_never_truncated(tmp_path, doc_id, ok):
    from pulse_jax.harnesses import lm_evaluation

    path = tmp_path / "samples_t_2026-01-01T00-00-00.jsonl"
    path.write_text(json.dumps({"doc_id": doc_id, "filter": "none", "metrics": ["acc"], "acc": 1.0}) + "\n")
    if ok:
        assert list(lm_evaluation._read_samples(path, "acc", None, {"filters": set(), "metrics": set()})) == [3]
    else:
        with pytest.raises(PulseInputError, match=f"doc_id {doc_id!r} is not an integer document number"):
            lm_evaluation._read_samples(path, "acc", None, {"filters": set(), "metrics": set()})


def test_force_replaces_earlier_results_and_nothing_is_overwritten_without_it(files, capsys):
    out = files / "out"
    base = _simulate(files, "--scores", str(files / "cand.npz"), "--train", str(files / "train.npz"), "--rank", "3")
    assert cli.main(base + ["--method", "ucbe,naive"]) == 0
    assert (out / "naive.npz").exists()
    cli_fails(base + ["--method", "ucbe"], capsys, "already holds")
    (out / "notes.txt").write_text("mine")
    assert cli.main(base + ["--method", "ucbe", "--force"]) == 0
    assert not (out / "naive.npz").exists() and (out / "ucbe.npz").exists()   # no earlier method's file left
    assert (out / "notes.txt").read_text() == "mine"                          # only results are replaced
    (files / "h.json").write_text("{}")
    cli_fails(["tune", "--train", str(files / "train.npz"), "--ranks", "2", "--lams", "0.1", "--epochs", "5", "--out",
            str(files / "h.json")], capsys, "--out " + str(files / "h.json") + ": exists; pass --force")


def test_inputs_are_hashed_when_read(files, monkeypatch):
    """A score file changed while the run goes on: provenance records it as it was read."""
    import hashlib

    from pulse_jax.fileio import data

    original = data.load
    digest = hashlib.sha256((files / "cand.npz").read_bytes()).hexdigest()

    def load_then_change(path, *a, **kw):
        result = original(path, *a, **kw)
        with open(path, "ab") as handle:
            handle.write(b"changed")
        return result

    monkeypatch.setattr(data, "load", load_then_change)
    assert cli.main(_simulate(files, "--scores", str(files / "cand.npz"), "--method", "ucbe")) == 0
    record = json.loads((files / "out" / "provenance.json").read_text())
    assert record["inputs"][0]["sha256"] == digest


def test_select_writes_provenance_and_keeps_other_reports(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from pulse_jax import stand_in

    (tmp_path / "models.txt").write_text("\n".join(stand_in.models()[:4]) + "\n")
    base = ["select", "--models", "models.txt", "--examples", "200", "--budget", "160", "--batch-size", "8",
            "--method", "ucbe", "--evaluate", "pulse_jax.stand_in:score", "--stop", "budget", "--quiet",
            "--report", "rep"]
    assert cli.main(base + ["--log", "a.db"]) == 0
    record = json.loads((tmp_path / "rep" / "provenance.json").read_text())
    assert record["inputs"][0]["path"] == str(tmp_path / "models.txt") and record["log"] == str((tmp_path / "a.db").resolve())
    assert cli.main(base + ["--log", "a.db"]) == 0                           # the same log: its report again
    capsys.readouterr()
    cli_fails(base + ["--log", "b.db"], capsys, "--report rep: already holds")   # another log's report: kept
    assert cli.main(base + ["--log", "b.db", "--force"]) == 0


def test_a_large_sweep_warns_and_prints_a_summary(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cli.sweep, "LARGE_SWEEP", 3)
    monkeypatch.setattr(cli.sweep, "SHOWN_ROWS", 3)
    assert cli.main(["sweep", "--grid", "exploration=0.5,1,2,4", "--reps", "2", "--quiet", "--budget", "1000",
                     "--out", str(tmp_path / "s")]) == 0
    captured = capsys.readouterr()
    assert "4 points x 2 repetitions = 8 runs: this can take a long time" in captured.err
    assert "(3 of 4 points: the baseline and the best by cells to the target" in captured.out
    assert len((tmp_path / "s" / "sweep.csv").read_text().splitlines()) == 1 + 4


def test_resume_with_other_train_scores_is_refused(tmp_path):
    from pulse_jax import synthetic
    from pulse_jax.live import Selector

    b = synthetic.make_benchmark(seed=0, n_models=4, n_examples=60, n_train=20)
    kw = dict(method="pulse", batch_size=4, rank=3, log=tmp_path / "run.db")
    Selector(b.models, 60, 4 * 4 + 40, train=b.train, **kw).close()
    with pytest.raises(PulseInputError, match="train: these historical scores differ from the ones"):
        Selector(b.models, 60, 4 * 4 + 40, train=b.train[::-1], **kw)
    Selector(b.models, 60, 4 * 4 + 40, train=b.train, **kw).close()      # the same, or none: resumes
    Selector(b.models, 60, 4 * 4 + 40, **kw).close()


def test_a_refit_period_longer_than_the_run_is_no_periodic_refit_not_a_huge_log_chunk():
    """``refit_every`` beyond the run's steps allocated log chunks of that many slots (terabytes for
    10**9); it now means what it says: no periodic refit, the same run as any period past the end."""
    import pulse_jax as pj
    from pulse_jax.engine.config import log_chunk_slots

    rng = np.random.default_rng(0)
    scores = (rng.random((6, 80)) < 0.5).astype(np.float32)
    V = rng.normal(size=(80, 3)).astype(np.float32)
    runs = []
    for tau in (10**9, 10**4):
        config = pj.BanditConfig(n_models=6, n_examples=80, budget=6 * 4 + 100, batch_size=4, refit_every=tau)
        assert log_chunk_slots(config) <= config.n_steps + 256
        runs.append(pj.simulate(scores, config, "pulse", V=V, reps=3, seed=0, progress=False))
    np.testing.assert_array_equal(runs[0].chosen, runs[1].chosen)
    np.testing.assert_array_equal(runs[0].estimates, runs[1].estimates)


def test_tune_refuses_a_diverging_learning_rate_and_an_epoch_count_past_its_counter(files, capsys):
    base = ["tune", "--train", str(files / "train.npz"), "--out", str(files / "h.json"), "--ranks", "2",
            "--lams", "0.01", "--folds", "2"]
    assert cli.main(base + ["--lrs", "1e30", "--epochs", "5"]) == 2   # after the fits (progress lines before it)
    err = capsys.readouterr().err
    assert "pulse-jax: error: every fit diverged (held-out loss not finite; e.g. lr 1e+30); give smaller learning " \
           "rates" in err and "Traceback" not in err, err
    cli_fails(base + ["--epochs", "100000000000"], capsys, "grid epochs 100000000000 is out of range; it must be a "
                                                           "whole number from 1 to 1,000,000")


def test_an_npz_whose_header_claims_a_huge_shape_is_refused_before_allocating(files, capsys):
    import io
    import zipfile

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (10**9, 10**9)})
    with zipfile.ZipFile(files / "huge.npz", "w") as archive:
        archive.writestr("scores.npy", header.getvalue() + b"\0" * 64)
    cli_fails(_simulate(files, "--scores", str(files / "huge.npz"), "--method", "ucbe"), capsys,
              "member 'scores.npy' claims shape (1000000000, 1000000000)")
    cli_fails(["tune", "--train", str(files / "huge.npz"), "--out", str(files / "h.json")], capsys, "the file is damaged")


@pytest.mark.parametrize("row, needle", [
    ({"type": "tell", "ticket": "one", "model": 5, "examples": "x"}, "field 'ticket' is missing or not an int"),
    ({"type": "tell", "ticket": 1, "step": 1, "asks_issued": 2, "model": "b", "examples": 7, "scores": 3},
     "field 'examples' is missing or not a list"),
    ({"type": "tell"}, "field 'ticket' is missing"),
    ({"type": "tell", "ticket": 1, "step": 1, "asks_issued": 2, "model": "b", "examples": [2, 3], "scores": [0.5]},
     "1 scores for 2 examples"),
    ({"type": "tell", "ticket": 1, "step": 1, "asks_issued": 2, "model": "b", "examples": [2, 3], "scores": ["a", None]},
     "score 'a' is not a number in [0, 1]"),
])
def test_log_show_of_a_version_1_log_with_a_malformed_row_is_one_line(tmp_path, capsys, row, needle):
    header = {"type": "header", "version": 1, "method": "ucbe", "seed": 0, "models": ["a", "b"],
              "examples": [0, 1, 2, 3], "budget": 8, "batch_size": 2, "init_batches": 1, "refit_every": 0}
    first = {"type": "tell", "ticket": 0, "step": 0, "asks_issued": 1, "model": "a", "examples": [0, 1],
             "scores": [1, 0]}
    (tmp_path / "v1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (header, first, row)))
    cli_fails(["log", "show", str(tmp_path / "v1.jsonl")], capsys, f"v1.jsonl: line 3: {needle}")
