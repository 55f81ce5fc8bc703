"""A run's plug-ins checked once on concrete values, after their shapes (`pulse_jax.engine.conformance`).

Some mistakes in a plug-in type-check and run, and give wrong answers without a word. Each check
below runs the plug-in's functions once, eagerly, on small concrete inputs of the run's sizes (a
seeded draw, so the check is the same every time) and refuses, in one line naming the plug-in and
the function, what would otherwise be silent:

* ``proxies`` returning observations outside their own declared range ``[lower, lower + width]``,
  or a width that is not positive: the confidence sequence clips such observations, and its
  guarantee no longer holds (a width of 0 gives NaN bounds);
* ``update`` changing the state on an empty pull (``pull.size == 0``: a step that spent nothing);
* a sampling rule's ``choose`` naming a model that does not exist (``>= m`` or below ``-1``), or one
  that ``inputs.active`` says cannot be pulled (exhausted; in live selection, a batch in flight): a
  run would stop spending there, and a live run report itself finished;
* a function that gives two answers on the same concrete inputs: it keeps state in Python (a
  counter, a list, the ``random`` module), which runs once, when the program is traced, and never
  again at the steps (every function checked here is traced twice and the answers compared);
* a sampling or stopping rule whose answer changes with ``inputs.low`` / ``inputs.high`` without
  declaring ``needs_interval``: it would read NaN bounds in every run;
* a stopping rule's ``holds`` that raises or does not answer True or False;
* an ``estimate`` that is not finite (the recommendation would be an arbitrary model), and
  ``draw_weights`` that are negative or not finite (no draw design is behind them);
* a sampling rule whose ``eligible`` leaves no model (the recommendation comes from that set);
* a stopping rule's ``focus`` that reads the bounds without ``needs_interval`` (as ``done``).

A check on a few concrete values cannot see every input; it catches the mistakes that show on
any input, which is what the trials found.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from pulse_jax.errors import PulseInputError

#: Why a function that answers twice differently on the same inputs is refused.
_PYTHON_STATE = ("gives two answers on the same inputs: it keeps state in Python (a counter, a list, the random "
                 "module), which runs once when the program is traced, not at every step; keep it in the plug-in's "
                 "state or compute it from the inputs")

#: Slack for float32 rounding when comparing proxies with their declared range.
RANGE_SLACK = 1e-5


def _fail(kind: str, plugin, function: str, message: str):
    raise PulseInputError(f"{kind} {getattr(plugin, 'name', plugin)!r}: {function} {message}"[:500])


def _run(kind, plugin, function, fn, *args, static=()):
    """``fn(*args)`` compiled (one small program: eager control flow would compile every call), any
    failure one line naming the plug-in and the function. Traced twice (a fresh wrapper each time, so
    JAX's trace cache cannot serve the second): answers that differ come from Python-side state."""
    try:
        first, again = (jax.jit(lambda *a: fn(*a), static_argnums=static)(*args) for _ in range(2))
    except PulseInputError:
        raise
    except Exception as err:   # noqa: BLE001 -- the user's code may raise anything
        line = (str(err).strip().splitlines() or [""])[0]
        _fail(kind, plugin, function, f"fails on concrete values of this run's shapes: {type(err).__name__}: {line}")
    if not _same(first, again):
        _fail(kind, plugin, function, _PYTHON_STATE)
    return first


def written_by_user(plugin, built_in: dict) -> bool:
    """Whether a plug-in runs code of its user's: a function not defined in pulse-jax, or a built-in
    whose ``needs_interval`` was changed. The built-ins pass these checks (tested), so only plug-ins
    written by users pay for them."""
    functions = [v for v in plugin if callable(v) and not isinstance(v, type)]
    if any(not getattr(f, "__module__", "").startswith("pulse_jax.") for f in functions):
        return True
    same_name = []
    for factory in built_in.values():
        try:
            original = factory()
        except TypeError:      # a built-in factory that takes its settings (top_k(k), ...)
            continue
        if original.name == plugin.name:
            same_name.append(getattr(original, "needs_interval", None))
    return bool(same_name) and getattr(plugin, "needs_interval", None) not in same_name


def _same(a, b) -> bool:
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True)
                                      for x, y in zip(la, lb))


def _sums_and_pull(m: int, n: int, B: int, with_design: bool, size: int):
    """Plausible sums after the first look (``B`` cells per model) and a pull of ``size`` draws of
    model 0, built in NumPy (no small programs compiled to make them)."""
    from pulse_jax.estimators.base import DrawDesign, ModelSums, Pull

    rng = np.random.default_rng(0)
    f32 = lambda x: jnp.asarray(np.asarray(x, np.float32))   # noqa: E731
    obs = rng.integers(0, 2, (m, B)).astype(np.float32)
    preds = rng.uniform(0.1, 0.9, (m, n)).astype(np.float32)
    unseen_pred = preds[:, B:]
    sums = ModelSums(jnp.asarray(np.full(m, B, np.int32)), jnp.asarray(np.ones(m, np.int32)), f32(obs.sum(1)),
                    f32((obs ** 2).sum(1)), f32(unseen_pred.sum(1)), f32((unseen_pred ** 2).sum(1)),
                    jnp.asarray(np.full(m, n, np.int32)))
    valid = np.arange(B) < size
    scores = np.where(valid, rng.integers(0, 2, B), 0).astype(np.float32)
    batch_preds = np.where(valid, preds[0, B:2 * B], 0).astype(np.float32)
    design = None
    if with_design:   # a uniform draw over the unseen examples, as `draw_design` describes it
        unseen = preds[0, B:]
        design = DrawDesign(f32(np.where(valid, 1.0, 0.0)), f32(n - B), f32(unseen.sum()), f32(n - B),
                            f32((unseen / 1.0).max()), f32(((1.0 - unseen) / 1.0).max()))
    pull = Pull(jnp.asarray(np.int32(0)), jnp.asarray(np.int32(size)), f32(scores.sum()), f32(batch_preds.sum()),
                f32(scores), f32(batch_preds), jnp.asarray(valid), design)
    return sums, pull


#: How far outside [0, 1] an estimate after the first look may lie (a doubly robust estimate may step
#: a little outside; a sum or a per-batch estimate lands far outside).
ESTIMATE_SLACK = 0.05


def check_estimator_values(estimator, n_models: int, n_examples: int, batch_size: int, params) -> None:
    """``update`` keeps the state on an empty pull; ``proxies`` lie in their declared range, with
    positive widths, on a full pull."""
    kind, m, n, B = "estimator", n_models, n_examples, min(batch_size, max(n_examples // 2, 1))
    with_design = estimator.draw_weights is not None
    sums, empty = _sums_and_pull(m, n, B, with_design, 0)
    state = _run(kind, estimator, "init", estimator.init, sums, params)
    after, _ = _run(kind, estimator, "update", estimator.update, state, sums, empty, n, params, static=(3,))
    if not _same(state, after):
        _fail(kind, estimator, "update", "changed the state on an empty pull (pull.size == 0, a step that spent "
                                         "nothing); mask its changes with pull.size > 0")
    estimates = np.asarray(_run(kind, estimator, "estimate", estimator.estimate, state, sums, params))
    if not np.isfinite(estimates).all():
        _fail(kind, estimator, "estimate", f"returned {estimates[~np.isfinite(estimates)][0]} for model "
                                           f"{int(np.argmin(np.isfinite(estimates)))} after the first look; an estimate "
                                           "that is not finite makes the recommendation arbitrary")
    outside = (estimates < -ESTIMATE_SLACK) | (estimates > 1 + ESTIMATE_SLACK)
    if outside.any():
        k = int(np.argmax(outside))
        _fail(kind, estimator, "estimate", f"returned {estimates[k]:g} for model {k} after the first look, outside "
                                           "[0, 1] where every mean score lies (a sum, or an estimate per batch, "
                                           "instead of a mean per cell?); the report would print it beside its "
                                           "interval")
    if with_design:
        _check_draw_weights(estimator, n, B, params)
    if estimator.proxies is None:
        return
    _, pull = _sums_and_pull(m, n, B, with_design, B)
    y, lower, width = (np.asarray(v, np.float64) for v in
                       _run(kind, estimator, "proxies", estimator.proxies, state, sums, pull, n, params, static=(3,)))
    valid = np.broadcast_to(np.asarray(pull.valid), y.shape)
    if not (np.isfinite(y[valid]).all() and np.isfinite(lower[valid]).all() and np.isfinite(width[valid]).all()):
        _fail(kind, estimator, "proxies", "returned values that are not finite (NaN or infinite) for draws that "
                                          "happened")
    if (width[valid] <= 0).any():
        _fail(kind, estimator, "proxies", f"returned a width of {width[valid].min():g}; every width must be > 0 (the "
                                          "range [lower, lower + width] of each observation)")
    slack = RANGE_SLACK * np.maximum(1.0, np.abs(width))
    outside = valid & ((y < lower - slack) | (y > lower + width + slack))
    if outside.any():
        c, b = map(int, np.argwhere(outside)[0])
        _fail(kind, estimator, "proxies", f"returned Y = {y[c, b]:g} outside its declared range [{lower[c, b]:g}, "
                                          f"{lower[c, b] + width[c, b]:g}] (sequence {c}, draw {b}); the confidence "
                                          "sequence would clip it and no longer hold. Declare a range that covers Y")


def _check_draw_weights(estimator, n: int, seen: int, params) -> None:
    """``draw_weights`` on plausible predictions (the first ``seen`` examples seen): finite and >= 0."""
    rng = np.random.default_rng(1)
    preds = jnp.asarray(rng.uniform(0.05, 0.95, n).astype(np.float32))
    unseen = jnp.asarray(np.arange(n) >= seen)
    weights = np.asarray(_run("estimator", estimator, "draw_weights", estimator.draw_weights, preds, unseen, params))
    bad = ~np.isfinite(weights) | (weights < 0)
    if bad.any():
        _fail("estimator", estimator, "draw_weights", f"returned {weights[bad][0]:g} for example {int(np.argmax(bad))}; "
                                                      "weights must be finite and >= 0 (a draw's probabilities)")


def _rule_inputs(m: int, low, high, seed: int, exhausted: int = -1):
    """A rule's inputs at step 3; model ``exhausted`` (if >= 0) has every example observed: not active."""
    from pulse_jax.rules.base import RuleInputs

    rng = np.random.default_rng(seed)
    estimates = rng.uniform(0.2, 0.8, m).astype(np.float32)
    key = np.array([0, seed], np.uint32)        # jax.random.PRNGKey(seed), without compiling it
    used_up = np.arange(m) == exhausted
    return RuleInputs(*(jnp.asarray(x) for x in (np.int32(3), estimates, low, high, np.full(m, 8, np.int32),
                                                  np.ones(m, np.int32), ~used_up, used_up,
                                                  np.arange(m, dtype=np.int32), key, np.ones(m, np.float32),
                                                  np.ones(m, bool))))


def _bounds(m: int, seed: int):
    """Bounds of ``m`` models: overlapping for seeds 0 and 1; for seed 2 the last model is clear of the rest
    (so a rule that stops on separated bounds answers differently than on NaN ones)."""
    rng = np.random.default_rng(seed + 100)
    centre = rng.uniform(0.3, 0.7, m)
    half = rng.uniform(0.01, 0.2, m)
    if seed == 2:
        centre, half = np.linspace(0.2, 0.9, m), np.full(m, 0.01)
    return (centre - half).astype(np.float32), (centre + half).astype(np.float32)


def _check_blind(kind, plugin, function, answer, low, high, *, given=None) -> None:
    """A function that does not declare ``needs_interval`` answers the same with NaN bounds (``given``:
    its answer with ``low`` / ``high``, when the caller has it). An answer that changes is asked again
    with the real bounds: changed again, the function is not reading the bounds but keeping Python-side
    state, and is refused for that."""
    given = np.asarray(answer(low, high) if given is None else given)
    nan = jnp.full_like(low, jnp.nan)
    if np.array_equal(given, np.asarray(answer(nan, nan))):
        return
    if not np.array_equal(given, np.asarray(answer(low, high))):
        _fail(kind, plugin, function, _PYTHON_STATE)
    _fail(kind, plugin, function, "reads inputs.low / inputs.high without declaring needs_interval=True; "
                                  "without it they are NaN in every run")


def check_rule_values(rule, config, params) -> None:
    """``choose`` names a model that exists (or -1) and may be pulled, answers the same when traced again,
    and does not read the bounds it was not given."""
    kind, m = "sampling rule", config.n_models
    try:
        state = rule.init(config)
    except Exception as err:   # noqa: BLE001 -- checked by the conformance check first; here for safety
        _fail(kind, rule, "init", f"fails on this run's configuration: {type(err).__name__}: {err}")
    if rule.eligible is not None and not np.asarray(_run(kind, rule, "eligible", rule.eligible, state)).any():
        _fail(kind, rule, "eligible", "leaves no model eligible at the start; the recommendation is the best "
                                      "eligible model, so at least one must be")
    chosen = []
    for seed in range(3):
        low, high = _bounds(m, seed)

        def choose(low, high, seed=seed):
            return _run(kind, rule, "choose", rule.choose, state, _rule_inputs(m, low, high, seed), params)[0]

        given = choose(low, high)
        model = int(np.asarray(given))
        if not -1 <= model < m:
            _fail(kind, rule, "choose", f"returned model {model}; a run has models 0..{m - 1} (-1: pull nothing)")
        if not rule.needs_interval:
            _check_blind(kind, rule, "choose", choose, low, high, given=given)
        chosen.append(model)
    for seed, model in enumerate(chosen):
        low, high = _bounds(m, seed)
        if model >= 0:      # the same step with that model exhausted: it must choose another (or -1)
            inputs = _rule_inputs(m, low, high, seed, exhausted=model)
            again = int(np.asarray(_run(kind, rule, "choose", rule.choose, state, inputs, params)[0]))
            if again == model:
                _fail(kind, rule, "choose", f"returned model {model} while inputs.active marks it as not pullable "
                                            "(exhausted; in live selection, a batch in flight): a run would stop "
                                            "spending there; choose among inputs.active (or -1)")


def check_stop_values(stop, config, params) -> None:
    """``done`` and ``focus`` answer the same when traced again and do not read bounds they were not given;
    ``holds`` answers True or False."""
    from pulse_jax.stopping.base import StopInputs

    kind, m = "stopping rule", config.n_models
    for seed in range(3):
        low, high = _bounds(m, seed)
        inputs = StopInputs(jnp.asarray(np.int32(3)), jnp.asarray(np.int32(config.budget // 2)), config.budget,
                            *(jnp.asarray(x) for x in ((low + high) / 2, low, high, np.bool_(seed == 1),
                                                        np.int32(0 if seed == 1 else -1), np.ones(m, np.float32))))
        for function in ("done", "focus"):
            fn = getattr(stop, function)
            if fn is None or stop.needs_interval:
                continue
            _check_blind(kind, stop, function, lambda low, high, fn=fn, function=function, inputs=inputs: _run(
                kind, stop, function, fn, inputs._replace(low=low, high=high), params), inputs.low, inputs.high)
    check_holds(stop, np.eye(m, dtype=bool)[0], np.linspace(0.9, 0.1, m), params)


def check_holds(stop, claimed, true_means, params, cost=None) -> bool:
    """``stop.holds(claimed, true_means, params)`` as a bool (with ``cost``, each model's cost per cell, for a
    rule whose claim is about costs: ``uses_cost``; ones when None); a failure or a non-boolean answer is
    one line."""
    extra = () if not stop.uses_cost else (np.ones(len(true_means)) if cost is None else np.asarray(cost, float),)
    try:
        answer = stop.holds(claimed, true_means, params, *extra)   # host side, NumPy: not compiled
    except Exception as err:   # noqa: BLE001 -- the user's code may raise anything
        first = (str(err).strip().splitlines() or [""])[0]
        _fail("stopping rule", stop, "holds", f"fails on concrete values of this run's shapes: {type(err).__name__}: "
                                              f"{first}")
    if not isinstance(answer, (bool, np.bool_)) and not (isinstance(answer, np.ndarray) and answer.shape == ()
                                                          and answer.dtype == bool):
        _fail("stopping rule", stop, "holds", f"returned {type(answer).__name__} {answer!r}; expected True or False")
    return bool(answer)
