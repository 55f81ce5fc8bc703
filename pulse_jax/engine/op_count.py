"""How many operations one kernel step lowers to: what a GPU pays for in kernel launches, and what
the layout of the step can change (`benchmarks/speed/step_operations.py`, docs/performance.md).

``lowered`` counts the StableHLO operations of ``jax.jit(kernel.step).lower(...)`` (the program as
JAX writes it, before XLA optimizes it: it depends on the kernel's code and the JAX version, not on
the machine); ``compiled`` counts the instructions of the program XLA compiles for this backend.
`scan_body_thunks` counts what a run executes per step: the thunks (fusions, dots, scatters, ...: one
kernel launch each on a GPU) of the scan body of a whole compiled run.
"""
from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np

from pulse_jax.engine.config import BanditConfig, Plugins, resolve_params
from pulse_jax.engine.drivers import make_run
from pulse_jax.engine.kernel import build_kernel

#: The small problem the counts are taken on (the counts do not depend on its numbers, only on the
#: program's layout): 8 models, 96 examples, rank 4, batches of 8, a refit every 10 steps.
SMALL = {"n_models": 8, "n_examples": 96, "rank": 4, "batch_size": 8, "refit_every": 10}
_OPERATION = re.compile(r"^\s*(%\S+(:\d+)? = )?\"?(stablehlo|chlo|func\.call|mhlo)")


def _problem(method: str, config: dict):
    """`SMALL` with ``config``'s settings over it (``rule`` and ``stop`` go to the `Plugins`):
    ``(BanditConfig, Plugins, params, scores, V)``."""
    settings = {**SMALL, **config}
    plugins = Plugins(method, rule=settings.pop("rule", "ucbe"), stop=settings.pop("stop", "budget"))
    m, n, r = settings.pop("n_models"), settings.pop("n_examples"), settings.pop("rank")
    settings.setdefault("budget", m * settings["batch_size"] + 200)
    rng = np.random.default_rng(0)
    scores = (rng.random((m, n)) < 0.5).astype(np.float32)
    V = rng.normal(size=(n, r)).astype(np.float32)
    bandit = BanditConfig(n_models=m, n_examples=n, **settings)
    return bandit, plugins, resolve_params(None, plugins), scores, V


def step_operations(method: str = "pulse", *, compiled: bool = False, **config) -> dict:
    """``{"lowered": n[, "compiled": k]}`` for one step (``t`` traced) of ``method`` on `SMALL` (any
    `BanditConfig` field in ``config`` replaces its setting there; ``rule`` and ``stop`` name the
    plug-ins, e.g. ``stop="certified"``)."""
    bandit, plugins, params, scores, V = _problem(method, config)
    kernel = build_kernel(bandit, plugins)
    episode, state = jax.jit(kernel.init)(jax.random.PRNGKey(0), scores, V, params)
    lowered = jax.jit(kernel.step).lower(episode, state, params, jnp.int32(1))
    out = {"lowered": sum(1 for line in lowered.as_text().splitlines() if _OPERATION.match(line))}
    if compiled:
        text = lowered.compile().as_text()
        out["compiled"] = sum(1 for line in text.splitlines()
                              if " = " in line and not line.lstrip().startswith(("ROOT", "//")))
    return out


#: Instructions that run no thunk: they name buffers or values the others compute.
_NO_THUNK = ("parameter(", "constant(", "get-tuple-element(", "tuple(", "bitcast(", "after-all(")


def _computations(text: str) -> tuple[dict, str]:
    """The compiled HLO text's computations, ``name -> [instruction lines]``, and the entry's name."""
    computations, current, entry = {}, None, None
    for line in text.splitlines():
        head = re.match(r"^(ENTRY )?%?([\w.\-]+) .*\{\s*$", line)
        if head:
            current = head.group(2)
            computations[current] = []
            entry = current if head.group(1) else entry
        elif current and " = " in line:
            computations[current].append(line)
    return computations, entry


def _thunks(computations: dict, name: str, pick) -> int:
    """Thunks of computation ``name``: its instructions that run one, each loop's condition and body
    counted once, and of a conditional's branches the one ``pick`` (min or max) chooses. A fusion's
    computation and a reducer (``to_apply`` of a reduce, a scatter) run inside their instruction."""
    total = 0
    for line in computations[name]:
        if any(word in line for word in _NO_THUNK):
            continue
        total += 1
        if " while(" in line:
            total += sum(_thunks(computations, re.search(key + r"=%?([\w.\-]+)", line).group(1), pick)
                         for key in ("condition", "body"))
        elif " conditional(" in line:
            branches = re.search(r"branch_computations=\{([^}]*)\}", line)
            names = re.findall(r"%?([\w.\-]+)", branches.group(1)) if branches else \
                re.findall(r"(?:true|false)_computation=%?([\w.\-]+)", line)
            total += pick(_thunks(computations, n, pick) for n in names if n in computations)
        elif " call(" in line:
            total += _thunks(computations, re.search(r"to_apply=%?([\w.\-]+)", line).group(1), pick)
    return total


def scan_body_thunks(method: str = "pulse", **config) -> dict:
    """``{"step": n, "refit_step": k}``: the thunks of the largest loop body of one whole compiled run of
    ``method`` on `SMALL` (the scan over steps), taking at each conditional its cheapest branch (a step
    without a refit) or its costliest (a step with one). Loops inside the body count once."""
    bandit, plugins, params, scores, V = _problem(method, config)
    run = jax.jit(make_run(bandit, plugins))
    text = run.lower(jax.random.PRNGKey(0), scores, V, params).compile().as_text()
    computations, entry = _computations(text)
    bodies = [re.search(r"body=%?([\w.\-]+)", line).group(1) for line in computations[entry] if " while(" in line]
    step = max(bodies, key=lambda body: _thunks(computations, body, min))
    return {"step": _thunks(computations, step, min), "refit_step": _thunks(computations, step, max)}
