"""No cell is paid twice at any concurrency: failed calls are retried, and whatever stops a run early
(a call that outlasts its retries, a KeyboardInterrupt inside the scorer, a log that cannot be written)
logs every batch whose scores came back before the run ends.

Every scorer here records the cells whose scores it *returned* (``returned``): a cell in it twice was
paid for twice. Failed attempts are paid for too, but never returned scores, so they are counted apart.
"""
import errno
import re
import threading
import time

import numpy as np
import pytest

from pulse_jax.live import EvaluationError, Interrupted, LogWriteError, Selector, journal, run
from pulse_jax.live.runner import RETRIES, _Backoff, retry_after
from conftest import log_records

BUDGET = 6 * 8 + 8 * 30


def _selector(small_bench, log, concurrency=16):
    b, V = small_bench
    return Selector(b.models, 200, BUDGET, batch_size=8, V=V, seed=5, refit_every=4, log=log, stop="budget",
                    concurrency=concurrency)


class _Scorer:
    """The stand-in scores of ``small_bench``; call ``fail_on`` (1-based, counted over every call) sleeps
    ``fail_delay`` and then raises ``error`` (every other call sleeps ``delay``)."""

    def __init__(self, bench, fail_on=None, error=None, delay=0.002, fail_delay=0.3, failure_rate=0.0, seed=0):
        self.bench, self.fail_on, self.error, self.delay, self.fail_delay = bench, fail_on, error, delay, fail_delay
        self.failure_rate, self.rng = failure_rate, np.random.default_rng(seed)
        self.calls, self.failed, self.returned = 0, 0, []
        self.lock = threading.Lock()

    def __call__(self, model, ids):
        with self.lock:
            self.calls += 1
            number = self.calls
            transient = self.rng.random() < self.failure_rate
        if number == self.fail_on:
            time.sleep(self.fail_delay)          # the batches asked after it come back meanwhile
            with self.lock:
                self.failed += 1
            raise self.error
        time.sleep(self.delay)
        if transient:
            with self.lock:
                self.failed += 1
            raise ConnectionError("503 Service Unavailable (transient)")
        with self.lock:
            self.returned.extend((model, i) for i in ids)
        return self.bench.scores[self.bench.models.index(model), ids].tolist()


def _clean(small_bench, tmp_path, concurrency):
    b, _ = small_bench
    sel = _selector(small_bench, tmp_path / "clean.db", concurrency=concurrency)
    report = run(_Scorer(b), sel, handle_signals=False)
    sel.close()
    return report


def _same(report, clean):
    assert report.evaluated == clean.evaluated
    np.testing.assert_allclose(report.estimates, clean.estimates, atol=1e-6)


def test_the_default_retries_are_the_documented_ones():
    """The command line's defaults are the library's (the CLI keeps them as literals to start fast)."""
    from pulse_jax import cli
    from pulse_jax.live import runner

    args = cli.build_parser().parse_args(["select", "--models", "m", "--budget", "1", "--log", "x"])
    assert (args.retries, args.retry_wait, args.retry_max_wait) == (runner.RETRIES, runner.RETRY_WAIT,
                                                                    runner.RETRY_MAX_WAIT) == (3, 1.0, 60.0)


@pytest.mark.parametrize("concurrency", [1, 4])
@pytest.mark.parametrize("kind", ["error", "keyboard"])
def test_a_failure_that_outlasts_its_retries_loses_no_returned_batch(small_bench, tmp_path, concurrency, kind):
    """The 12th call fails for good (a RuntimeError after its retries, or a KeyboardInterrupt raised in the
    scorer) while later batches come back: those are logged as paid, the error counts exactly the failed
    batch's cells as asked again, and the resumed run pays for no returned cell twice and ends where an
    uninterrupted run ends. Before, every batch in flight at concurrency 4 was asked again."""
    b, _ = small_bench
    error = RuntimeError("boom") if kind == "error" else KeyboardInterrupt()
    scorer = _Scorer(b, fail_on=12, error=error)
    log = tmp_path / "run.db"
    sel = _selector(small_bench, log, concurrency=concurrency)
    expected = Interrupted if kind == "keyboard" else EvaluationError
    with pytest.raises(expected) as info:
        run(scorer, sel, retries=0, handle_signals=False)
    sel.close()
    message = str(info.value)
    assert "8 cells will be asked again" in message or "8 will be asked again" in message, message
    if kind == "keyboard":
        assert info.value.exit_code == 130 and "KeyboardInterrupt in the scorer" in message
    logged = sum(len(r["examples"]) for r in log_records(log))
    assert logged == len(scorer.returned)                      # every batch that came back is in the log
    again = _selector(small_bench, log, concurrency=concurrency)
    report = run(scorer, again, handle_signals=False)
    again.close()
    assert len(scorer.returned) == len(set(scorer.returned)) == report.spent   # 0 returned cells paid twice
    _same(report, _clean(small_bench, tmp_path, concurrency))


@pytest.mark.parametrize("concurrency", [1, 4, 16])
def test_transient_failures_are_retried_and_the_report_is_the_clean_one(small_bench, tmp_path, concurrency):
    """A scorer that fails 10% of its calls at random finishes with the default retries (waits set to 0
    here), pays for no returned cell twice, reports equal to a run without failures, and counts them."""
    b, _ = small_bench
    scorer = _Scorer(b, failure_rate=0.10, seed=concurrency)
    sel = _selector(small_bench, tmp_path / "run.db", concurrency=concurrency)
    report = run(scorer, sel, retry_wait=0.0, handle_signals=False)
    sel.close()
    assert scorer.failed > 0 and report.failed_attempts == scorer.failed == report.retries
    assert len(scorer.returned) == len(set(scorer.returned)) == report.spent == BUDGET
    assert report.to_dict()["scorer_failures"] == {"failed_attempts": scorer.failed, "retries": scorer.failed}
    assert "The scorer failed" in report.to_markdown()
    _same(report, _clean(small_bench, tmp_path, concurrency))


class _RateLimited(Exception):
    def __init__(self, **kw):
        super().__init__("429 Too Many Requests")
        self.__dict__.update(kw)


class _Response:
    def __init__(self, headers):
        self.headers = headers


def test_retry_after_hints_are_read_and_followed(small_bench, tmp_path):
    """``retry_after`` in seconds, a ``Retry-After`` header in seconds or as an HTTP date; anything else is
    no hint, and the backoff doubles with jitter within its cap."""
    assert retry_after(_RateLimited(retry_after=2.5)) == 2.5
    assert retry_after(_RateLimited(response=_Response({"retry-after": "7"}))) == 7.0
    date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 <= retry_after(_RateLimited(response=_Response({"Retry-After": date}))) <= 31
    assert retry_after(RuntimeError("x")) is None
    assert retry_after(_RateLimited(retry_after="soon")) is None and retry_after(_RateLimited(retry_after=True)) is None
    backoff = _Backoff(RETRIES, 1.0, 3.0)
    for attempt, (low, high) in enumerate([(0.5, 1.0), (1.0, 2.0), (1.5, 3.0), (1.5, 3.0)]):
        assert low <= backoff.delay(attempt, RuntimeError()) <= high
    # Followed: a 0.3 s hint holds the retry back although the backoff's own wait is 0.
    b, _ = small_bench
    seen = []

    def scorer(model, ids):
        seen.append(time.monotonic())
        if len(seen) == 3:
            raise _RateLimited(retry_after=0.3)
        return b.scores[b.models.index(model), ids].tolist()

    sel = _selector(small_bench, tmp_path / "hint.db", concurrency=1)
    report = run(scorer, sel, retry_wait=0.0, handle_signals=False)
    sel.close()
    assert seen[3] - seen[2] >= 0.3 and report.retries == 1


def test_a_log_without_room_for_its_reserve_pays_for_nothing(small_bench, tmp_path, monkeypatch):
    """The disk is too full to keep the log's reserve: the run asks the scorer for nothing (a score it could
    not save would be paid twice) and says so in one line; with space back it runs as usual."""
    b, _ = small_bench
    scorer = _Scorer(b)
    monkeypatch.setattr(journal.Journal, "keep_reserve", lambda self: False)
    sel = _selector(small_bench, tmp_path / "run.db", concurrency=4)
    with pytest.raises(LogWriteError, match=r"run.db: the disk is full: no room to keep the log's reserve of 512 KiB "
                                            r".*nothing more was asked, every cell paid for is in the log"):
        run(scorer, sel, handle_signals=False)
    sel.close()
    assert scorer.calls == 0
    monkeypatch.undo()
    again = _selector(small_bench, tmp_path / "run.db", concurrency=4)
    report = run(scorer, again, handle_signals=False)
    again.close()
    _same(report, _clean(small_bench, tmp_path, 4))


def test_a_log_that_cannot_be_written_says_exactly_what_is_asked_again(small_bench, tmp_path, monkeypatch):
    """Every commit fails from the 6th write on (an I/O error; freeing the reserve does not help): the run
    stops asking, tries to log the batches in flight, and the error's count of cells asked again is the
    count of returned cells the log does not hold."""
    b, _ = small_bench
    scorer = _Scorer(b, delay=0.01)
    original, state = journal.Journal._commit, {"writes": 0}

    def commit(self, *statements):
        if statements[0][0].startswith(("INSERT INTO told", "INSERT OR REPLACE INTO paid")):
            state["writes"] += 1
            if state["writes"] >= 6:
                raise journal.LogFull(errno.EIO, "SQLite: disk I/O error")
        return original(self, *statements)

    monkeypatch.setattr(journal.Journal, "_commit", commit)
    sel = _selector(small_bench, tmp_path / "run.db", concurrency=4)
    with pytest.raises(LogWriteError) as info:
        run(scorer, sel, handle_signals=False)
    sel.close()
    monkeypatch.undo()
    logged = sum(len(r["examples"]) for r in log_records(tmp_path / "run.db"))
    again = int(str(info.value).rsplit("; ", 1)[1].split(" cells")[0].replace(",", ""))
    assert again == len(scorer.returned) - logged > 0, str(info.value)


def test_the_command_line_after_a_keyboard_interrupt_in_the_scorer(tmp_path, monkeypatch, capsys):
    """``select`` at concurrency 4 whose scorer raises KeyboardInterrupt on its 9th call: exit 130 with one
    line; the resumed run says which batches it tells from the log and asks none of them again."""
    from pulse_jax import cli, stand_in

    (tmp_path / "kiscore.py").write_text(
        "from pulse_jax import stand_in\nCALLS = []\n"
        "def score(model, ids):\n"
        "    CALLS.append((model, tuple(ids)))\n"
        "    if len(CALLS) == 9:\n"
        "        raise KeyboardInterrupt\n"
        "    return stand_in.score(model, ids)\n")
    (tmp_path / "models.txt").write_text("\n".join(stand_in.models()[:6]) + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    argv = ["select", "--models", "models.txt", "--examples", "1000", "--budget", "400", "--batch-size", "16",
            "--method", "ucbe", "--evaluate", "kiscore:score", "--stop", "budget", "--quiet", "--concurrency", "4",
            "--log", "run.db"]
    assert cli.main(argv) == 130
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "stopped by a KeyboardInterrupt in the scorer" in err and "16 will be asked again" in err, err
    import kiscore

    assert cli.main(argv) == 0
    line = capsys.readouterr().out.split("\n")[0]
    # The others in flight (at most 3 batches of 16) were logged as paid, those that had returned but
    # were not told yet told from the log now (how many had been told before the interrupt depends on
    # the threads' timing); the interrupted call's 16 cells are asked again.
    told = re.search(r"([\d,]+) cells paid for before are told from the log; 16 cells paid for whose calls never "
                     r"came back", line)
    assert told and int(told.group(1).replace(",", "")) in (0, 16, 32, 48), line
    assert not [r for r in log_records(tmp_path / "run.db") if r["type"] == "paid"]
    returned = [c for k, c in enumerate(kiscore.CALLS) if k != 8]
    cells = [(m, i) for m, ids in returned for i in ids]
    assert len(cells) == len(set(cells)) == 400                    # the failed batch alone was asked again


@pytest.mark.integration   # 14-17 s: the second test command keeps the default run within its time
def test_a_stop_in_the_middle_of_the_asks_resumes_to_the_uninterrupted_run():
    """At concurrency 16 on 40 models, a KeyboardInterrupt in the scorer at 12 points, some while the
    runner is refilling its batches: a batch told after the asks were cut short would be told before asks
    an uninterrupted run makes first, and the resumed run (which replays asks up to each told batch)
    would then ask differently. Every resume must equal the uninterrupted run."""
    import tempfile
    from pathlib import Path

    from pulse_jax import stand_in

    bench = stand_in.benchmark()

    def selector(log, concurrency=16):
        return Selector(bench.models, 1000, 40 * 8 + 8 * 50, batch_size=8, method="ucbe", seed=3, log=log,
                        stop="budget", concurrency=concurrency)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        first = selector(root / "clean.db", concurrency=16)
        clean = run(_Scorer(bench, delay=0.0), first, handle_signals=False)
        first.close()
        differing = []
        for point in range(41, 89, 4):
            scorer = _Scorer(bench, fail_on=point, error=KeyboardInterrupt(), delay=0.001, fail_delay=0.0)
            sel = selector(root / f"k{point}.db", concurrency=16)
            with pytest.raises(Interrupted):
                run(scorer, sel, handle_signals=False)
            sel.close()
            scorer.fail_on = None
            again = selector(root / f"k{point}.db", concurrency=16)
            report = run(scorer, again, handle_signals=False)
            again.close()
            assert len(scorer.returned) == len(set(scorer.returned))
            if report.evaluated != clean.evaluated:
                differing.append(point)
        assert not differing, differing
