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
"""
from __future__ import annotations

import importlib
import os
import sys
from typing import Callable, Mapping

from pulse_jax.errors import PulseInputError
from pulse_jax.fileio.jsonable import plain_value
from pulse_jax.estimators import base as estimators
from pulse_jax.rules import base as rules
from pulse_jax.stopping import base as stopping

# The interfaces only: each built-in adds itself to its kind's ``BUILT_IN`` table when its module
# loads, and a kind's ``built_ins()`` loads them the first time a name is resolved; importing the
# engine or a plug-in package loads none of them.
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


ESTIMATORS = BuiltIns(estimators.built_ins)
SAMPLING_RULES = BuiltIns(rules.built_ins)
STOPPING_RULES = BuiltIns(stopping.built_ins)
ALIASES = {"ucb": "ucbe", "naive_pooling": "naive", "toptwo": "top_two", "halving": "successive_halving",
           "sh": "successive_halving", "epsilon": "epsilon_good",
           "topk": "top_k", "tie_groups": "tie_group"}

_KINDS = {"estimator": (estimators.built_ins, estimators.Estimator, "method"),
          "sampling rule": (rules.built_ins, rules.SamplingRule, "rule"),
          "stopping rule": (stopping.built_ins, stopping.StoppingRule, "stop")}


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
    load, cls, option = _KINDS[kind]
    where = where or option
    table = load()
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        name = ALIASES.get(value, value)
        if name in table:
            return table[name]()
        if ":" in value:
            obj = load_attribute(value, where)
            if callable(obj) and not isinstance(obj, cls):
                obj = _call_factory(obj, value, where, kind)
            if isinstance(obj, cls):
                return obj
            raise PulseInputError(f"{where}: {value!r} is {_a(type(obj).__name__)}, not {_a(kind)} "
                                  f"(pulse_jax.{cls.__module__.split('.', 1)[1]}.{cls.__name__})")
        label = "method (estimator)" if kind == "estimator" else kind
        raise PulseInputError(f"{where}: unknown {label} {value!r}; choose one of {', '.join(table)} "
                              "or give 'package.module:attribute'")
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


def estimator(value, where: str | None = None) -> estimators.Estimator:
    return resolve("estimator", value, where)


def sampling_rule(value, where: str | None = None) -> rules.SamplingRule:
    return resolve("sampling rule", value, where)


def stopping_rule(value, where: str | None = None) -> stopping.StoppingRule:
    return resolve("stopping rule", value, where)


def describe(plugin) -> dict:
    """A plug-in's identity for logs and results: its name and its settings."""
    settings = {k: plain_value(v) for k, v in getattr(plugin, "settings", ())}
    return {"name": plugin.name, "settings": settings}

