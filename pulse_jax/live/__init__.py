"""Live selection: pick the best real model, one batch of real evaluations at a time.

The pieces live in their own modules; this one gathers them:

* `Selector` (`pulse_jax.live.selector`): ask/tell on the simulation's own kernel;
* `run` (`pulse_jax.live.runner`): drives a selector with ``evaluate(model, example_ids) -> scores``;
* `pulse_jax.live.journal`: the durable log (an SQLite database) and its verified replay;
* `Report` (`pulse_jax.live.report`): ranking, confidence sequences, separation.
"""
from pulse_jax.live.journal import LOG_VERSION
from pulse_jax.live.report import Report
from pulse_jax.live.runner import CallTimeout, EvaluationError, Interrupted, run
from pulse_jax.live.compiled import draw_order
from pulse_jax.live.ledger import LogWriteError
from pulse_jax.live.plan import Plan
from pulse_jax.live.request import Request
from pulse_jax.live.selector import CONCURRENCY, Selector

__all__ = ["Selector", "Plan", "Request", "Report", "run", "EvaluationError", "Interrupted", "LogWriteError", "LOG_VERSION",
           "draw_order", "CONCURRENCY", "CallTimeout"]
