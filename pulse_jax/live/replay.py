"""Resuming a live selection from its log: the header checked against the run's, then every logged
batch asked again and told with its logged scores, so the resumed `pulse_jax.live.Selector` stands
where the logged run stood (docs/live.md, "Durability").

The replay drives the selector's own ask with what the log did at each ask (`pulse_jax.engine.REPLAYED_ASK`,
``REPLAYED_HOLD``, ``REPLAYED_UNTOLD``): the logged run went on there whatever the stopping rule says
now (it may have stopped by another rule), and held where it held. Every record is checked against
the request the selector makes; a log that another run wrote is refused in one line naming the record.
"""
from __future__ import annotations

import dataclasses

from pulse_jax import engine
from pulse_jax.errors import PulseInputError, require
from pulse_jax.live import log_schema
from pulse_jax.live.request import Request, check_scores


def open_log(selector) -> None:
    """Read the selector's log (locked by its ledger), check its header, replay it (verified whole
    first), then let the ledger take it; a new log starts with the run's header."""
    ledger = selector.ledger
    header, records = ledger.read()
    selector.resumed = header is not None    # the log held a run: this one continues it (told batches or not)
    if header is None:
        ledger.start({**selector._header, "train": selector._train_fingerprint,
                      **({} if selector.plan is None else {"plan": selector.plan})})
        return
    selector.plan = header.get("plan", selector.plan)
    path, config = selector.log_path, selector.config
    log_schema.check_header(path, log_schema.grown_budget(path, header, selector._header, selector.plugins.rule), selector._header)
    logged_train = header.get("train")
    require(selector._train_fingerprint is None or logged_train in (None, selector._train_fingerprint),
            f"train: these historical scores differ from the ones {path} was started with; resume "
            "with the same --train, or without --train (the run keeps its first embeddings)")
    records = list(records)            # verified whole before anything is replayed
    held = sum(len(r["examples"]) for _, r in records if r.get("type") == "tell" and isinstance(r.get("examples"), list))
    require(held <= config.budget, f"--budget {config.budget:,}: {path} already holds {held:,} "
                                   f"evaluated cells; give --budget {held:,} or more to continue it")
    _replay(selector, records)
    selector._after_stop = ledger.settle()   # told after an earlier run's stop fired


def _logged(records) -> dict:
    """``{ticket: REPLAYED_HOLD or REPLAYED_ASK}`` of every told ticket in ``records``."""
    return {r.get("ticket"): engine.REPLAYED_HOLD if r.get("examples") == [] else engine.REPLAYED_ASK
            for _, r in records if r.get("type") == "tell"}


def _replay(selector, records) -> None:
    told_on, logged = {}, _logged(records)
    for where, record in records:
        log_schema.check_record_fields(where, record)
        if record.get("type") == "paid":
            selector.ledger.keep_paid(record)
            continue
        require(record["ticket"] not in told_on, f"{where}: ticket {record['ticket']} was already told in "
                                                 f"{told_on.get(record['ticket'])} (a duplicated batch)")
        require(record["model"] in selector.models, f"{where}: unknown model {record['model']!r}")
        require(0 <= record["ticket"] < record["asks_issued"],
                f"{where}: ticket {record['ticket']} was never asked (asks_issued {record['asks_issued']})")
        while selector._asks < record["asks_issued"]:
            if selector._ask(logged.get(selector._asks, engine.REPLAYED_UNTOLD)) is None:
                raise PulseInputError(f"{where}: this selector cannot reproduce the logged requests (was the "
                                      "log edited?)")
        request = selector._pending.get(record["ticket"])
        if selector._order is not None and request is not None and request.model == record["model"]:
            request = _logged_batch(selector, request, record, where)
        if (request is None or request.model != record["model"]
                or list(request.example_ids) != record["examples"]):
            raise PulseInputError(f"{where}: logged batch (model {record['model']!r}, ticket "
                                  f"{record['ticket']}) differs from what this selector asks; the log belongs "
                                  "to another run")
        selector._apply(request, check_scores(request, record["scores"], where))
        told_on[record["ticket"]] = where.rsplit(": ", 1)[-1]


def _logged_batch(selector, request: Request, record: dict, where: str) -> Request:
    """With given orders a resumed run may see another order: a logged batch of the right model and
    size whose examples the model has not seen replaces the one the selector would ask."""
    column = {str(e): j for j, e in enumerate(selector.example_ids)}
    index = [column.get(str(e)) for e in record["examples"]]
    require(None not in index and len(set(index)) == len(index) == len(request.example_index)
            and not set(index) & set(selector._told[request.model_index]),
            f"{where}: logged batch (model {record['model']!r}, ticket {record['ticket']}) is not a batch of "
            "unseen examples of this run; the log belongs to another run")
    logged = dataclasses.replace(request, example_ids=tuple(selector.example_ids[j] for j in index),
                                 example_index=tuple(index))
    selector._pending[request.ticket] = logged
    return logged
