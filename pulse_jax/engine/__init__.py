"""The bandit engine: one pure ``step`` over an explicit state, run as a ``lax.scan``.

Reading order, one module each:

* `config` -- `BanditConfig` (static: shapes, batch size, which
  plug-ins) and the run's `Plugins`; the traced numbers are a `pulse_jax.RunParams`
  (the engine's `pulse_jax.BanditParams` and each plug-in's own);
* `state` -- `Episode` (drawn once per repetition),
  `BanditState` (what the next step reads) and `StepInfo` (what a step reports beside it);
* `kernel` -- `build_kernel`, whose ``init`` draws the initial batches and whose ``step`` is one
  bandit pull: ``stop_status`` (everything the stopping rule decides), ``ask`` (choose, refit when
  due, draw) and ``tell`` (observe); the concurrent loop and the live selector call ``stop_status``,
  ``ask`` and ``tell`` separately, on the same kernel;
* `refit` -- the refit of ``U`` a step takes when due (and ``init`` once): on a CPU one repetition
  and a few whole models at a time, while their cells are in cache;
* `drivers` -- `make_run` (the whole run for one PRNG key) and
  `make_batched_run` (a batch that stops computing once every repetition has stopped);
* `concurrent` -- `make_concurrent_run`: a batch of runs with ``config.concurrency`` batches in
  flight, as a live selection asks them (a static schedule of asks and returns);
* `bookkeeping` -- estimates, bounds, certificates, half-widths;
* `run_trace` -- what only a report reads (money, the stop's claim, snapshots, each sequence's
  running bounds), folded from each step's `StepInfo` by the drivers.

The engine imports the plug-in interfaces (``pulse_jax.estimators.base``, ``rules.base``,
``stopping.base``), never a built-in plug-in: names resolve through `pulse_jax.registry`. ``make_run(config, method)`` returns a pure function of
``(key, scores, V, params)``, so
``jax.jit(jax.vmap(run, in_axes=(0, None, None, None)))(keys, scores, V, params)``
runs every repetition at once, and ``in_axes=(0, None, None, 0)`` runs a
sweep over parameter values as well (`pulse_jax.sweep`).

Sampling without replacement (`pulse_jax.stats.without_replacement`): each model's
observed examples are a packed bit mask carried in the state, and a pull of
``B'`` examples is an exact uniform ``B'``-subset of the unobserved ones,
drawn in ``O(B log B + n / 32)`` work with no per-repetition permutation.
Refits work on the observed cells only: the initial batches plus a log of
every pull and its scores, kept in the state as (model, batch) blocks, so the
state holds everything observed and the episode stays constant.

Common random numbers: a model's draws depend only on the repetition key,
the model's row and how many of its examples were seen, never on the method,
so UCB-E, PULSE and Naive-Pooling with the same key see the same initial
batches, and the same k-th batch of a model whenever both pull it k times.
"""

from pulse_jax.protocols import lazy

# Names load on first use: importing the package (or `pulse_jax.engine.params`, which a command's
# checks read) imports no JAX.
_EXPORTS = {
    "pulse_jax.engine.bookkeeping": ["Certificate", "Snapshots"],
    "pulse_jax.engine.config": ["INTERVALS", "BanditConfig", "Plugins", "check_compatible", "check_levels", "get_estimator",
                                "as_plugins", "log_chunk_slots", "refit_due", "refit_period", "refits_periodically",
                                "resolve_params", "traced_params"],
    "pulse_jax.engine.drivers": ["EPISODE_AXES", "STOP_BLOCK_STEPS", "bind", "make_batched_run", "make_run"],
    "pulse_jax.engine.refit": ["adam_refit"],
    "pulse_jax.engine.kernel": ["REPLAYED_ASK", "REPLAYED_HOLD", "REPLAYED_UNTOLD", "Asked", "Batch", "Choice", "InFlight",
                                "Kernel", "Start", "Static", "Status", "build_kernel", "resumed", "room"],
    "pulse_jax.engine.concurrent_run": ["AskNow", "Waiting", "ask_now", "blocked_by_flight", "event_schedule",
                                        "make_concurrent_run", "n_events"],
    "pulse_jax.engine.state": ["BanditState", "Episode", "PullLog", "RunResult", "StepInfo", "StepRecord", "Told",
                               "draw_keys", "initial_draws", "observed_blocks"],
    "pulse_jax.engine.run_trace": ["Trace"],
}

__getattr__, __dir__, __all__ = lazy(globals(), _EXPORTS)
