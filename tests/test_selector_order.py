"""`Selector(order=...)`: batches in given per-model orders, partly returned batches logged and
resumed as they were asked, and `draw_order` (a model's draws for a seed, fixed in advance)."""
import numpy as np
import pytest

from pulse_jax import live
from pulse_jax.errors import PulseInputError

MODELS = ["a", "b", "c"]
N = 30


def _orders(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {m: [str(e) for e in rng.permutation(N)] for m in MODELS}


def _selector(log, order, **kw):
    kw.setdefault("rule", "ucbe")      # pulls every model in turn: each order is used as far as the budget goes
    return live.Selector(MODELS, [str(e) for e in range(N)], 60, method="ucbe", batch_size=4, seed=1,
                         refit_every=0, stop="budget", log=log, order=order, **kw)


def _truth(model: str, example) -> float:
    return float((int(example) * (3 + MODELS.index(model))) % 5 < 3)


def test_batches_follow_each_model_s_order(tmp_path):
    order = _orders(0)
    with _selector(tmp_path / "a.db", order) as sel:
        while (r := sel.ask()) is not None:
            sel.tell(r, [_truth(r.model, e) for e in r.example_ids])
        for m, ids in sel.evaluated().items():
            assert ids == order[m][:len(ids)] and ids
        assert 12 < sel.spent <= 60


def test_draw_order_is_the_selector_s_own_draws():
    with live.Selector(MODELS, N, 3 * N, method="ucbe", batch_size=4, seed=7, refit_every=0, stop="budget") as sel:
        seen = {i: [] for i in range(3)}
        while (r := sel.ask()) is not None:
            seen[r.model_index] += list(r.example_index)
            sel.tell(r, [0.5] * len(r.example_index))
    for i in range(3):
        assert seen[i] == live.draw_order(7, i, N, 4).tolist()      # every example, in the order drawn


def _partly_returned(log):
    """A selection that dies with a batch in flight, two of its four cells logged as paid."""
    sel = _selector(log, _orders(0))
    for _ in range(4):                      # the first look, then one bandit batch
        r = sel.ask()
        sel.tell(r, [_truth(r.model, e) for e in r.example_ids])
    r = sel.ask()
    partial = [_truth(r.model, e) if k < 2 else None for k, e in enumerate(r.example_ids)]
    sel.log_partial(r, partial)
    sel.close()                             # the process dies with the batch in flight
    return r


def test_a_partly_returned_batch_is_asked_again_as_it_was_with_its_scores_from_the_log(tmp_path):
    log = tmp_path / "p.db"
    r = _partly_returned(log)
    again = _selector(log, _orders(0))      # the same orders (Inspect's: fixed by the seed)
    r2 = again.ask()
    assert (r2.model, r2.example_ids) == (r.model, r.example_ids)
    assert again.ledger.paid_cells(r2) == {e: _truth(r.model, e) for e in r.example_ids[:2]}
    again.tell(r2, [_truth(r.model, e) for e in r2.example_ids])
    again.close()
    third = _selector(log, _orders(5))      # told batches replay whatever the new order
    assert third.spent == 5 * 4 and third.ledger.paid_cells(r2) == {} and third.ledger.paid_held == 0
    third.close()


def test_paid_cells_are_matched_by_model_and_example_whichever_batch_asks_them(tmp_path):
    """A fresh order after the restart asks other batches (and other tickets): the logged cells are told from
    the log when a batch asks them, never evaluated again, and their row survives the run's own writes."""
    log = tmp_path / "q.db"
    r = _partly_returned(log)
    known = {e: _truth(r.model, e) for e in r.example_ids[:2]}
    again = _selector(log, _orders(99))
    assert again.ledger.paid_held == 2
    evaluated = []
    while (req := again.ask()) is not None:
        cached = again.ledger.paid_cells(req)
        assert all(cached[e] == known[e] for e in cached)
        new = [e for e in req.example_ids if e not in cached]
        evaluated += [(req.model, e) for e in new]
        if req.model == r.model and len(evaluated) > 6:
            again.log_partial(req, [cached.get(e) for e in req.example_ids])   # rows under this run's tickets
        again.tell(req, [cached.get(e, _truth(req.model, e)) for e in req.example_ids])
    told = again.evaluated()
    again.close()
    assert not set(evaluated) & {(r.model, e) for e in known}                 # never evaluated twice
    assert set(known) <= set(told[r.model])                                  # ... and told from the log


def test_bad_orders_and_a_drawn_log_are_refused_in_one_line(tmp_path):
    order = _orders(0)
    with pytest.raises(PulseInputError, match="order: no order for model 'c'"):
        _selector(None, {m: order[m] for m in MODELS[:2]})
    with pytest.raises(PulseInputError, match=r"order of 'a': not a permutation of the 30 examples \(1 missing"):
        _selector(None, {**order, "a": order["a"][:-1]})
    with _selector(tmp_path / "d.db", None) as sel:
        r = sel.ask()
        sel.tell(r, [0.0] * len(r.example_ids))
    with pytest.raises(PulseInputError, match="example_order is 'drawn' in the log, 'given' here"):
        _selector(tmp_path / "d.db", order)
