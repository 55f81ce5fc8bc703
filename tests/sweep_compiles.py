"""Counting XLA compilations as JAX's own monitoring reports them (for the no-recompile tests)."""
import contextlib

import jax

_EVENTS = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, *args, **kwargs: _EVENTS.append(event) if event.endswith("backend_compile_duration") else None)


class _Since:
    """``len()`` is the number of backend compilations since it was made."""

    def __init__(self):
        self.start = len(_EVENTS)

    def __len__(self):
        return len(_EVENTS) - self.start


@contextlib.contextmanager
def count_compiles():
    yield _Since()
