"""Earlier module paths that keep working for one release (each with a ``DeprecationWarning``).

The package groups its modules: the engine (`pulse_jax.engine`), live selection
(`pulse_jax.live`), inputs and outputs (`pulse_jax.io`) and analysis
(`pulse_jax.analysis`). An old module file is two lines that call `alias`, which puts the
new module itself in its place, so ``from pulse_jax import selector`` and ``monkeypatch`` on it reach
the one real module.
"""
import importlib
import sys
import warnings

#: old module -> new module (the CHANGELOG lists the same moves)
MOVED = {"pulse_jax.bandit": "pulse_jax.engine", "pulse_jax.bookkeeping": "pulse_jax.engine.bookkeeping",
         "pulse_jax.selector": "pulse_jax.live.selector", "pulse_jax.runner": "pulse_jax.live.runner",
         "pulse_jax.journal": "pulse_jax.live.journal", "pulse_jax.live_report": "pulse_jax.live.report",
         "pulse_jax.data": "pulse_jax.io.data", "pulse_jax.harness": "pulse_jax.io.harness",
         "pulse_jax.provenance": "pulse_jax.io.provenance", "pulse_jax.metrics": "pulse_jax.analysis.metrics",
         "pulse_jax.plotting": "pulse_jax.analysis.plotting", "pulse_jax.report": "pulse_jax.analysis.report"}


def alias(old: str) -> None:
    """Make the module ``old`` (being imported) the module it moved to, with a ``DeprecationWarning``."""
    new = MOVED[old]
    warnings.warn(f"{old} is deprecated; import {new} (the same names)", DeprecationWarning, stacklevel=3)
    sys.modules[old] = importlib.import_module(new)
