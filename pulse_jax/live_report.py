"""Deprecated: moved to :mod:`pulse_jax.live.report` (see :mod:`pulse_jax.moved`)."""
from pulse_jax.moved import alias

alias(__name__)
