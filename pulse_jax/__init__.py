"""pulse-jax."""
