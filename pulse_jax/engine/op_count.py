"""How many operations one kernel step lowers to: what a GPU pays for in kernel launches, and what
the layout of the step can change (`benchmarks/speed/step_operations.py`, docs/performance.md).

``lowered`` counts the StableHLO operations of ``jax.jit(kernel.step).lower(...)`` (the program as
JAX writes it, before XLA optimizes it: it depends on the kernel's code and the JAX version, not on
the machine); ``compiled`` counts the instructions of the program XLA compiles for this backend.
"""
from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np

from pulse_jax.engine.config import BanditConfig, get_estimator, plugins_of, resolve_params
from pulse_jax.engine.kernel import build_kernel

#: The small problem the counts are taken on (the counts do not depend on its numbers, only on the
#: program's layout): 8 models, 96 examples, rank 4, batches of 8, a refit every 10 steps.
SMALL = {"n_models": 8, "n_examples": 96, "rank": 4, "batch_size": 8, "refit_every": 10}
_OPERATION = re.compile(r"^\s*(%\S+(:\d+)? = )?\"?(stablehlo|chlo|func\.call|mhlo)")


def step_operations(method: str = "pulse", *, compiled: bool = False, **config) -> dict:
    """``{"lowered": n[, "compiled": k]}`` for one step (``t`` traced) of ``method`` on `SMALL` (any
    `BanditConfig` field in ``config`` replaces its setting there, e.g. ``stop="certified"``)."""
    settings = {**SMALL, **config}
    m, n, r = settings.pop("n_models"), settings.pop("n_examples"), settings.pop("rank")
    settings.setdefault("budget", m * settings["batch_size"] + 200)
    rng = np.random.default_rng(0)
    scores = (rng.random((m, n)) < 0.5).astype(np.float32)
    V = rng.normal(size=(n, r)).astype(np.float32)
    bandit = BanditConfig(n_models=m, n_examples=n, **settings)
    estimator = get_estimator(method)
    kernel = build_kernel(bandit, estimator)
    params = resolve_params(None, plugins_of(bandit, estimator))
    episode, state = jax.jit(kernel.init)(jax.random.PRNGKey(0), scores, V, params)
    lowered = jax.jit(kernel.step).lower(episode, state, params, jnp.int32(1))
    out = {"lowered": sum(1 for line in lowered.as_text().splitlines() if _OPERATION.match(line))}
    if compiled:
        text = lowered.compile().as_text()
        out["compiled"] = sum(1 for line in text.splitlines()
                              if " = " in line and not line.lstrip().startswith(("ROOT", "//")))
    return out
