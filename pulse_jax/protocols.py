"""What every plug-in function shares: the pytree aliases of its own state, per-step record and
numbers, and `RunShape`, the static sizes a sampling rule's ``init`` reads.

Each plug-in kind's function signatures are `typing.Protocol` s in its own interface module, beside
the records its functions receive: `pulse_jax.estimators.base`, `pulse_jax.rules.base`,
`pulse_jax.stopping.base`. They document the contract (argument order, what comes back, the shapes);
`pulse_jax.engine.conformance.check_plugins` enforces the shapes on a run's own sizes before
anything is compiled. Shapes use ``m`` models, ``n`` examples, ``B`` the batch size and ``C`` the
estimator's ``n_sequences``. This module imports nothing of the package.
"""
from __future__ import annotations

from typing import Protocol

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
