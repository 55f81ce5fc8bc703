"""A run's choices in words turned into its plug-ins and numbers, each checked in the caller's words.

The command line (``--top-k 2``) and Python (``top_k=2``) make the same choices; every function here
takes ``spell``, which names a choice the way its caller gave it (`flag` or `keyword`), so one check
serves both and its message names what the user typed.
"""
from __future__ import annotations

import math
from typing import Callable, Mapping

from pulse_jax import registry
from pulse_jax.errors import PulseInputError, note, require

Spell = Callable[[str], str]


def flag(name: str) -> str:
    """A choice as the command line spells it: ``top_k`` -> ``--top-k``."""
    return "--" + name.replace("_", "-")


def keyword(name: str) -> str:
    """A choice as Python spells it: ``top_k`` -> ``top_k``."""
    return name


#: The largest count any choice takes (the engine indexes with 32-bit integers).
LARGEST_COUNT = 2**31 - 1


def at_most(value, name: str, high: int = LARGEST_COUNT) -> None:
    require(value is None or value <= high, f"{name} {value}: at most {high:,}")


def plugin(kind: str, value, where: str):
    """A sampling or stopping rule (or estimator) as chosen: a built-in's name gives its
    `pulse_jax.registry.BuiltIn` (what it declares; the engine builds it, `pulse_jax.registry.resolve`),
    so a command is checked without importing JAX; ``module:attribute`` is imported and a plug-in
    given is kept."""
    if isinstance(value, registry.BuiltIn) and value.kind == kind:
        return value
    if isinstance(value, str) and ":" not in value:
        value = value.lower().replace("-", "_")
        builtin = registry.builtin(kind, value)
        if builtin is None:
            raise registry.unknown_name(kind, value, where)
        return builtin
    return registry.resolve(kind, value, where)


def same_plugin(kind: str, chosen, built) -> bool:
    """``chosen`` (as `plugin` gives it) is the plug-in ``built`` (as a run built it)."""
    if isinstance(chosen, registry.BuiltIn):
        chosen = registry.resolve(kind, chosen)
    return chosen is built


def methods(text: str, where: str = "--method") -> dict:
    """Comma-separated estimators (names or ``module:attribute``) as ``{name: estimator}``, each as
    `plugin` gives it (a built-in's `pulse_jax.registry.BuiltIn`)."""
    items = [m.strip() for m in text.split(",") if m.strip()]
    require(items, f"{where}: no method given")
    out = {}
    for item in items:
        key = item if ":" in item else item.lower().replace("-", "")
        estimator = plugin("estimator", key, where)
        require(estimator.name not in out, f"{where}: {estimator.name!r} given twice")
        out[estimator.name] = estimator
    return out


#: A live selection's defaults, the same through every door (`pulse_jax.live.Plan`, ``pulse-jax select``,
#: Inspect's ``select_best`` and `pulse_jax.live.Selector`): certify with the fewest cells measured
#: (docs/benchmarks/certify_betting.md): PULSE hedged when there is history (UCB-E without), the interval
#: Top-Two rule, certification bounds, betting sequences.
DEFAULT_METHOD, DEFAULT_RULE, DEFAULT_BOUNDS, DEFAULT_SEQUENCE = "pulse_hedged", "top_two_interval", "certification", \
    "betting"
DEFAULT_DELTA = 0.05
#: A best-model certificate's levels (a claim that rests on every lower bound and one model's upper bound,
#: ``upper_models == 1``, at certification bounds): ``cs_upper_share`` of delta to the upper bounds, which
#: decide the exclusions, and bets tuned to each model's running gap (``BanditConfig.gap_horizon``).
#: Any split and any predictable horizon keep ``P(a wrong claim) <= delta`` (docs/confidence.md); these
#: certify the built-in example with 0.82x the cells of the symmetric split and anytime bets
#: (docs/benchmarks/select_defaults.md).
CLAIM_UPPER_SHARE, CLAIM_GAP_HORIZON = 0.95, 0.5
#: Batches in flight by default (`pulse_jax.live.run`, ``select``, ``select_best``): on the built-in
#: example in ``select``'s configuration, 16 pay 1.03x the cells of one at a time in simulation and,
#: against a scorer that takes 50 ms a call, finish 9.6x sooner (docs/benchmarks/concurrency.md).
CONCURRENCY = 16


def default_method(has_history: bool) -> str:
    """The estimator when none is named: PULSE hedged with history, UCB-E (observations alone) without."""
    return DEFAULT_METHOD if has_history else "ucbe"


def default_stop(estimator):
    """The stopping rule when none is named: certified with an interval, the whole budget without."""
    return plugin("stopping rule", "certified" if estimator.has_interval else "budget", "stop")


def certificate_words(given: Mapping[str, float | int | None], spell: Spell) -> str | None:
    """How the caller named a top-k or cost certificate (``--top-k 2``, ``front``), for a note; None
    without one."""
    if given.get("top_k"):
        return f"{spell('top_k')} {given['top_k']}"
    named = [name for name in COST_CERTIFICATES if given.get(name) is not None]
    return spell(named[0]) if named else None


def certificate_rule(stop, spell: Spell, certificate: str | None = None):
    """``(rule, notes)`` for a claim the default rules do not chase (``(None, ())`` otherwise), from what the
    stopping rule declares: a claim about cost (``uses_cost``) samples by ``focus``, a claim resting on the
    upper bounds of k models, 1 < k < every model (``upper_models``: a top-k set), by ``lucb_top_k(k)``. ``certificate``: how the caller
    named the claim (`certificate_words`), for the note."""
    if stop is None:
        return None, ()
    said = certificate or f"{spell('stop')} {stop.name}"
    if stop.uses_cost:
        focus = registry.BUILT_INS["sampling rule"]["focus"]
        return focus, (f"{said} samples by focus (the widest interval per unit of cost among the models the "
                       f"certificate waits on); give {spell('rule')} to choose another",)
    if 1 < stop.upper_models < registry.EVERY_MODEL:      # a claim about a set of k models (its declared capability)
        rule = registry.builtin_lucb_top_k(stop.upper_models)
        return rule, (f"{said} samples by {rule.name} (the set's weakest member against the best outsider); give "
                      f"{spell('rule')} to choose another",)
    return None, ()


def default_rule(estimator, stop, spell: Spell, certificate: str | None = None):
    """``(rule, notes)``: a live selection's sampling rule when none is named: the certificate's
    (`certificate_rule`), the index rule ``ucbe`` for a method without an interval, else `DEFAULT_RULE`."""
    rule, notes = certificate_rule(stop, spell, certificate)
    if rule is not None:
        return rule, notes
    if not estimator.has_interval:
        return plugin("sampling rule", "ucbe", spell("rule")), (
            f"{spell('method')} {estimator.name} has no confidence interval, so it samples by the index rule ucbe "
            f"instead of the default {DEFAULT_RULE}",)
    return plugin("sampling rule", DEFAULT_RULE, spell("rule")), ()


def check_counts(values: Mapping[str, int | None], spell: Spell) -> None:
    """The counts every run shares: a budget >= 1, batch size, first-look batches and rank >= 1, steps
    between refits and a refit's epochs >= 0; each at most `LARGEST_COUNT`."""
    for name, value in values.items():
        low = 0 if name in ("refit_every", "refit_epochs") else 1
        require(value is None or (isinstance(value, int) and not isinstance(value, bool)),
                f"{spell(name)} must be a whole number, got {value!r}")
        require(value is None or value >= low, f"{spell(name)} must be >= {low}, got {value}")
        at_most(value, spell(name))


def check_delta(delta, spell: Spell) -> None:
    if delta is not None:
        require(isinstance(delta, (int, float)) and not isinstance(delta, bool),
                f"{spell('delta')} must be a number, got {delta!r}")
        require(0 < delta < 1,
                f"{spell('delta')} {delta:g}: must lie strictly between 0 and 1 (the chance of a wrong certificate)")


def check_first_look(budget: int, models: int, batch_size: int, init_batches: int, where: str, spell: Spell) -> None:
    """The budget pays for the first look (every model on ``init_batches`` batches)."""
    first = models * batch_size * init_batches
    require(budget >= first, f"{spell('budget')} {budget:,} is smaller than the first look: {models} models ({where}) "
                             f"x {spell('batch_size')} {batch_size} x {spell('init_batches')} {init_batches} = "
                             f"{first:,} cells; give {spell('budget')} {first:,} or more")


def certificate(given: Mapping[str, float | int | None], stop, spell: Spell):
    """``(stop, numbers)`` of the certificate shorthands ``epsilon`` / ``top_k`` / ``tie_group`` /
    ``cheapest`` / ``front`` (at most one given); ``(None, {})`` without them. ``stop``: the stopping rule
    also given (refused beside one)."""
    chosen = [(name, value) for name, value in given.items() if value is not None]
    if not chosen:
        return None, {}
    require(len(chosen) == 1, f"{' and '.join(spell(n) for n, _ in chosen)}: give one certificate")
    (name, value), = chosen
    require(stop is None, f"{spell(name)} sets the stopping rule; drop {spell('stop')} {getattr(stop, 'name', stop)}")
    if name in EPSILON_CERTIFICATES:
        require(isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1,
                f"{spell(name)} must be in [0, 1), got {value!r}")
        return registry.BUILT_INS["stopping rule"][EPSILON_CERTIFICATES[name]], {"stop.epsilon": float(value)}
    require(isinstance(value, int) and value >= 1, f"{spell(name)} must be a whole number >= 1, got {value}")
    if name == "top_k":
        return registry.builtin_top_k(value), {}
    return registry.BUILT_INS["stopping rule"]["tie_group"], {"stop.size": float(value)}


#: The certificates whose number is ``stop.epsilon``: choice -> stopping rule.
EPSILON_CERTIFICATES = {"epsilon": "epsilon_good", "cheapest": "cheapest_within", "front": "cost_front"}
#: The certificates that rank the models by cost.
COST_CERTIFICATES = ("cheapest", "front")


def check_certificate_size(given: Mapping[str, int | None], n_models: int, spell: Spell) -> None:
    """``top_k K`` and ``tie_group SIZE`` name fewer models than there are: a set of all certifies nothing."""
    for name, value in given.items():
        require(value is None or value < n_models,
                f"{spell(name)} {value}: must be smaller than the number of models ({n_models}); {value} of "
                f"{n_models} models certifies nothing")


def certificate_levels(numbers: dict, stop, n_models: int, spell: Spell) -> dict:
    """The numbers with ``cs_simultaneous`` raised to what ``stop``'s claim needs (top-k: log k / log m)."""
    k = min(stop.upper_models, n_models)
    need = math.log(k) / math.log(n_models) if 1 < k <= n_models and n_models > 1 else 0.0
    if numbers["cs_simultaneous"] < need:
        what = f"{spell('top_k')} {k}" if stop.upper_models < n_models else f"the {stop.name} certificate"
        note(f"{what} rests on {k} models' upper bounds at once, so their level is raised to "
             f"cover {k} of the {n_models} together (cs_simultaneous {numbers['cs_simultaneous']:g} -> log {k} / "
             f"log {n_models} = {need:.3f})")
        numbers = {**numbers, "cs_simultaneous": need}
    return numbers


def best_model_claim(stop) -> bool:
    """``stop``'s claim rests on one model's upper bound at most (``upper_models == 1``): a certificate about
    the best model (the built-in ``certified``, ``epsilon_good``, ``tie_group``), or the fixed budget's,
    which claims nothing and reports the leader. A run may change between these on resume (the levels
    stay the log's)."""
    return stop.upper_models == 1


def claim_split(numbers: dict, stop, given) -> dict:
    """The numbers with ``cs_upper_share`` set to `CLAIM_UPPER_SHARE` where ``stop``'s claim is about the
    best model at certification bounds (``cs_simultaneous < 1``) and ``given`` (the names the caller set)
    does not name it; unchanged otherwise (every bound of every model together keeps half each)."""
    if "cs_upper_share" in given or not _certification_bounds(numbers) or not best_model_claim(stop):
        return numbers
    return {**numbers, "cs_upper_share": CLAIM_UPPER_SHARE}


def _certification_bounds(numbers) -> bool:
    """The numbers (a dict, or a `pulse_jax.RunParams` / `pulse_jax.BanditParams`) hold only what a certificate
    needs (``cs_simultaneous < 1``), not every bound at once."""
    value = numbers.get("cs_simultaneous", 1.0) if isinstance(numbers, Mapping) else numbers.cs_simultaneous
    return float(value) < 1.0


def claim_gap_horizon(stop, numbers, given: float | None) -> float:
    """``BanditConfig.gap_horizon`` of a live selection: ``given``, or `CLAIM_GAP_HORIZON` for a certificate
    about the best model at certification bounds (0, the anytime bets, otherwise: with every bound at
    once, each model's interval is reported as a simulation's is)."""
    if given is not None:
        return given
    return CLAIM_GAP_HORIZON if best_model_claim(stop) and _certification_bounds(numbers) else 0.0


def check_gap_horizon(value, spell: Spell) -> None:
    """``gap_horizon`` is None or a finite number >= 0."""
    require(value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                              and value >= 0),
            f"{spell('gap_horizon')} must be a number >= 0 (0: anytime bets), got {value!r}")


#: The choices that are shorthands for a number: ``(choice, the number's field)``.
SHORTHANDS = (("delta", "delta"), ("bounds", "cs_simultaneous"), ("exploration", "exploration"),
              ("epsilon", "epsilon"), ("tie_group", "size"), ("cheapest", "epsilon"), ("front", "epsilon"))


def param_values(texts, given: set, spell: Spell) -> dict:
    """``PATH=VALUE`` texts (or ``(path, value)`` pairs) as ``{path: value}``: one value each, each path
    once; a number its shorthand (in ``given``) also sets is refused."""
    from pulse_jax.engine.params import as_number, parse_grid_option

    out = {}
    for item in texts:
        if isinstance(item, str):
            name, values = parse_grid_option(item, option=spell("param"))
            require(len(values) == 1, f"{spell('param')} {name}: one value, got {len(values)} (several values are "
                                      "a sweep: pulse-jax sweep --grid)")
            value = values[0]
        else:
            name, value = item
            value = as_number(name, value, spell("param"))
        require(name not in out, f"{spell('param')} {name}: given twice")
        field = name.rpartition(".")[2]
        for shorthand, number in SHORTHANDS:
            require(not (field == number and shorthand in given),
                    f"{spell('param')} {name}: {spell(shorthand)} sets the same number; give one of them")
        out[name] = value
    return out


def has_number(defaults, name: str) -> bool:
    try:
        defaults.path_of(name)
    except PulseInputError:
        return False
    return True


def check_param_paths(values: dict, plugin_sets, spell: Spell) -> None:
    """Every path in ``values`` is a number of at least one of the runs' plug-ins (``plugin_sets``:
    ``(estimator, rule, stop)`` per run) and lies in its range there."""
    from pulse_jax.engine.params import default_params, run_params

    for name, value in values.items():
        owners = [plugins for plugins in plugin_sets if has_number(default_params(plugins), name)]
        known = dict.fromkeys(path for plugins in plugin_sets for path in default_params(plugins).paths())
        require(owners, f"{spell('param')} {name}: not a number of this run; its numbers are {', '.join(known)}")
        for plugins in owners:
            run_params(plugins, {name: value}, f"{spell('param')} {name}")


def base_numbers(delta: float, bounds: str, exploration: float | None, spell: Spell) -> dict:
    """The shorthands' numbers: ``delta``, ``cs_simultaneous`` of ``bounds`` and the index rule's
    ``exploration`` when given."""
    from pulse_jax.engine.params import check_value

    require(bounds in ("all", "certification"), f"{spell('bounds')} must be 'all' or 'certification', got {bounds!r}")
    out = {"delta": check_value("delta", delta, spell("delta")), "cs_simultaneous": 1.0 if bounds == "all" else 0.0}
    require(exploration is None or (isinstance(exploration, (int, float)) and not isinstance(exploration, bool)
                                    and math.isfinite(exploration) and exploration >= 0),
            f"{spell('exploration')} must be a number >= 0, got {exploration!r}")
    if exploration is not None:
        out["exploration"] = exploration
    return out


def cs_grid(sequence: str, spell: Spell) -> int:
    """``BanditConfig.cs_grid`` of a sequence name: betting on `BETTING_GRID` bets, or Bernstein (0)."""
    check_sequence(sequence, spell)
    from pulse_jax.stats.confidence import BETTING_GRID

    return BETTING_GRID if sequence == "betting" else 0


def check_sequence(sequence: str, spell: Spell) -> None:
    """A confidence sequence's name: ``bernstein`` or ``betting``."""
    require(sequence in ("bernstein", "betting"), f"{spell('sequence')} must be 'bernstein' or 'betting', "
                                                  f"got {sequence!r}")
