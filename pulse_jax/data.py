"""Deprecated: moved to :mod:`pulse_jax.io.data` (see :mod:`pulse_jax.moved`)."""
from pulse_jax.moved import alias

alias(__name__)
