"""The live log cannot be lost or silently corrupted: lock, torn tails, checksums, validated replay."""
import json
import os
import random
import subprocess
import time

import numpy as np
import pytest

from conftest import write_slow_scorer
from pulse_jax import factorization, synthetic
from pulse_jax.live import journal
from pulse_jax.errors import PulseInputError
from pulse_jax.live import Selector, run

B = 8


@pytest.fixture(scope="module")
def bench():
    b = synthetic.make_benchmark(seed=1, n_models=6, n_examples=200, n_train=40)
    return b, factorization.fit_example_embeddings(b.train, rank=3)


def _selector(bench, log, **kw):
    b, V = bench
    kw.setdefault("method", "pulse")
    return Selector(b.models, 200, 6 * B + 8 * 10, batch_size=B, V=V, seed=5, refit_every=4, log=log, **kw)


def _oracle(b):
    return lambda model, ids: b.scores[b.models.index(model), ids].tolist()


def _finished_log(bench, tmp_path, name="run.jsonl"):
    log = tmp_path / name
    sel = _selector(bench, log, stop="budget")
    report = run(_oracle(bench[0]), sel)
    sel.close()
    return log, report


def test_every_line_carries_a_chained_checksum(bench, tmp_path):
    log, _ = _finished_log(bench, tmp_path)
    previous = ""
    for line in log.read_text().splitlines():
        record = json.loads(line)
        assert record["crc"] == journal.checksum(record, previous)
        previous = record["crc"]


@pytest.mark.parametrize("tamper, needle", [
    ("score", "line 5 fails its checksum"),
    ("delete", "line 5 fails its checksum"),
    ("duplicate", "line 6 fails its checksum"),
    ("swap", "line 5 fails its checksum"),
])
def test_tampering_is_detected_and_named(bench, tmp_path, tamper, needle):
    log, _ = _finished_log(bench, tmp_path)
    lines = log.read_text().splitlines()
    if tamper == "score":            # a flipped score, the JSON still valid
        record = json.loads(lines[4])
        record["scores"][0] = 1.0 - record["scores"][0]
        lines[4] = json.dumps(record)
    elif tamper == "delete":
        del lines[4]
    elif tamper == "duplicate":
        lines.insert(5, lines[4])
    else:
        lines[4], lines[5] = lines[5], lines[4]
    log.write_text("\n".join(lines) + "\n")
    with pytest.raises(PulseInputError, match=needle) as err:
        _selector(bench, log)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("edit, needle", [
    (lambda r: r.update(scores=[5.0] * len(r["scores"])), "is 5.0, not a number in \\[0, 1\\]"),
    (lambda r: r.update(scores=[float("nan")] * len(r["scores"])), "not a number in \\[0, 1\\]"),
    (lambda r: r.update(scores={}), "field 'scores' is missing or not a list"),
    (lambda r: r.update(scores=[1, 2]), "got 2 scores for 8 examples"),
    (lambda r: r.update(scores="0.5"), "field 'scores' is missing or not a list"),
    (lambda r: r.update(scores=["a"] * 8), "scores are not numbers"),
    (lambda r: r.update(model="gpt-9"), "unknown model 'gpt-9'"),
    (lambda r: r.pop("ticket"), "field 'ticket' is missing"),
])
def test_edited_records_with_a_valid_checksum_are_still_validated(bench, tmp_path, edit, needle):
    """Someone edits a record and recomputes the chain: the values themselves are checked, one line each."""
    log, _ = _finished_log(bench, tmp_path)
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    edit(lines[7])
    previous, out = "", []
    for record in lines:
        record["crc"] = journal.checksum(record, previous)
        previous = record["crc"]
        out.append(json.dumps(record))
    log.write_text("\n".join(out) + "\n")
    with pytest.raises(PulseInputError, match=needle) as err:
        _selector(bench, log)
    assert f"{log}: line 8" in str(err.value) and "\n" not in str(err.value)


def test_torn_tail_at_every_offset_is_cut_and_resumes_twice(bench, tmp_path, capsys):
    """A crash mid-write at a random byte offset: the resume cuts the torn record (saying so once),
    continues, and a second resume of the finished log changes nothing."""
    full, report = _finished_log(bench, tmp_path, "full.jsonl")
    data = full.read_bytes()
    rng = random.Random(0)
    offsets = sorted(rng.sample(range(1, len(data)), 12)) + [data.index(b"\n") + 1]
    for k, offset in enumerate(offsets):
        log = tmp_path / f"torn{k}.jsonl"
        log.write_bytes(data[:offset])
        whole = data[offset:offset + 1] == b"\n"     # cut just before a newline: the last record is complete
        torn = not data[:offset].endswith(b"\n") and not whole
        sel = _selector(bench, log, stop="budget")
        message = capsys.readouterr().err
        assert message.count("cut a torn last record") == int(torn)
        assert message.count("lacked its newline; kept it") == int(whole)
        again = run(_oracle(bench[0]), sel)
        sel.close()
        assert again.evaluated == report.evaluated
        np.testing.assert_allclose(again.estimates, report.estimates, atol=1e-6)
        size = log.stat().st_size
        second = _selector(bench, log)
        assert second.spent == report.spent and log.stat().st_size == size and not second.pending()
        second.close()
        assert "cut a torn" not in capsys.readouterr().err


def test_a_finished_run_leaves_no_lock_file(bench, tmp_path):
    lock = tmp_path / "run.jsonl.lock"
    log, _ = _finished_log(bench, tmp_path)
    assert not lock.exists()
    sel = _selector(bench, log)             # a resume locks again, and lets go again
    assert lock.exists() and str(os.getpid()) in lock.read_text()
    sel.close()
    assert not lock.exists()


def test_a_second_selector_in_this_process_takes_the_log_over(bench, tmp_path):
    log = tmp_path / "run.jsonl"
    first = _selector(bench, log)
    request = first.ask()
    second = _selector(bench, log)
    with pytest.raises(PulseInputError, match="no longer holds the log"):
        first.tell(request, [1.0] * len(request.example_ids))
    second.close()


def test_resume_refuses_embeddings_that_contradict_the_sidecar(bench, tmp_path):
    b, V = bench
    log, _ = _finished_log(bench, tmp_path)
    with pytest.raises(PulseInputError, match="V differs from the embeddings"):
        Selector(b.models, 200, 6 * B + 8 * 10, batch_size=B, V=V + 1.0, seed=5, refit_every=4, log=log)
    with pytest.raises(PulseInputError, match="rank 7 differs from rank 3"):
        Selector(b.models, 200, 6 * B + 8 * 10, batch_size=B, train=b.train, rank=7, seed=5, refit_every=4, log=log)


def test_version_1_logs_still_replay(bench, tmp_path):
    """Logs written before checksums existed: no chain to check, everything else still validated."""
    log, report = _finished_log(bench, tmp_path)
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    for record in lines:
        record.pop("crc")
    lines[0]["version"] = 1
    log.write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    sel = _selector(bench, log)
    assert sel.spent == report.spent
    sel.close()


def test_two_processes_on_one_log(tmp_path):
    """The second process refuses at once, naming the first, writes nothing; the first completes and
    no cell is evaluated twice."""
    args = write_slow_scorer(tmp_path) + ["--log", "run.jsonl"]
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    first = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    log = tmp_path / "run.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (log.exists() and len(log.read_text().splitlines()) > 3):
        time.sleep(0.05)
    before = log.read_bytes()
    second = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 2
    assert f"is in use by process {first.pid} on" in second.stderr and len(second.stderr.strip().splitlines()) == 1
    assert log.read_bytes()[:len(before)] == before                  # the second wrote nothing
    assert first.wait(timeout=300) == 0, first.stderr.read()[-2000:]
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert len(calls) == len(set(calls)) == 800                      # every cell once
    tickets = [json.loads(x)["ticket"] for x in log.read_text().splitlines()[1:]]
    assert len(tickets) == len(set(tickets)) == 50
    assert not (tmp_path / "run.jsonl.lock").exists()                # the finished run removed its lock


def test_a_scorer_that_raises_system_exit_is_an_evaluation_error(bench, tmp_path):
    from pulse_jax.live import EvaluationError

    def dies(model, ids):
        raise SystemExit(3)

    sel = _selector(bench, tmp_path / "run.jsonl")
    with pytest.raises(EvaluationError, match="SystemExit"):
        run(dies, sel)
    sel.close()


def test_a_complete_last_record_without_its_newline_is_kept(bench, tmp_path, capsys):
    """The write of a record reached the disk but its newline did not: the checksum proves the record
    whole, so it is kept (its cells are not asked again) and the newline is added; one message says so."""
    full, report = _finished_log(bench, tmp_path, "full.jsonl")
    data = full.read_bytes()
    ends = [k for k, byte in enumerate(data) if byte == ord("\n")]
    for n_lines in (1, 2, len(ends) // 2, len(ends)):     # header only, first batch, mid-run, the whole log
        log = tmp_path / f"nonl{n_lines}.jsonl"
        log.write_bytes(data[:ends[n_lines - 1]])          # everything up to that line, without its newline
        sel = _selector(bench, log, stop="budget")
        message = capsys.readouterr().err
        assert "complete but lacked its newline; kept it" in message and "cut a torn" not in message
        assert log.read_bytes() == data[:ends[n_lines - 1] + 1]
        kept = sum(len(json.loads(line)["examples"]) for line in data[:ends[n_lines - 1]].splitlines()[1:])
        assert sel.spent == kept
        again = run(_oracle(bench[0]), sel)
        sel.close()
        assert again.evaluated == report.evaluated
    log = tmp_path / "torn.jsonl"                          # one byte short of that: torn, cut
    log.write_bytes(data[:ends[1] - 1])
    _selector(bench, log).close()
    assert "will be asked again" in capsys.readouterr().err
