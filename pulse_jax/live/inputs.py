"""The inputs of a `pulse_jax.live.Selector`, checked and completed with the live defaults
(`pulse_jax.choices`): names, plug-ins, numbers, costs and given orders, each refused in one line
that names the parameter."""
from __future__ import annotations

from typing import Mapping, NamedTuple

import numpy as np

from pulse_jax import choices, engine, registry
from pulse_jax.errors import note, require


def names_of(models, examples) -> tuple[tuple, tuple]:
    """The models' names and the example ids, none twice."""
    models = list(models)
    names = tuple(str(m) for m in models)
    numbers = [m for m in models if not isinstance(m, str)]
    if numbers:     # the scorer, the log and the report see the names as text: say so once
        note(f"models: {len(numbers)} name{'s' if len(numbers) > 1 else ''} given as "
             f"{type(numbers[0]).__name__} ({', '.join(map(repr, numbers[:3]))}{', ...' if len(numbers) > 3 else ''}) "
             f"{'are' if len(numbers) > 1 else 'is'} used as text ({', '.join(repr(str(m)) for m in numbers[:3])}"
             f"{', ...' if len(numbers) > 3 else ''}): the scorer gets text, and the log and report name them so")
    empty = [k for k, name in enumerate(names) if not name.strip()]
    require(not empty, f"models: model {empty[0] if empty else 0} has an empty name; give every candidate a name")
    require(len(set(names)) == len(names), "models: duplicate model names")
    ids = list(range(int(examples))) if isinstance(examples, (int, np.integer)) else list(examples)
    require(len(set(map(str, ids))) == len(ids), "examples: duplicate example ids")
    return names, tuple(ids)


def params_of(params, delta, exploration, bounds, stop, n_models: int):
    """The run's numbers: ``params`` (a whole `pulse_jax.RunParams` or `pulse_jax.BanditParams` as given; a
    dict's numbers over the live defaults), or ``delta``, ``bounds`` and ``exploration`` (None: the live
    default, `pulse_jax.choices`), with the upper bounds' level raised to what ``stop``'s claim needs, as a
    `Plan` does. One owner per number: a keyword beside ``params`` is refused, not dropped."""
    given = [name for name, value in (("delta", delta), ("bounds", bounds), ("exploration", exploration))
             if value is not None]
    require(params is None or not given,
            f"Selector: {' and '.join(given)} given beside params=; give {'them' if len(given) > 1 else 'it'} "
            f"in params (e.g. params={{'{given[0] if given else ''}': ...}})")
    if params is not None and not isinstance(params, Mapping):
        return params
    numbers = choices.base_numbers(choices.DEFAULT_DELTA if delta is None else delta,
                                   choices.DEFAULT_BOUNDS if bounds is None else bounds, exploration, choices.keyword)
    named = {str(k).rsplit(".", 1)[-1] for k in params or {}}
    numbers = {**{k: v for k, v in numbers.items() if k not in named}, **(params or {})}
    if "cs_simultaneous" not in named:
        numbers = choices.certificate_levels(numbers, stop, n_models, choices.keyword)
    return choices.claim_split(numbers, stop, named)


def live_plugins(method, rule, stop, has_history: bool):
    """The `pulse_jax.Plugins` (estimator, sampling rule, stopping rule), each None replaced by the live
    default (`pulse_jax.choices`: the same as a `pulse_jax.live.Plan`'s); the default's notes said as warnings."""
    estimator = engine.get_estimator(choices.default_method(has_history) if method is None else method)
    stop = choices.default_stop(estimator) if stop is None else choices.plugin("stopping rule", stop, "stop")
    if rule is None:
        rule, notes = choices.default_rule(estimator, stop, choices.keyword)
        for text in notes:
            note(text)
    return engine.Plugins(estimator, registry.sampling_rule(rule, "rule"), registry.stopping_rule(stop, "stop"))


def check_cost(cost, models, stop):
    """``cost`` as ``(len(models),)`` positive floats (or None); a stopping rule about costs needs it."""
    require(cost is not None or not stop.uses_cost,
            f"stopping rule {stop.name!r} ranks the models by cost: pass cost= (each model's cost per cell)")
    if cost is None:
        return None
    arr = np.asarray(cost, dtype=float)
    require(arr.shape == (len(models),), f"cost must have one value per model ({len(models)}), got shape {arr.shape}")
    bad = np.flatnonzero(~(np.isfinite(arr) & (arr > 0)))
    require(not len(bad), f"cost of {models[bad[0]] if len(bad) else ''!r} must be a finite number > 0, got "
                          f"{arr[bad[0]] if len(bad) else 0}")
    return arr


def check_order(order, models, example_ids, estimator):
    """``order`` as one row of example columns per model (or None); refused in one line where it is
    not a permutation of the examples for every model, or the estimator draws by weights."""
    if order is None:
        return None
    require(estimator.draw_weights is None,
            f"order: {estimator.name!r} draws examples by weights; a given order needs a uniform draw")
    column = {str(e): j for j, e in enumerate(example_ids)}
    rows = []
    for name in models:
        require(name in order, f"order: no order for model {name!r}")
        ids = [str(e) for e in order[name]]
        missing = sorted(set(column) - set(ids))
        require(len(ids) == len(column) and not missing and len(set(ids)) == len(ids),
                f"order of {name!r}: not a permutation of the {len(column)} examples"
                + (f" ({len(missing)} missing, e.g. {missing[0]!r})" if missing else ""))
        rows.append([column[e] for e in ids])
    return rows


class Prepared(NamedTuple):
    """A selector's checked choices: its `pulse_jax.Plugins`, its `pulse_jax.BanditConfig` and resolved
    `pulse_jax.RunParams`, each model's ``cost`` per cell (or None)
    and the given orders as example columns (or None)."""

    plugins: object
    config: object
    params: object
    cost: object
    order: object


def prepare(models, example_ids, budget: int, has_history: bool, options: dict) -> Prepared:
    """The `Prepared` choices of a `pulse_jax.live.Selector` from its keyword ``options`` (each None
    replaced by the live default), checked together: plug-ins, numbers and their levels, costs, orders."""
    from pulse_jax.engine import BanditConfig

    o = options
    plugins = live_plugins(o["method"], o["rule"], o["stop"], has_history)
    estimator, stop = plugins.estimator, plugins.stop
    params = params_of(o["params"], o["delta"], o["exploration"], o["bounds"], stop, len(models))
    cs_grid = choices.cs_grid(choices.DEFAULT_SEQUENCE, choices.keyword) if o["cs_grid"] is None else o["cs_grid"]
    config = BanditConfig(n_models=len(models), n_examples=len(example_ids), budget=int(budget),
                          batch_size=o["batch_size"], init_batches=o["init_batches"], refit_every=o["refit_every"],
                          cs_grid=cs_grid,
                          concurrency=choices.CONCURRENCY if o["concurrency"] is None else o["concurrency"],
                          gap_horizon=choices.claim_gap_horizon(stop, params, o["gap_horizon"]))
    plugins = engine.check_compatible(config, plugins)
    cost = check_cost(o["cost"], models, plugins.stop)
    params = engine.resolve_params(params, plugins)
    engine.check_levels(config, plugins, params)
    return Prepared(plugins, config, params, cost, check_order(o["order"], models, example_ids, estimator))


def with_stop(config, plugins, params, cost, stop, numbers=None):
    """``(plugins, params)`` of a selector that checks ``stop`` from now on (`pulse_jax.live.Selector.use_stop`):
    the stop's own numbers, or ``numbers`` (``{"epsilon": 0.02}`` or ``{"stop.epsilon": 0.02}``), checked
    with the estimator, the costs and the levels its claim needs."""
    from pulse_jax.engine.params import declared_params

    plugins = engine.check_compatible(config, plugins._replace(stop=registry.stopping_rule(stop, "stop")))
    require(cost is not None or not plugins.stop.uses_cost,
            f"stopping rule {getattr(stop, 'name', stop)!r} ranks the models by cost; this selector has none "
            "(pass cost= when making it)")
    new = engine.resolve_params(params._replace(stop=declared_params(plugins.stop)), plugins)
    if numbers:
        new = engine.resolve_params(new.replace({k if "." in k else f"stop.{k}": v for k, v in numbers.items()}),
                                    plugins, "use_stop params")
    engine.check_levels(config, plugins, new)
    return plugins, new
