"""Every returned result is kept at any concurrency: durable the moment it returns (whatever the order the
batches are told in), a ledger of what was paid written before each call, money counted at each model's
own price, and what an earlier run counted (``after_stop``) kept by a rerun."""
import threading
import time

import numpy as np
import pytest

from pulse_jax.errors import PulseNote
from pulse_jax.live import Selector, journal, money, run

BUDGET = 6 * 8 + 8 * 30


def _scores(bench):
    def scorer(model, ids):
        return bench.scores[bench.models.index(model), ids].tolist()
    return scorer


def test_a_batch_that_returns_behind_an_older_one_is_in_the_log_at_once(small_bench, tmp_path):
    """The oldest batch in flight hangs while the three asked after it return: their scores are committed
    (as paid) before it returns, so a kill -9 then would re-pay the hung call's cells alone."""
    b, V = small_bench
    log = tmp_path / "run.db"
    sel = Selector(b.models, 200, BUDGET, batch_size=8, V=V, seed=5, refit_every=0, log=log, stop="budget",
                   concurrency=4)
    release, calls, returned, lock = threading.Event(), [], [], threading.Lock()

    def scorer(model, ids):
        with lock:
            calls.append((model, tuple(ids)))
            number = len(calls)
        if number == 10:                 # a bandit batch, oldest in flight from here on
            release.wait(30)
        else:
            time.sleep(0.002)
        with lock:
            returned.append((model, tuple(ids)))
        return b.scores[b.models.index(model), list(ids)].tolist()

    done = {}
    worker = threading.Thread(target=lambda: done.update(report=run(scorer, sel, handle_signals=False)))
    worker.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with lock:
            if len(calls) >= 13 and len(returned) >= 12:     # all but the hung call are back
                break
        time.sleep(0.01)
    time.sleep(0.2)        # the runner commits a return within its 50 ms poll
    _, records = journal.snapshot(log)
    with lock:
        back = {(m, e) for m, ids in returned for e in ids}
        hung, asked_then = calls[9], len(calls)
    in_log = {(r["model"], e) for r in records for e in r["examples"]}
    release.set()
    worker.join(60)
    sel.close()
    assert asked_then == 13 and len(back) == 12 * 8                         # 3 returned behind the hung one
    assert back <= in_log and not {(hung[0], e) for e in hung[1]} & in_log   # every returned cell, durable
    clean = Selector(b.models, 200, BUDGET, batch_size=8, V=V, seed=5, refit_every=0, stop="budget", concurrency=4)
    assert done["report"].evaluated == run(_scores(b), clean, handle_signals=False).evaluated   # told in ask order


def test_the_ledger_counts_what_was_in_flight_at_a_kill(small_bench, tmp_path):
    b, V = small_bench
    log = tmp_path / "run.db"
    sel = Selector(b.models, 200, BUDGET, batch_size=8, V=V, seed=5, refit_every=0, log=log, stop="budget",
                   concurrency=4)
    asked = [sel.ask() for _ in range(3)]
    for r in asked:
        sel.ledger.record_asked(r)                       # before the call, as the runner does
    sel.tell(asked[0], _scores(b)(asked[0].model, list(asked[0].example_index)))
    sel.log_paid(asked[1], _scores(b)(asked[1].model, list(asked[1].example_index)))
    sel.ledger._journal.close()                   # killed with asked[2]'s call out
    again = Selector(b.models, 200, BUDGET, batch_size=8, V=V, seed=5, refit_every=0, log=log, stop="budget",
                     concurrency=4)
    assert sum(again.ledger.asked_cells().values()) == 24 and again.ledger.unreturned_cells(again.spent) == 8
    assert again.spent == 8 and again.ledger.paid_held == 8
    prices = money.parse_prices([f"{b.models[0]}=0.5", "*=0.1"], list(b.models))
    meter = money.Meter(list(b.models), prices, money.expected_cost_per_cell(list(b.models), prices))
    expected = sum(8 * (0.5 if r.model == b.models[0] else 0.1) for r in asked)
    assert meter.update(again.evaluated(), again.ledger.asked_cells()) == pytest.approx(expected) and meter.cells == 24
    again.close()


@pytest.mark.parametrize("budget_usd", [3.0, 9.0])
def test_a_money_budget_at_any_concurrency_spends_what_one_batch_at_a_time_spends(small_bench, budget_usd):
    """Every batch in flight at its own model's price: 8 in flight spend at least 0.9x what one at a time
    spends, never more than the budget, and the meter's spend is what the scorer was paid."""
    b, V = small_bench
    models = list(b.models)
    prices = money.parse_prices([f"{models[2]}=0.05", "*=0.01"], models)
    spend = {}
    for concurrency in (1, 8):
        sel = Selector(models, 200, 6 * 200, batch_size=8, V=V, seed=5, refit_every=0, stop="budget",
                       concurrency=concurrency)
        meter = money.Meter(models, prices, money.expected_cost_per_cell(models, prices), budget_usd=budget_usd)
        paid, lock = [], threading.Lock()

        def scorer(model, ids):
            with lock:
                paid.append(prices[model].per_call * len(ids))
            time.sleep(np.random.default_rng(len(paid)).uniform(0, 0.004))
            return b.scores[models.index(model), ids].tolist()

        run(scorer, sel, handle_signals=False,
            allow=lambda r: meter.fits(r.model, len(r.example_ids), sel.evaluated(), sel.ledger.asked_cells()))
        meter.update(sel.evaluated(), sel.ledger.asked_cells())
        assert meter.usd == pytest.approx(sum(paid)) and sum(paid) <= budget_usd + 1e-9
        assert meter.stopped and "does not fit in the" in meter.line()
        spend[concurrency] = sum(paid)
    assert spend[8] >= 0.9 * spend[1]


def test_after_stop_survives_a_rerun_of_a_finished_log(small_bench, tmp_path, monkeypatch):
    from pulse_jax.live import runner

    b, V = small_bench
    # planned for one batch in flight (no holds) and run at 8, bypassing the runner's one owner of the
    # concurrency, so that batches return after the stop
    monkeypatch.setattr(runner, "_concurrency_for", lambda evaluate, selector: 8)
    log = tmp_path / "run.db"

    def selector():
        return Selector(b.models, 200, 6 * 200, batch_size=8, V=V, seed=5, refit_every=4, method="pulse_hedged",
                        rule="top_two_interval", cs_grid=200, stop="certified", concurrency=1, log=log)

    sel = selector()
    first = run(_scores(b), sel, handle_signals=False)
    sel.close()
    assert first.stopped and first.after_stop > 0
    again = selector()
    rerun = run(_scores(b), again, handle_signals=False)
    again.close()
    assert rerun.after_stop == first.after_stop and rerun.evaluated == first.evaluated


def test_a_keyword_given_beside_params_is_refused_not_dropped(small_bench):
    from pulse_jax.errors import PulseInputError

    b, V = small_bench
    for extra, needle in [({"delta": 0.1}, "delta given beside params="),
                          ({"exploration": 2.0}, "exploration given beside params="),
                          ({"delta": 0.1, "exploration": 2.0}, "delta and exploration given beside params=")]:
        with pytest.raises(PulseInputError, match=needle) as err:
            Selector(b.models, 200, 400, V=V, params={"delta": 0.05}, **extra)
        assert "\n" not in str(err.value)
    with Selector(b.models, 200, 400, V=V, params={"delta": 0.1}) as sel:
        assert sel.delta == pytest.approx(0.1)


def test_a_selection_through_selector_and_through_plan_is_the_same_selection(tmp_path):
    """One configuration, two doors: the plan's choices passed to `Selector` by hand make the same requests,
    told the same scores, as `Plan.selector`, and end with the same report."""
    from pulse_jax import choices
    from pulse_jax.live import Plan

    models, n = ["a", "b", "c", "d"], 40

    def score(model, example):
        return float((int(example) * (3 + models.index(model))) % 7 < 2 + models.index(model))

    plan = Plan(log=str(tmp_path / "plan.db"), budget=120, method="ucbe", batch_size=4, seed=3, concurrency=1,
                refit_every=0)
    estimator, rule, stop = plan.plugins()
    doors = [plan.selector(models, n),
             Selector(models, n, 120, method=estimator, rule=rule, stop=stop, batch_size=4, seed=3, refit_every=0,
                      cs_grid=choices.cs_grid(plan.sequence, choices.keyword), params=plan.numbers(plan.plugins(), 4),
                      concurrency=1, log=tmp_path / "hand.db")]
    asked = []
    for sel in doors:
        requests = []
        while (r := sel.ask()) is not None:
            requests.append((r.model, r.example_ids))
            sel.tell(r, [score(r.model, e) for e in r.example_ids])
        asked.append((requests, sel.result().ranking, sel.result().certificate))
        sel.close()
    assert asked[0] == asked[1] and len(asked[0][0]) > 4


_KILLED_IN_THE_COMMIT = r"""
import os, signal, sys
import numpy as np
from pulse_jax import synthetic
from pulse_jax.live import Selector, ledger
from pulse_jax.stats import factorization

b = synthetic.make_benchmark(seed=0, n_models=6, n_examples=200, n_train=40)
V = factorization.fit_example_embeddings(b.train, rank=3)
sel = Selector(b.models, 200, {budget}, batch_size=8, V=V, seed=5, refit_every=0, log=sys.argv[1], stop="budget",
               concurrency=4)
for _ in range(6):                         # the first look, told
    r = sel.ask()
    sel.tell(r, b.scores[r.model_index, list(r.example_index)])
r = sel.ask()
print(r.model, ",".join(map(str, r.example_ids)), flush=True)
# killed between the scorer's return and the commit (waiting for the log, as behind a synced tell)
ledger.Ledger._write = lambda self, *a, **k: os.kill(os.getpid(), signal.SIGKILL)
sel.log_paid(r, b.scores[r.model_index, list(r.example_index)])
"""


def test_a_return_killed_before_its_commit_is_told_from_the_log_not_asked_again(small_bench, tmp_path):
    """kill -9 after the scorer returned a batch and before its commit reached the log (the commit waits
    behind another transaction): the resumed run holds the batch as paid, from ``<log>.returned``, and
    asks the scorer for none of its cells; the run then ends as an uninterrupted one."""
    import subprocess
    import sys

    b, V = small_bench
    log = tmp_path / "run.db"
    child = subprocess.run([sys.executable, "-c", _KILLED_IN_THE_COMMIT.format(budget=BUDGET), str(log)],
                           capture_output=True, text=True, timeout=300)
    assert child.returncode == -9, child.stderr[-2000:]
    model, ids = child.stdout.split()
    killed = {(model, int(e)) for e in ids.split(",")}
    assert (tmp_path / "run.db.returned").stat().st_size > 0
    asked = []

    def scorer(m, examples):
        asked.extend((m, int(e)) for e in examples)
        return b.scores[b.models.index(m), list(examples)].tolist()

    again = Selector(b.models, 200, BUDGET, batch_size=8, V=V, seed=5, refit_every=0, log=log, stop="budget",
                     concurrency=4)
    assert again.ledger.paid_held == 8
    report = run(scorer, again, handle_signals=False)
    again.close()
    assert not killed & set(asked)                                   # 0 returned cells paid twice
    assert not (tmp_path / "run.db.returned").exists()              # let go cleanly: all of it is in the log
    clean = Selector(b.models, 200, BUDGET, batch_size=8, V=V, seed=5, refit_every=0, stop="budget", concurrency=4)
    assert report.evaluated == run(_scores(b), clean, handle_signals=False).evaluated


def test_returns_kept_for_another_log_of_the_same_name_are_set_aside(small_bench, tmp_path):
    """``<log>.returned`` lines name their log (its run checksum): a file left beside a new log of the same
    name adds nothing to it and is set aside under a new name, said in one line."""
    from pulse_jax.live import returned

    b, V = small_bench
    log = tmp_path / "run.db"
    (tmp_path / "run.db.returned").write_bytes(returned.line("0123abcd", b.models[0], [0, 1], [1.0, 0.0]))
    with pytest.warns(PulseNote) as said:
        with Selector(b.models, 200, BUDGET, batch_size=8, V=V, seed=5, log=log, stop="budget") as sel:
            assert sel.ledger.paid_held == 0
            assert (tmp_path / "run.db.returned").stat().st_size == 0
    assert (tmp_path / "run.db.returned.orphaned").read_bytes().count(b"\n") == 1
    said = [str(w.message) for w in said if "set aside" in str(w.message)]
    assert len(said) == 1 and "run.db.returned.orphaned" in said[0]
    assert returned.read(tmp_path / "missing.returned", "x") == ([], 0)
    torn = returned.line("abc", "m", [1], [0.5])
    (tmp_path / "t.returned").write_bytes(torn + torn[:-9])          # a torn last line is left out
    assert returned.read(tmp_path / "t.returned", "abc") == ([("m", {1: 0.5})], 0)
    assert returned.read(tmp_path / "t.returned", "other") == ([], 1)


@pytest.mark.parametrize("trial", range(10))
def test_a_new_log_of_the_same_command_tells_none_of_a_deleted_logs_returns(small_bench, tmp_path, trial):
    """A run with a wrong scorer (every score flipped) leaves returned batches in ``<log>.returned`` (as a
    kill -9 between the spool's write and the log's commit would); the user deletes the log and runs the
    same command with the right scorer: every new log's header carries its own random ``log_id``, so none
    of the stale lines is told (0 stale cells), and one line says what was set aside."""
    from pulse_jax.live import returned

    b, V = small_bench
    log = tmp_path / "run.db"
    wrong = {}

    def flipped(model, ids):
        scores = [1.0 - s for s in b.scores[b.models.index(model), ids].tolist()]
        wrong.update({(model, e): s for e, s in zip(ids, scores)})
        return scores

    kwargs = dict(batch_size=8, V=V, seed=5 + trial, refit_every=0, log=log, stop="budget")
    with Selector(b.models, 200, BUDGET, **kwargs) as sel:
        first_id = sel.ledger._journal.run_id
        run(flipped, sel, handle_signals=False)
    # What a kill -9 leaves: the spool still holds the flipped batches, in the old log's name.
    (tmp_path / "run.db.returned").write_bytes(b"".join(returned.line(first_id, m, [e], [s])
                                                        for (m, e), s in wrong.items()))
    for companion in ("run.db", "run.db-journal", "run.db.embeddings.npy"):
        (tmp_path / companion).unlink(missing_ok=True)
    with pytest.warns(PulseNote) as said:
        with Selector(b.models, 200, BUDGET, **kwargs) as sel:
            assert sel.ledger._journal.run_id != first_id
            run(_scores(b), sel, handle_signals=False)
    _, records = journal.snapshot(log)
    told = {(r["model"], e): s for r in records for e, s in zip(r["examples"], r["scores"])}
    assert told and {k for k in told if k in wrong}                 # the new run asked cells the old one had
    stale = [k for k, s in told.items() if s != float(b.scores[b.models.index(k[0]), k[1]])]
    assert stale == []                                               # 0 stale cells told
    said = [str(w.message) for w in said if "set aside" in str(w.message)]
    assert len(said) == 1, said
