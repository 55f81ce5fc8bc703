"""A run's plug-ins checked against their protocols before anything compiles.

`check_plugins` calls every function of the estimator, the sampling rule
and the stopping rule once under `jax.eval_shape`, on the run's own
sizes (``m`` models, ``n`` examples, batch ``B``), and compares what comes back
with the contract of `pulse_jax.protocols`. A broken contract is a
`pulse_jax.PulseInputError` in one line naming the plug-in, the
function, and the expected and the actual shape and dtype -- not a JAX error
from deep inside the compiled step. Nothing is computed: ``eval_shape`` only
traces, so the check costs milliseconds.
"""
from __future__ import annotations

import functools
import jax
import jax.numpy as jnp
from jax.extend.core import Literal as _Literal
import numpy as np

from pulse_jax.engine import value_checks
from pulse_jax.errors import PulseInputError

_FLOAT, _INT, _BOOL = jnp.float32, jnp.int32, jnp.bool_


def _struct(shape, dtype):
    return jax.ShapeDtypeStruct(tuple(shape), jnp.dtype(dtype))


def _spec(dtype, shape) -> str:
    """JAX's notation: ``float32[8]``, ``int32[]``, ``bool[4,3]``."""
    return f"{dtype}[{','.join(str(d) for d in shape)}]"


def _describe(tree) -> str:
    """``float32[8]``, ``int32[]``, or a pytree's structure of them."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    if treedef.num_leaves == 1 and treedef.num_nodes == 1:
        leaf = leaves[0]
        if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
            return _spec(leaf.dtype, leaf.shape)
        return type(leaf).__name__
    return f"{type(tree).__name__} of {[_describe(x) for x in leaves]}"


def _fail(kind: str, plugin, function: str, message: str):
    raise PulseInputError(f"{kind} {getattr(plugin, 'name', plugin)!r}: {function} {message}")


def _call(kind, plugin, function, fn, *args):
    """``eval_shape(fn, *args)``, any exception turned into one line naming the plug-in and the function."""
    try:
        return jax.eval_shape(fn, *args)
    except PulseInputError:
        raise
    except Exception as err:   # noqa: BLE001 -- the user's code may raise anything while tracing
        if isinstance(err, jax.errors.ConcretizationTypeError) or (
                isinstance(err, TypeError) and ("Tracer" in str(err) or "concrete value" in str(err))):
            _traced_as_fixed(kind, plugin, function, err)
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        _fail(kind, plugin, function, f"fails on this run's shapes: {type(err).__name__}: {first}"[:400])


def _traced_as_fixed(kind, plugin, function, err):
    """A plug-in's params are traced (a sweep over them never recompiles), so none can set a shape, a Python
    branch or an int(): say which and what to do, not JAX's text."""
    what = {"TracerBoolConversionError": "in a Python `if` or `while`",
            "TracerIntegerConversionError": "as a Python int (a size, an index, `range`)"}.get(
                type(err).__name__, "where a fixed value is needed (a shape, a size such as `lax.top_k`'s k)")
    _fail(kind, plugin, function, f"uses a traced number {what}: its inputs and its params are traced (params "
                                  "so that sweeps never recompile); a number that sets a size or a branch belongs in "
                                  "the plug-in's fixed settings (its factory's arguments, `settings`), not in its "
                                  "params; branch on a traced value with jnp.where or lax.cond")


def _expect_array(kind, plugin, function, value, shape, dtypes, *, what):
    """``value`` must be one array of ``shape`` whose dtype is one of ``dtypes`` (a kind: 'float', 'int', 'bool')."""
    ok = isinstance(value, jax.ShapeDtypeStruct) and tuple(value.shape) == tuple(shape) and \
        _dtype_kind(value.dtype) in dtypes
    if not ok:
        expected = " or ".join(_spec(d, shape) for d in dtypes)
        _fail(kind, plugin, function, f"returned {_describe(value)}; expected {what}: {expected}")


def _dtype_kind(dtype) -> str:
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return "bool"
    if np.issubdtype(dtype, np.integer):
        return "int"
    if np.issubdtype(dtype, np.floating):
        return "float"
    return str(dtype)


def _same_structure(kind, plugin, function, before, after, what="the state"):
    """``after`` must have ``before``'s pytree structure, shapes and dtypes (a scan carries it)."""
    s0, s1 = jax.tree_util.tree_structure(before), jax.tree_util.tree_structure(after)
    shapes0 = [(tuple(x.shape), np.dtype(x.dtype)) for x in jax.tree_util.tree_leaves(before)]
    shapes1 = [(tuple(x.shape), np.dtype(x.dtype)) for x in jax.tree_util.tree_leaves(after)]
    if s0 != s1 or shapes0 != shapes1:
        _fail(kind, plugin, function, f"returned {what} as {_describe(after)}; expected it unchanged in structure, "
                                      f"shape and dtype: {_describe(before)}")


def _check_fields(kind: str, plugin, functions: dict, flags: dict) -> None:
    """The plug-in's static fields: a name, callables where functions go, booleans, settings pairs."""
    name = getattr(plugin, "name", None)
    if not isinstance(name, str) or not name:
        raise PulseInputError(f"{kind}: name must be a non-empty string, got {name!r} (build plug-ins by keyword: "
                              f"{type(plugin).__name__}(name=..., ...))")
    for field, optional in functions.items():
        value = getattr(plugin, field)
        if not (callable(value) or (optional and value is None)):
            _fail(kind, plugin, field, f"must be a function{' or None' if optional else ''}, got "
                                       f"{type(value).__name__} (build plug-ins by keyword to keep fields in place)")
    for field, expected in flags.items():
        value = getattr(plugin, field)
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            _fail(kind, plugin, field, f"must be {'True or False' if expected is bool else 'an integer'}, got "
                                       f"{value!r} (build plug-ins by keyword to keep fields in place)")
    _check_params_field(kind, plugin)
    settings = getattr(plugin, "settings", ())
    if not isinstance(settings, tuple) or not all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str)
                                                  for p in settings):
        _fail(kind, plugin, "settings", f"must be a tuple of (name, value) pairs, got {settings!r}"[:300])
    try:
        hash(settings)
    except TypeError:
        _fail(kind, plugin, "settings", "must hold hashable values (tuples, not lists): the plug-in is a static "
                                        "argument of the compiled program")


def _check_params_field(kind: str, plugin) -> None:
    """``params`` must be ``()`` or a NamedTuple of numbers: a pytree (so its values are traced) and
    hashable (the plug-in is a static argument of the compiled program). Checked before anything
    hashes the plug-in, so a dict or a dataclass gets this line rather than ``unhashable type``."""
    params = getattr(plugin, "params", ())
    example = "class MyParams(NamedTuple): strength: float = 1.0"
    if isinstance(params, tuple) and not hasattr(params, "_fields"):
        if params != ():
            _fail(kind, plugin, "params", f"must be () or a NamedTuple of numbers ({example}), got a plain tuple "
                                          f"{params!r}"[:300])
        return
    if not (isinstance(params, tuple) and hasattr(params, "_fields")):
        _fail(kind, plugin, "params", f"must be () or a NamedTuple of numbers ({example}), got "
                                      f"{type(params).__name__} {params!r}"[:300])
    ranges = getattr(type(params), "RANGES", None) or {}
    if not hasattr(ranges, "items"):
        _fail(kind, plugin, "params", f"RANGES must be a dict {{field: Range(...)}}, got {type(ranges).__name__}")
    unknown = [k for k in ranges if k not in params._fields]
    if unknown:
        _fail(kind, plugin, "params", f"RANGES names {unknown[0]!r}, which is not a field of "
                                      f"{type(params).__name__} (its fields: {', '.join(params._fields)})")
    for field, limits in ranges.items():
        _check_range(kind, plugin, field, limits)
    for field in params._fields:
        value = getattr(params, field)
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            _fail(kind, plugin, "params", f"field {field!r} must be a number (its default), got "
                                          f"{type(value).__name__} {value!r}"[:300])


def _check_range(kind: str, plugin, field: str, limits) -> None:
    """A ``RANGES`` entry: a `pulse_jax.protocols.Range` (or its fields as a tuple) whose ends are numbers,
    not NaN, the low one not above the high one."""
    ends = tuple(limits)[:2] if isinstance(limits, tuple) else ()
    where = f"RANGES[{field!r}]"
    if len(ends) != 2 or any(isinstance(e, bool) or not isinstance(e, (int, float, np.integer, np.floating))
                             for e in ends):
        _fail(kind, plugin, "params", f"{where} must be Range(low, high, ...) with numbers at its ends, got {limits!r}"[:300])
    low, high = (float(e) for e in ends)
    if np.isnan(low) or np.isnan(high):
        _fail(kind, plugin, "params", f"{where} has a NaN end ({limits!r}); give numbers (+-inf for no bound; "
                                      "Range(..., nan=True) lets the value itself be NaN)"[:300])
    if low > high:
        _fail(kind, plugin, "params", f"{where} has low {low:g} above high {high:g}: no value fits")


def _abstract_params(params):
    return jax.tree_util.tree_map(lambda v: _struct((), _FLOAT), params)


def _fields_read(fn, args, at: int) -> set:
    """The fields of ``args[at]`` (a params NamedTuple of abstract scalars) that ``fn(*args)`` reads: those
    whose input variable takes part in the traced program (`jax.make_jaxpr`); a field closed over
    instead never does."""
    fields = getattr(args[at], "_fields", ())
    if not fields:
        return set()
    try:
        jaxpr = jax.make_jaxpr(fn)(*args).jaxpr
    except Exception:   # noqa: BLE001 -- the shape checks above name a function that fails
        return set(fields)
    flat = [len(jax.tree_util.tree_leaves(a)) for a in args]
    start = sum(flat[:at])
    used = set()
    for eqn in jaxpr.eqns:
        used.update(v for v in eqn.invars if not isinstance(v, _Literal))
    used.update(v for v in jaxpr.outvars if not isinstance(v, _Literal))
    return {name for name, var in zip(fields, jaxpr.invars[start:start + len(fields)]) if var in used}


class _Reading:
    """``params`` as host functions see it, noting which fields they read."""

    def __init__(self, params, seen: set):
        self._params, self._seen = params, seen

    def __getattr__(self, name):
        self._seen.add(name)
        return getattr(self._params, name)


def _check_params_read(kind: str, plugin, params, traced, host=()) -> None:
    """Every params field is read by some function of the plug-in: one read by none (a number closed over
    in its factory instead) would make a sweep over it give identical points, reported as an axis."""
    fields = getattr(params, "_fields", ())
    if not fields:
        return
    read = set()
    for fn, args, at in traced:
        read |= _fields_read(fn, args, at)
    for call in host:
        try:
            call(_Reading(params, read))
        except Exception:   # noqa: BLE001 -- host functions are checked (and named) elsewhere
            read |= set(fields)
    unread = [f for f in fields if f not in read]
    if unread:
        _fail(kind, plugin, "params", f"field {unread[0]!r} is read by none of its functions: a sweep over it would "
                                      "give identical points; read the number from params (one closed over in the "
                                      "factory is fixed when the plug-in is built), or drop the field")


def check_estimator(estimator, n_models: int, n_examples: int, batch_size: int, params) -> tuple:
    """Every function of ``estimator`` once on abstract inputs of the run's sizes (see the module docstring);
    ``params`` the estimator's own params (their structure). Returns the arguments of the check that
    every params field is read (`_check_params_read`), which runs after the value checks."""
    from pulse_jax.estimators.base import DrawDesign, ModelSums, Pull

    kind = "estimator"
    _check_fields(kind, estimator, {"init": False, "update": False, "refresh": False, "estimate": False,
                                    "radius": False, "proxies": True, "draw_weights": True},
                  {"uses_predictions": bool, "n_sequences": int})
    if estimator.n_sequences < 1:
        _fail(kind, estimator, "n_sequences", f"must be >= 1, got {estimator.n_sequences}")
    m, n, B, C = n_models, n_examples, batch_size, estimator.n_sequences
    vec_f, vec_i = _struct((m,), _FLOAT), _struct((m,), _INT)
    sums = ModelSums(vec_i, vec_i, vec_f, vec_f, vec_f, vec_f, vec_i)
    scalar_f, scalar_i = _struct((), _FLOAT), _struct((), _INT)
    batch_f = _struct((B,), _FLOAT)
    design = DrawDesign(batch_f, scalar_f, scalar_f, scalar_f, scalar_f, scalar_f) \
        if estimator.draw_weights is not None else None
    pull = Pull(scalar_i, scalar_i, scalar_f, scalar_f, batch_f, batch_f, _struct((B,), _BOOL), design)
    params = _abstract_params(params)

    state = _call(kind, estimator, "init", estimator.init, sums, params)
    estimate = _call(kind, estimator, "estimate", estimator.estimate, state, sums, params)
    _expect_array(kind, estimator, "estimate", estimate, (m,), ("float",), what="one estimate per model")
    out = _call(kind, estimator, "update", lambda s, l, p, q: estimator.update(s, l, p, n, q), state, sums, pull,
                params)
    if not (isinstance(out, tuple) and len(out) == 2):
        _fail(kind, estimator, "update", f"returned {_describe(out)}; expected a (state, info) pair")
    _same_structure(kind, estimator, "update", state, out[0])
    refreshed = _call(kind, estimator, "refresh", lambda s, l, q: estimator.refresh(s, l, n, q), state, sums, params)
    _same_structure(kind, estimator, "refresh", state, refreshed)
    radius = _call(kind, estimator, "radius", lambda s, l, d, q: estimator.radius(s, l, n, d, q), state, sums, vec_f,
                   params)
    _expect_array(kind, estimator, "radius", radius, (m,), ("float",), what="one half-width per model")
    if estimator.proxies is not None:
        rows = _call(kind, estimator, "proxies", lambda s, l, p, q: estimator.proxies(s, l, p, n, q), state, sums,
                     pull, params)
        if not (isinstance(rows, tuple) and len(rows) == 3):
            _fail(kind, estimator, "proxies", f"returned {_describe(rows)}; expected a (Y, lower, width) triple")
        for label, row in zip(("Y", "lower", "width"), rows):
            _expect_array(kind, estimator, "proxies", row, (C, B), ("float",),
                          what=f"{label} with n_sequences x batch_size entries")
    if estimator.draw_weights is not None:
        weights = _call(kind, estimator, "draw_weights", estimator.draw_weights, _struct((n,), _FLOAT),
                        _struct((n,), _BOOL), params)
        _expect_array(kind, estimator, "draw_weights", weights, (n,), ("float",), what="one weight per example")
    traced = [(estimator.init, (sums, params), 1), (estimator.estimate, (state, sums, params), 2),
              (lambda s, l, p, q: estimator.update(s, l, p, n, q), (state, sums, pull, params), 3),
              (lambda s, l, q: estimator.refresh(s, l, n, q), (state, sums, params), 2),
              (lambda s, l, d, q: estimator.radius(s, l, n, d, q), (state, sums, vec_f, params), 3)]
    if estimator.proxies is not None:
        traced.append((lambda s, l, p, q: estimator.proxies(s, l, p, n, q), (state, sums, pull, params), 3))
    if estimator.draw_weights is not None:
        traced.append((estimator.draw_weights, (_struct((n,), _FLOAT), _struct((n,), _BOOL), params), 2))
    return kind, estimator, params, traced, ()


def check_rule(rule, config, params) -> tuple:
    """Every function of the sampling rule once on abstract inputs of the run's sizes; returns the
    arguments of `_check_params_read`."""
    from pulse_jax.rules.base import RuleInputs

    kind = "sampling rule"
    _check_fields(kind, rule, {"choose": False, "init": False, "update": False, "eligible": True},
                  {"needs_interval": bool})
    m = config.n_models
    vec_f, vec_i, vec_b = _struct((m,), _FLOAT), _struct((m,), _INT), _struct((m,), _BOOL)
    key = jax.eval_shape(lambda: jax.random.PRNGKey(0))
    inputs = RuleInputs(_struct((), _INT), vec_f, vec_f, vec_f, vec_i, vec_i, vec_b, vec_b, vec_i, key, vec_f, vec_b)
    try:
        state = jax.eval_shape(lambda: rule.init(config))
    except Exception as err:   # noqa: BLE001
        _fail(kind, rule, "init", f"fails on this run's configuration: {type(err).__name__}: {err}"[:400])
    out = _call(kind, rule, "choose", rule.choose, state, inputs, _abstract_params(params))
    if not (isinstance(out, tuple) and len(out) == 2):
        _fail(kind, rule, "choose", f"returned {_describe(out)}; expected a (model, state) pair")
    _expect_array(kind, rule, "choose", out[0], (), ("int",), what="the model to pull as an integer scalar")
    _same_structure(kind, rule, "choose", state, out[1])
    updated = _call(kind, rule, "update", rule.update, state, _struct((), _INT), _struct((), _INT))
    _same_structure(kind, rule, "update", state, updated)
    if rule.eligible is not None:
        eligible = _call(kind, rule, "eligible", rule.eligible, state)
        _expect_array(kind, rule, "eligible", eligible, (m,), ("bool",), what="one flag per model")
    return kind, rule, params, [(rule.choose, (state, inputs, _abstract_params(params)), 2)], ()


def check_stop(stop, config, params) -> tuple:
    """``done`` and ``claim`` of the stopping rule once on abstract inputs of the run's sizes; returns
    the arguments of `_check_params_read`."""
    from pulse_jax.stopping.base import StopInputs

    kind = "stopping rule"
    _check_fields(kind, stop, {"done": False, "claim": False, "statement": False, "holds": False, "focus": True},
                  {"needs_interval": bool, "stops_early": bool, "upper_models": int, "uses_cost": bool})
    m = config.n_models
    vec_f = _struct((m,), _FLOAT)
    inputs = StopInputs(_struct((), _INT), _struct((), _INT), config.budget, vec_f, vec_f, vec_f, _struct((), _BOOL),
                        _struct((), _INT), vec_f)
    _check_statement(kind, stop, params)
    concrete, params = params, _abstract_params(params)
    done = _call(kind, stop, "done", stop.done, inputs, params)
    _expect_array(kind, stop, "done", done, (), ("bool",), what="one flag for the run")
    claim = _call(kind, stop, "claim", stop.claim, inputs, params)
    _expect_array(kind, stop, "claim", claim, (m,), ("bool",), what="one flag per model")
    if stop.focus is not None:
        focus = _call(kind, stop, "focus", stop.focus, inputs, params)
        _expect_array(kind, stop, "focus", focus, (m,), ("bool",), what="one flag per model")
    _check_claim(stop, config.n_models)
    claimed, means = np.arange(m) == m - 1, np.linspace(0.0, 1.0, m)     # one model claimed: holds reads on
    return (kind, stop, concrete,
            [(f, (inputs, params), 1) for f in (stop.done, stop.claim, stop.focus) if f is not None],
            [lambda p: stop.statement(["model 0"], 0.05, p),
             lambda p: stop.holds(claimed, means, p, np.ones(m)) if stop.uses_cost else stop.holds(claimed, means, p)])


def _check_claim(stop, n_models: int) -> None:
    """A rule that claims something says when a claim is true (``holds``: simulations count the false
    ones), and its claim rests on 1..m upper bounds."""
    from pulse_jax.stopping.base import EVERY_MODEL, no_claim, no_claim_holds

    if stop.claim is not no_claim and stop.holds is no_claim_holds:
        _fail("stopping rule", stop, "holds", "is missing: the rule has a claim, so it needs holds(claimed, "
                                              "true_means, params) -> bool (else every claim counts as true)")
    if not (1 <= stop.upper_models <= n_models or stop.upper_models == EVERY_MODEL):
        _fail("stopping rule", stop, "upper_models", f"must be between 1 and the number of models ({n_models}), "
                                                     f"or EVERY_MODEL, got {stop.upper_models}")


def _check_statement(kind, stop, params) -> None:
    """``statement`` runs on the host: once for a claim of one model and once for none, each a string."""
    for names in (["model 0"], []):
        try:
            text = stop.statement(names, 0.05, params)
        except Exception as err:   # noqa: BLE001 -- the user's code may raise anything
            _fail(kind, stop, "statement", f"fails for names={names!r}: {type(err).__name__}: {err}"[:400])
        if not isinstance(text, str):
            _fail(kind, stop, "statement", f"returned {type(text).__name__} {text!r} for names={names!r}; expected "
                                           "one line of text (str)"[:400])
        if "\n" in text.strip() or not text.strip():
            _fail(kind, stop, "statement", f"returned {'an empty line' if not text.strip() else 'several lines'} for "
                                           f"names={names!r}: {text!r}; the report prints it as one line"[:400])


@functools.lru_cache(maxsize=256)
def _check_hashable(config, plugins) -> None:
    from pulse_jax.engine.params import default_params

    estimator, rule, stop = plugins
    params = default_params(plugins)
    reads = [check_estimator(estimator, config.n_models, config.n_examples, config.batch_size, params.estimator),
             check_rule(rule, config, params.rule), check_stop(stop, config, params.stop)]
    # then once on concrete values: the mistakes that type-check and run (`value_checks`), in user code
    from pulse_jax.estimators import base as estimators
    from pulse_jax.rules import base as rules
    from pulse_jax.stopping import base as stops

    if value_checks.written_by_user(estimator, estimators.built_ins()):
        value_checks.check_estimator_values(estimator, config.n_models, config.n_examples, config.batch_size,
                                            params.estimator)
    if value_checks.written_by_user(rule, rules.built_ins()):
        value_checks.check_rule_values(rule, config, params.rule)
    if value_checks.written_by_user(stop, stops.built_ins()):
        value_checks.check_stop_values(stop, config, params.stop)
    for read in reads:      # last: a plug-in that breaks a contract is told that first
        _check_params_read(*read)


def check_plugins(config, plugins) -> None:
    """Check the run's `pulse_jax.Plugins` (estimator, sampling rule, stopping rule) against their
    protocols on the run's sizes; raises `pulse_jax.PulseInputError` in one line on a broken
    contract. Cached per configuration and plug-ins (they are hashable: the compiled program takes
    them as static arguments)."""
    for kind, plugin in zip(("estimator", "sampling rule", "stopping rule"), plugins):
        _check_fields(kind, plugin, {}, {})   # fields first: a list where a tuple goes makes the plug-in unhashable
    try:
        hash((config, plugins))
    except TypeError as err:
        raise PulseInputError(f"plug-ins must be hashable (tuples, not lists or dicts, in their fields): {err}") \
            from None
    _check_hashable(config, plugins)


__all__ = ["check_estimator", "check_plugins", "check_rule", "check_stop"]
