"""Live selection: pick the best real model, one batch of real evaluations at a time.

The pieces live in their own modules; this one gathers them:

* `Selector` (`pulse_jax.live.selector`): ask/tell on the simulation's own kernel, its state a
  `LiveState` (`pulse_jax.live.core`, the pure ask and tell);
* `run` (`pulse_jax.live.runner`): drives a selector with ``evaluate(model, example_ids) -> scores``;
* `pulse_jax.live.journal`: the durable log (an SQLite database) and its verified replay;
* `Report` (`pulse_jax.live.report`): ranking, confidence sequences, separation.
"""
from pulse_jax.protocols import lazy

# Names load on first use: a command's checks read `pulse_jax.live.plan` before JAX is imported.
_EXPORTS = {
    "pulse_jax.live.journal": ["LOG_VERSION"],
    "pulse_jax.live.report": ["Report"],
    "pulse_jax.live.runner": ["CallTimeout", "EvaluationError", "Interrupted", "run"],
    "pulse_jax.live.compiled": ["draw_order"],
    "pulse_jax.live.ledger": ["LogWriteError"],
    "pulse_jax.live.plan": ["Plan"],
    "pulse_jax.live.report_files": ["write_report"],
    "pulse_jax.live.request": ["Request"],
    "pulse_jax.live.selector": ["Selector"],
    "pulse_jax.live.core": ["LiveState"],
    "pulse_jax.choices": ["CONCURRENCY"],
}

__getattr__, __dir__, __all__ = lazy(globals(), _EXPORTS)
