"""What a runner reads and writes of a selection's durable log, for the runners other than
`pulse_jax.live.run`: the command line (its money meter, resume line and finish mark) and Inspect's
``select_best`` (which evaluates samples as Inspect schedules them). Each function takes the
`pulse_jax.live.Selector`, so nothing outside `pulse_jax.live` holds the selector's log
(`pulse_jax.live.ledger.Ledger`)."""
from __future__ import annotations

from pulse_jax.live.ledger import LogWriteError
from pulse_jax.live.request import Request


def asked_cells(selector) -> dict:
    """``{model: cells}`` paid for (sent to the scorer) over every run of the log, returned or not."""
    return selector.ledger.asked_cells()


def unpaid_cells(selector, request: Request) -> int:
    """How many of ``request``'s cells the log does not hold as paid (a call would pay for them)."""
    return len(request.example_ids) - len(selector.ledger.paid_cells(request))


def release(selector, request: Request) -> dict:
    """``{example id: score}`` of ``request``'s cells the log holds as paid (told from it); the others are
    counted in the log as paid *before* any is evaluated, so a run killed mid-batch still counts them."""
    known = selector.ledger.paid_cells(request)
    selector.ledger.record_asked(request, len(request.example_ids) - len(known))
    return known


def keep_scored(selector, model: str, cells: dict) -> int:
    """Commit ``{example id: score}`` of ``model`` scored outside any request (an earlier eval's own logs)
    as paid; returns how many were new."""
    return selector.ledger.log_scored(model, cells)


def resume_counts(selector) -> tuple[int, int]:
    """A resumed run's ``(cells paid and logged, told from the log; cells paid whose calls never came
    back, asked again)``."""
    return selector.ledger.paid_held, selector.ledger.unreturned_cells(selector.spent)


def mark_finished(selector, key: dict) -> None:
    """Record in the log that its selection finished as ``key`` says: the same command run again says so
    instead of resuming."""
    selector.ledger.mark_finished(key)


def check_kept(selector) -> None:
    """Refuse (`LogWriteError`, naming where this run's log is saved) a log copied over after its last
    commit, found as the selector let it go."""
    if selector.ledger.replaced:
        raise LogWriteError(selector.ledger.replaced)
