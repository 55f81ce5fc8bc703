"""The one place where names become plug-ins.

Estimators (`pulse_jax.Estimator`), sampling rules
(`pulse_jax.rules.SamplingRule`) and stopping rules
(`pulse_jax.stopping.StoppingRule`) are objects. Wherever the API or
the CLI takes one, it also takes

* a registered name (``"pulse"``, ``"lucb"``, ``"certified"``, ...), or
* ``"package.module:attribute"``: a plug-in defined outside the package,
  imported; the attribute is the plug-in itself or a function of no
  arguments that returns it.

Nothing else in the package looks at a plug-in's name: behaviour follows
the plug-in's declared capabilities (``uses_predictions``,
``has_interval``, ``needs_interval``).

The built-ins as declared (`BUILT_INS`): each one's name, factory, capabilities and numbers (the
params classes below, which the plug-ins' own modules import from here), readable without importing
JAX. A mistaken command should be refused in one line before anything heavy loads (importing JAX
costs about a CPU-second, tens on a busy machine, and every built-in's module imports it), so the
checks a command makes before it runs (a method's name, whether it uses predictions or has an
interval, a ``--param`` path and its range, what a certificate's claim rests on) read a `BuiltIn`;
wherever a plug-in is taken a `BuiltIn` is taken too, and `resolve` builds it (`build`).
The declaration is a built-in's one registration: each kind's table of built-ins (`factories`, which
``built_ins()`` of `pulse_jax.estimators`, `pulse_jax.rules` and `pulse_jax.stopping` return) is made
from it, and ``tests/test_registry_builtins.py`` checks every entry's capabilities and numbers against
the plug-in its factory builds. This module imports no JAX until a plug-in is built or one of the user's imported.
"""
from __future__ import annotations

import importlib
import math
import os
import sys
from typing import Any, Callable, Mapping, NamedTuple

from pulse_jax.errors import PulseInputError, require
from pulse_jax.fileio.jsonable import plain_value
from pulse_jax.protocols import Range

#: What a stopping rule's claim rests on when it is every model's upper bound (a cost front).
EVERY_MODEL = 1 << 30


class PulseParams(NamedTuple):
    """PULSE's number: ``fixed_lambda`` in [0, 1] holds lambda there (an ablation; swept as
    ``estimator.fixed_lambda``); NaN (default) uses the estimator's own lambda rule."""

    fixed_lambda: float = math.nan

    RANGES = {"fixed_lambda": Range(0.0, 1.0, low_closed=True, high_closed=True, nan=True)}


class IndexParams(NamedTuple):
    """The index rule's number: ``exploration``, the ``a`` of ``mu_hat_i + sqrt(a / N_i)`` (paper: 1)."""

    exploration: float = 1.0

    RANGES = {"exploration": Range(0.0, math.inf, low_closed=True)}


class TopTwoParams(NamedTuple):
    """Top-Two's numbers: the leader's share ``beta`` and the fallback index rule's ``exploration``."""

    leader_fraction: float = 0.5
    exploration: float = 1.0

    RANGES = {"leader_fraction": Range(0.0, 1.0), "exploration": Range(0.0, math.inf, low_closed=True)}


class EpsilonParams(NamedTuple):
    """The epsilon-good rule's number: how far below the best mean the claimed model may be."""

    epsilon: float = 0.01

    RANGES = {"epsilon": Range(0.0, 1.0, low_closed=True)}


class TieGroupParams(NamedTuple):
    """Stop once the leader's group has at most ``size`` models."""

    size: float = 1.0

    RANGES = {"size": Range(1.0, float("inf"), low_closed=True)}


class BuiltIn(NamedTuple):
    """A built-in plug-in as declared: its kind, name, factory (``"module:function"``, called with
    ``args``), capabilities and numbers (``params``), without its functions. The capabilities are the
    plug-in's fields of the same names (a kind's fields only: an estimator's ``needs_interval`` is
    False here and absent there)."""

    kind: str
    name: str
    factory: str
    args: tuple = ()
    params: Any = ()
    uses_predictions: bool = False
    has_interval: bool = False
    needs_interval: bool = False
    upper_models: int = EVERY_MODEL
    uses_cost: bool = False


def _estimator(name, factory, **fields):
    return BuiltIn("estimator", name, "pulse_jax.estimators." + factory, **fields)


def _rule(name, factory, **fields):
    return BuiltIn("sampling rule", name, "pulse_jax.rules." + factory, **fields)


def _stop(name, factory, **fields):
    return BuiltIn("stopping rule", name, "pulse_jax.stopping." + factory, **fields)


#: Every kind's built-ins by the name they are chosen by, in the order error messages list them.
BUILT_INS = {
    "estimator": {
        "ucbe": _estimator("ucbe", "ucbe:ucbe", has_interval=True),
        "pulse": _estimator("pulse", "pulse:pulse", params=PulseParams(), uses_predictions=True, has_interval=True),
        "pulse_certify": _estimator("pulse_certify", "pulse:pulse_certify", params=PulseParams(),
                                    uses_predictions=True, has_interval=True),
        "pulse_hedged": _estimator("pulse_hedged", "pulse:pulse_hedged", params=PulseParams(), uses_predictions=True,
                                   has_interval=True),
        "pulse_adaptive": _estimator("pulse_adaptive", "adaptive:pulse_adaptive", uses_predictions=True,
                                     has_interval=True),
        "naive": _estimator("naive", "naive:naive_pooling", uses_predictions=True),
    },
    "sampling rule": {
        "ucbe": _rule("ucbe", "ucb_index:ucb_index_rule", params=IndexParams()),
        "lucb": _rule("lucb", "lucb:lucb", params=IndexParams(), needs_interval=True),
        "top_two": _rule("top_two", "top_two:top_two", params=TopTwoParams()),
        "top_two_interval": _rule("top_two", "top_two:top_two", args=(0.5, "interval"), params=TopTwoParams(),
                                  needs_interval=True),
        "successive_halving": _rule("successive_halving", "successive_halving:successive_halving"),
        "focus": _rule("focus", "focus:focus", params=IndexParams(), needs_interval=True),
    },
    "stopping rule": {
        "budget": _stop("budget", "budget:spend_budget", upper_models=1),
        "certified": _stop("certified", "certified:when_certified", needs_interval=True, upper_models=1),
        "epsilon_good": _stop("epsilon_good", "epsilon_good:epsilon_good", params=EpsilonParams(), needs_interval=True,
                             upper_models=1),
        "top_k": _stop("top_k", "top_k:top_k", needs_interval=True, upper_models=3),   # top_k() is for 3 models
        "tie_group": _stop("tie_group", "tie_group:tie_group", params=TieGroupParams(), needs_interval=True,
                          upper_models=1),
        "cheapest_within": _stop("cheapest_within", "cost:cheapest_within", params=EpsilonParams(),
                                 needs_interval=True, upper_models=EVERY_MODEL, uses_cost=True),
        "cost_front": _stop("cost_front", "cost:cost_front", params=EpsilonParams(), needs_interval=True,
                            upper_models=EVERY_MODEL, uses_cost=True),
    },
}

#: Other spellings of the built-ins' names.
ALIASES = {"ucb": "ucbe", "naive_pooling": "naive", "toptwo": "top_two", "halving": "successive_halving",
           "sh": "successive_halving", "epsilon": "epsilon_good",
           "topk": "top_k", "tie_groups": "tie_group"}


_FACTORIES: dict = {}


def factories(kind: str) -> dict:
    """Each built-in of ``kind`` by name, as the function that builds it: its declared factory with its
    declared arguments (`BUILT_INS`, the one registration of a built-in), in the declarations' order.
    Imports the built-ins' modules (and JAX) the first time a kind is read."""
    if kind not in _FACTORIES:
        import functools

        table = {}
        for name, declared in BUILT_INS[kind].items():
            module, _, function = declared.factory.partition(":")
            made = getattr(importlib.import_module(module), function)
            table[name] = functools.partial(made, *declared.args) if declared.args else made
        _FACTORIES[kind] = table
    return _FACTORIES[kind]


def builtin(kind: str, name: str) -> BuiltIn | None:
    """The built-in of ``kind`` chosen by ``name`` (or an alias), None for any other name."""
    return BUILT_INS[kind].get(ALIASES.get(name, name))


def builtin_top_k(k: int) -> BuiltIn:
    """The top-k certificate for ``k`` models (`pulse_jax.stopping.top_k`)."""
    return BUILT_INS["stopping rule"]["top_k"]._replace(args=(k,), upper_models=k)


def builtin_lucb_top_k(k: int) -> BuiltIn:
    """LUCB for a set of ``k`` models (`pulse_jax.rules.lucb_top_k`)."""
    return _rule(f"lucb_top_{k}", "lucb:lucb_top_k", args=(k,), params=IndexParams(), needs_interval=True)


def unknown_name(kind: str, value: str, where: str) -> PulseInputError:
    """The one-line refusal of a name that is neither a built-in nor ``module:attribute``."""
    label = "method (estimator)" if kind == "estimator" else kind
    return PulseInputError(f"{where}: unknown {label} {value!r}; choose one of {', '.join(BUILT_INS[kind])} "
                           "or give 'package.module:attribute'")


def build(described: BuiltIn):
    """The plug-in ``described`` declares, built by its factory (which imports JAX)."""
    module, _, function = described.factory.partition(":")
    return getattr(importlib.import_module(module), function)(*described.args)


def check_interval_needs(estimator, rule, stop) -> None:
    """A rule or stopping rule that needs confidence bounds runs only with a method that has them
    (each as declared: a `BuiltIn` or the plug-in)."""
    if estimator.has_interval:
        return
    for kind, plugin in (("rule", rule), ("stop", stop)):
        require(not plugin.needs_interval,
                f"method {estimator.name!r} has no valid interval, so it cannot use {kind}={plugin.name!r} "
                "(it needs the confidence bounds)")



# The interfaces only: a kind's ``built_ins()`` (`factories`) loads the built-ins' modules the first
# time a name is resolved; importing the engine or a plug-in package loads none of them.
class BuiltIns(Mapping):
    """A kind's built-ins by name (read-only), loaded on first read."""

    def __init__(self, load: Callable[[], dict]):
        self._load = load

    def __getitem__(self, name):
        return self._load()[name]

    def __iter__(self):
        return iter(self._load())

    def __len__(self):
        return len(self._load())


def _interface(package: str):
    return importlib.import_module(f"pulse_jax.{package}.base")


ESTIMATORS = BuiltIns(lambda: _interface("estimators").built_ins())
SAMPLING_RULES = BuiltIns(lambda: _interface("rules").built_ins())
STOPPING_RULES = BuiltIns(lambda: _interface("stopping").built_ins())

#: kind -> (interface package, plug-in class, the option that chooses it)
_KINDS = {"estimator": ("estimators", "Estimator", "method"),
          "sampling rule": ("rules", "SamplingRule", "rule"),
          "stopping rule": ("stopping", "StoppingRule", "stop")}


def import_user_module(module_name: str, where: str, spec: str | None = None):
    """Import a module of the user's (a scorer, a plug-in, an lm-eval model class) by name, with the
    working folder on ``sys.path`` *after* installed packages; any failure is one line naming it."""
    spec = spec or module_name
    here = os.getcwd()
    if not {"", ".", here} & set(sys.path):
        # The user's own modules in the working directory, *after* installed packages: a file there named
        # like a package (matplotlib.py) never replaces it.
        sys.path.append(here)
    try:
        return importlib.import_module(module_name)
    except ImportError as err:
        raise PulseInputError(f"{where}: cannot import module {module_name!r} for {spec!r}: {err} "
                              "(is its folder on PYTHONPATH?)") from None
    except SyntaxError as err:
        raise PulseInputError(f"{where}: module {module_name!r} has a syntax error: {err.msg} ({err.filename}, "
                              f"line {err.lineno})") from None
    except Exception as err:   # noqa: BLE001 -- the user's module may raise anything while importing
        raise PulseInputError(f"{where}: importing module {module_name!r} failed: {type(err).__name__}: "
                              f"{err}"[:400]) from None


def load_attribute(spec: str, where: str = "plug-in"):
    """``"package.module:attribute"`` imported (dots after the colon walk attributes)."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise PulseInputError(f"{where}: {spec!r} is neither a registered name nor 'package.module:attribute'")
    obj = import_user_module(module_name, where, spec)
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise PulseInputError(f"{where}: module {module_name!r} has no attribute {attribute!r}")
        obj = getattr(obj, part)
    return obj


def resolve(kind: str, value, where: str | None = None):
    """The plug-in of ``kind`` named or given by ``value`` (see the module docstring)."""
    package, class_name, option = _KINDS[kind]
    where = where or option
    if isinstance(value, str) and ":" not in value:
        value = builtin(kind, value) or value
    if isinstance(value, BuiltIn) and value.kind == kind:
        return build(value)
    if isinstance(value, str) and ":" not in value:
        raise unknown_name(kind, value, where)
    cls = getattr(_interface(package), class_name)
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        obj = load_attribute(value, where)
        if callable(obj) and not isinstance(obj, cls):
            obj = _call_factory(obj, value, where, kind)
        if isinstance(obj, cls):
            return obj
        raise PulseInputError(f"{where}: {value!r} is {_a(type(obj).__name__)}, not {_a(kind)} "
                              f"(pulse_jax.{package}.{cls.__name__})")
    raise PulseInputError(f"{where} must be {_a(kind)} ({cls.__name__}) or its name, got {type(value).__name__}")


def _call_factory(factory, spec: str, where: str, kind: str):
    """A plug-in's factory called with no arguments: one that needs arguments is refused before it is
    called (``os:system`` is never run), and one that raises is one line naming it."""
    import inspect

    try:
        inspect.signature(factory).bind()
    except TypeError:
        raise PulseInputError(f"{where}: {spec!r} is a function that needs arguments; give {_a(kind)} or a "
                              "function of no arguments that returns one") from None
    except ValueError:     # no signature to read (some built-ins): not a plug-in factory
        raise PulseInputError(f"{where}: {spec!r} is not {_a(kind)} or a function of no arguments that returns "
                              "one") from None
    try:
        return factory()
    except Exception as err:   # noqa: BLE001 -- the user's factory may raise anything
        raise PulseInputError(f"{where}: {spec!r} raised {type(err).__name__}: {err}"[:400]) from None


def _a(noun: str) -> str:
    """``noun`` with its indefinite article: "an estimator", "a sampling rule", "an int"."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def estimator(value, where: str | None = None):
    """The `pulse_jax.Estimator` named or given by ``value``."""
    return resolve("estimator", value, where)


def sampling_rule(value, where: str | None = None):
    """The `pulse_jax.rules.SamplingRule` named or given by ``value``."""
    return resolve("sampling rule", value, where)


def stopping_rule(value, where: str | None = None):
    """The `pulse_jax.stopping.StoppingRule` named or given by ``value``."""
    return resolve("stopping rule", value, where)


def describe(plugin) -> dict:
    """A plug-in's identity for logs and results: its name and its settings."""
    if isinstance(plugin, BuiltIn):
        plugin = build(plugin)
    settings = {k: plain_value(v) for k, v in getattr(plugin, "settings", ())}
    return {"name": plugin.name, "settings": settings}

