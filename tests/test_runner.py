"""Interruptions never re-pay a finished call: SIGINT / SIGTERM stop gracefully, a full disk loses nothing."""
import errno
import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest
from conftest import log_records, write_slow_scorer

from pulse_jax.live import journal
from pulse_jax.live import LogWriteError, Selector, run


def _wait_for_batches(log, count, proc, limit=120):
    deadline = time.time() + limit
    while time.time() < deadline and proc.poll() is None:
        if len(log_records(log)) > count:
            return
        time.sleep(0.02)
    raise AssertionError(f"{log} never reached {count} batches")


@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
@pytest.mark.parametrize("concurrency", [1, 4])
@pytest.mark.integration   # subprocesses for seconds each: the second test command
def test_a_signal_mid_run_pays_no_cell_twice_and_the_resumed_report_is_the_uninterrupted_one(
        tmp_path, tmp_path_factory, sig, code, concurrency):
    """A scorer that records every cell it is asked for (its "paid" file, calls.txt) with a delay per call:
    interrupted mid-run, the run waits for the calls in flight, logs them, says what it paid and logged in
    one line and exits 130 / 143; the resumed run asks no cell twice, and its report equals a clean run's."""
    args = write_slow_scorer(tmp_path, delay=0.1) + ["--concurrency", str(concurrency)]
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    proc = subprocess.Popen(args + ["--log", "run.db"], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    _wait_for_batches(tmp_path / "run.db", 10, proc)   # well before the end, even at concurrency 4
    proc.send_signal(sig)
    err = proc.communicate(timeout=120)[1]
    assert proc.returncode == code, err
    line = err.strip().splitlines()[-1]
    assert f"stopped by {signal.Signals(sig).name}:" in line and "0 will be asked again" in line, err
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    paid = int(line.split("stopped by")[1].split(":")[1].split("cells paid")[0].replace(",", ""))
    assert paid == len(calls) and 0 < paid < 800                            # stopped mid-run, counted exactly
    records = log_records(tmp_path / "run.db")
    assert sum(len(r["examples"]) for r in records) == paid                 # every paid cell is in the log
    done = subprocess.run(args + ["--log", "run.db"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert len(calls) == len(set(calls)) == 800                              # no cell paid twice
    resumed = json.loads((tmp_path / "run_report" / "report.json").read_text())
    clean = _clean_report(tmp_path_factory, concurrency)
    assert resumed["evaluated"] == clean["evaluated"] and resumed["ranking"] == clean["ranking"]


_CLEAN = {}


def _clean_report(tmp_path_factory, concurrency: int) -> dict:
    """The uninterrupted run's report at this concurrency (computed once per test process)."""
    if concurrency not in _CLEAN:
        where = tmp_path_factory.mktemp(f"clean{concurrency}")
        args = write_slow_scorer(where, delay=0.0) + ["--concurrency", str(concurrency), "--log", "clean.db"]
        env = dict(os.environ, PYTHONPATH=str(where))
        assert subprocess.run(args, cwd=where, env=env, capture_output=True).returncode == 0
        _CLEAN[concurrency] = json.loads((where / "clean_report" / "report.json").read_text())
    return _CLEAN[concurrency]


def _selector(small_bench, log, **kw):
    b, V = small_bench
    return Selector(b.models, 200, 6 * 8 + 8 * 12, batch_size=8, V=V, seed=5, refit_every=4, log=log, **kw)


def _full_disk(monkeypatch, failures: float, from_write: int = 5):
    """From the ``from_write``-th batch committed to ``run.db`` on, the disk is full for ``failures``
    commits, or until the log frees its reserve (a commit that SQLite rolls back, as on a real full disk)."""
    original, state = journal.Journal._commit, {"writes": 0, "failures": failures, "freed": False}

    def commit(self, *statements):
        sql = statements[0][0]
        if self.path.name == "run.db" and sql.startswith(("INSERT INTO told", "INSERT OR REPLACE INTO paid")):
            state["writes"] += 1
            if state["writes"] >= from_write and not state["freed"] and state["failures"] > 0:
                state["failures"] -= 1
                raise journal.LogFull(errno.ENOSPC, "No space left on device")
        if sql == "DELETE FROM reserve":
            state["freed"] = True
        return original(self, *statements)

    monkeypatch.setattr(journal.Journal, "_commit", commit)
    return state


@pytest.mark.parametrize("concurrency", [1, 4, 16, 64])
@pytest.mark.parametrize("lasting", [False, True])
def test_a_full_disk_pays_no_cell_twice(small_bench, tmp_path, monkeypatch, concurrency, lasting):
    """The log's disk fills up at the 5th batch. Space that returns within the retries: the run goes on.
    A disk that stays full: the batch is committed into the log's reserve, the run stops asking, logs
    the batches in flight, and stops with one line naming the log and the fix. Either way no cell is
    paid twice, and the resumed run ends where an uninterrupted run ends."""
    b, _ = small_bench
    calls = []

    def scorer(model, ids):
        time.sleep(0.005)
        calls.extend((model, i) for i in ids)
        return b.scores[b.models.index(model), ids].tolist()

    state = _full_disk(monkeypatch, float("inf") if lasting else 2)
    log = tmp_path / "run.db"
    sel = _selector(small_bench, log, stop="budget", concurrency=concurrency)
    if lasting:
        with pytest.raises(LogWriteError, match=r"run.db: the disk is full: stopped asking, every cell paid for is in "
                                                r"the log \(\d+ told\). Free space there, then run the same command"):
            run(scorer, sel)
        assert state["freed"]
        assert sum(len(r["examples"]) for r in log_records(log)) == len(calls)   # every paid cell is in the log
    else:
        run(scorer, sel)
        assert not state["freed"]
    sel.close()
    monkeypatch.undo()                                                      # the space is back
    again = _selector(small_bench, log, stop="budget", concurrency=concurrency)
    report = run(scorer, again)
    again.close()
    assert len(calls) == len(set(calls)) == report.spent                   # 0 cells paid twice
    clean = run(lambda m, ids: b.scores[b.models.index(m), ids].tolist(),
                _selector(small_bench, tmp_path / "c.db", stop="budget", concurrency=concurrency))
    assert report.evaluated == clean.evaluated
    np.testing.assert_allclose(report.estimates, clean.estimates, atol=1e-6)


@pytest.mark.parametrize("concurrency", [1, 4])
@pytest.mark.parametrize("how", ["grace", "second signal"])
@pytest.mark.integration   # subprocesses for seconds each: the second test command
def test_a_hung_scorer_is_abandoned_within_the_grace_and_arrived_scores_are_kept(tmp_path, concurrency, how):
    """One call hangs for good. SIGTERM, then ``--grace 1`` or a second signal: the process exits within a
    few seconds (a daemon worker never holds it), every result that had arrived is in the log, only the
    hung call's cells are asked again, and the message says how many."""
    args = write_slow_scorer(tmp_path, delay=0.05) + ["--concurrency", str(concurrency)]
    (tmp_path / "slowscore.py").write_text(
        "import os, time\nfrom pulse_jax import stand_in\n"
        "def score(model, ids):\n"
        "    n = len(open('calls.txt').read().splitlines()) if os.path.exists('calls.txt') else 0\n"
        "    if n >= 16 * 12 and not os.path.exists('hung'):\n"
        "        open('hung', 'w').close(); time.sleep(3600)\n"
        "    time.sleep(0.05)\n"
        "    with open('calls.txt', 'a') as f:\n"
        "        f.write(''.join(f'{model},{i}\\n' for i in ids))\n"
        "    return stand_in.score(model, ids)\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    extra = ["--grace", "1"] if how == "grace" else []
    proc = subprocess.Popen(args + extra + ["--log", "run.db"], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (tmp_path / "hung").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    time.sleep(0.3)                                     # the other calls in flight come back meanwhile
    proc.send_signal(signal.SIGTERM)
    sent = time.time()
    if how == "second signal":
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 143, err
    assert time.time() - sent < 10                      # not held by the hung call
    line = err.strip().splitlines()[-1]
    assert "stopped by SIGTERM:" in line and "16 will be asked again" in line, err
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    logged = sum(len(r["examples"]) for r in log_records(tmp_path / "run.db"))
    assert logged == len(calls)                         # every score that arrived is in the log


def test_a_disk_without_room_for_a_new_log_is_said_naming_the_log_before_anything_is_asked(small_bench, tmp_path,
                                                                                          monkeypatch):
    """A disk too small for a new log (its reserve and journal) stopped ``select`` with a bare "No space
    left on device": the line now names the log, what a log needs, and that nothing was asked."""
    original = journal.Journal._commit

    def commit(self, *statements):
        if statements[0][0].startswith("INSERT INTO run"):
            raise journal.LogFull(errno.ENOSPC, "No space left on device")
        return original(self, *statements)

    monkeypatch.setattr(journal.Journal, "_commit", commit)
    calls = []
    with pytest.raises(LogWriteError, match=r"run.db: cannot start the log \(No space left on device\) \(a new log "
                                            r"needs about 1,088 KiB: .*\); nothing was asked. To go on, free space "
                                            r"there, then run the same command again, or give --log in another folder"):
        sel = _selector(small_bench, tmp_path / "run.db", stop="budget")
        run(lambda m, ids: calls.extend(ids) or [0.0] * len(ids), sel)
    assert calls == []
