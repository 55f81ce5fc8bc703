"""Stopping rules: when a repetition stops spending (one file each; see :mod:`pulse_jax.stopping.base`).

* :func:`spend_budget` -- fixed budget (the default);
* :func:`when_certified` -- fixed confidence: stop at the first certification.
"""
from pulse_jax.stopping.base import StopInputs, StoppingRule
from pulse_jax.stopping.budget import spend_budget
from pulse_jax.stopping.certified import when_certified

__all__ = ["StopInputs", "StoppingRule", "spend_budget", "when_certified"]
