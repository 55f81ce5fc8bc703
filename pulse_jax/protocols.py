"""What every plug-in shares: the pytree aliases of its own state, per-step record and numbers,
`RunShape` (the static sizes a sampling rule's ``init`` reads) and `Range` (the values a number of
its params class may take, declared in a ``RANGES`` class attribute).

Each plug-in kind's function signatures are `typing.Protocol` s in its own interface module, beside
the records its functions receive: `pulse_jax.estimators.base`, `pulse_jax.rules.base`,
`pulse_jax.stopping.base`. They document the contract (argument order, what comes back, the shapes);
`pulse_jax.engine.conformance.check_plugins` enforces the shapes on a run's own sizes before
anything is compiled. Shapes use ``m`` models, ``n`` examples, ``B`` the batch size and ``C`` the
estimator's ``n_sequences``. This module imports nothing of the package; it also holds how a kind's
package exports its names lazily (`lazy`).
"""
from __future__ import annotations

import importlib
import math
import sys
import types
from typing import Any, Callable, NamedTuple, Protocol

# This module imports no JAX (the command line checks a command's plug-ins and numbers before it
# imports JAX), so the pytree aliases below are ``Any`` where ``chex.ArrayTree`` would be spelt.
#: An estimator's, a rule's own state: any pytree of arrays (``()`` for none).
State = Any
#: An estimator's per-step record: any pytree of scalars (``()`` for none).
Info = Any
#: A plug-in's own traced numbers: the pytree its ``params`` field declares, with the run's values.
Params = Any


class RunShape(Protocol):
    """The static sizes of a run (a `pulse_jax.BanditConfig` has them)."""

    n_models: int
    n_examples: int
    budget: int
    batch_size: int


class Range(NamedTuple):
    """The values a number may take: between ``low`` and ``high``, each end included where its
    ``*_closed`` flag says so; NaN only where ``nan`` is set (e.g. ``fixed_lambda``, where NaN
    means "the paper's adaptive lambda")."""

    low: float
    high: float
    low_closed: bool = False
    high_closed: bool = False
    nan: bool = False

    def holds(self, x: float) -> bool:
        if math.isnan(x):
            return self.nan
        return (x > self.low or (self.low_closed and x == self.low)) and (
            x < self.high or (self.high_closed and x == self.high))

    def __str__(self) -> str:
        text = f"{'[' if self.low_closed else '('}{self.low:g}, {self.high:g}{']' if self.high_closed else ')'}"
        return text + (" or NaN" if self.nan else "")


# ----------------------------------------------------------------------------- how a kind's package loads


class ExportingPackage(types.ModuleType):
    """A package whose exported names win over its submodules of the same name (``pulse`` is the
    function, not ``pulse.py``), as when its ``__init__`` imported them: the import system's binding
    of such a submodule to the package is left out (the submodule stays in ``sys.modules``)."""

    def __setattr__(self, name, value):
        if isinstance(value, types.ModuleType) and name in self.__dict__.get("__exported__", ()):
            return
        super().__setattr__(name, value)


def lazy(package: dict, exports: dict[str, list[str]]) -> tuple[Callable, Callable, list[str]]:
    """``(__getattr__, __dir__, __all__)`` for the package whose globals are ``package``, exporting
    ``exports`` (``{module: [names]}``); a name is imported from its module when first read (PEP 562),
    so importing the package (or one of its modules: Python imports the package first) loads nothing
    else. The package becomes an `ExportingPackage`."""
    where = {name: module for module, names in exports.items() for name in names}
    package["__exported__"] = frozenset(where)
    sys.modules[package["__name__"]].__class__ = ExportingPackage

    def getattr_(name):
        if name in where:
            value = getattr(importlib.import_module(where[name]), name)
            package[name] = value      # later look-ups skip this hook
            return value
        raise AttributeError(f"module {package['__name__']!r} has no attribute {name!r}")

    def dir_():
        return sorted(set(package) | set(where))

    return getattr_, dir_, sorted(where)
