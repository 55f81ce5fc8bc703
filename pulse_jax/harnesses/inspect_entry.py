"""What Inspect loads from pulse-jax's ``inspect_ai`` entry point: the offline stand-in provider
(`pulse_jax.harnesses.inspect_stand_in`). Without inspect-ai installed there is nothing to register."""
try:
    from pulse_jax.harnesses import inspect_stand_in  # noqa: F401 -- registers pulse-stand-in with Inspect
except ImportError:   # inspect-ai is not installed: Inspect does not load this then either
    pass
