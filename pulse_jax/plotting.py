"""Deprecated: moved to `pulse_jax.analysis.plotting` (see `pulse_jax.moved`)."""
from pulse_jax.moved import alias

alias(__name__)
