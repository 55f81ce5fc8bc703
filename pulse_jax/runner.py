"""Deprecated: moved to :mod:`pulse_jax.live.runner` (see :mod:`pulse_jax.moved`)."""
from pulse_jax.moved import alias

alias(__name__)
