"""What every plug-in shares: the pytree aliases of its own state, per-step record and numbers,
`RunShape` (the static sizes a sampling rule's ``init`` reads) and `Range` (the values a number of
its params class may take, declared in a ``RANGES`` class attribute).

Each plug-in kind's function signatures are `typing.Protocol` s in its own interface module, beside
the records its functions receive: `pulse_jax.estimators.base`, `pulse_jax.rules.base`,
`pulse_jax.stopping.base`. They document the contract (argument order, what comes back, the shapes);
`pulse_jax.engine.conformance.check_plugins` enforces the shapes on a run's own sizes before
anything is compiled. Shapes use ``m`` models, ``n`` examples, ``B`` the batch size and ``C`` the
estimator's ``n_sequences``. This module imports nothing of the package.
"""
from __future__ import annotations

import math
from typing import NamedTuple, Protocol

import chex

#: An estimator's, a rule's own state: any pytree of arrays (``()`` for none).
State = chex.ArrayTree
#: An estimator's per-step record: any pytree of scalars (``()`` for none).
Info = chex.ArrayTree
#: A plug-in's own traced numbers: the pytree its ``params`` field declares, with the run's values.
Params = chex.ArrayTree


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
