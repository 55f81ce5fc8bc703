"""A pytest plugin that records where each test's time goes, from JAX's own monitoring events.

Loaded by ``profile_test_suite.py`` (``-p suite_profiler`` with this folder on ``PYTHONPATH``). Per test:
wall and CPU seconds of the worker process, and the seconds JAX spent tracing (top-level traces only),
lowering to MLIR and in backend compilation (which includes loading a program from the persistent
cache), with the count of programs compiled or loaded in under 50 ms ("small": mostly single
operations run outside ``jit``) and of the others. One JSON line per test, to
``$SUITE_PROFILE_OUT.<pid>.jsonl``.
"""
from __future__ import annotations

import collections
import json
import os
import time

import pytest
from jax._src import monitoring

_OUT = os.environ.get("SUITE_PROFILE_OUT", "suite_profile")
_EVENTS = {"/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
           "/jax/core/compile/backend_compile_duration": "backend"}
_TRACE = "/jax/core/compile/jaxpr_trace_duration"
#: A backend compilation (or cache load) under this many seconds counts as a small program.
SMALL_S = 0.05
_now: dict = collections.defaultdict(float)
_trace_spans: list = []


def _duration(event: str, seconds: float, **_) -> None:
    kind = _EVENTS.get(event)
    if kind is None:
        return
    _now[kind] += seconds
    if kind == "backend":
        size = "small" if seconds < SMALL_S else "big"
        _now[f"backend_{size}"] += seconds
        _now[f"n_{size}"] += 1


def _span(event: str, start: float, end: float, **_) -> None:
    if event == _TRACE:
        _trace_spans.append((start, end))


def _outermost(spans) -> float:
    """Seconds covered by the spans (a trace nested in another is counted once)."""
    total, reached = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reached:
            total += end - max(start, reached)
            reached = end
    return total


monitoring.register_event_duration_secs_listener(_duration)
monitoring.register_event_time_span_listener(_span)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _now.clear()
    _trace_spans.clear()
    wall, cpu = time.perf_counter(), time.process_time()
    yield
    record = {"test": item.nodeid, "wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu,
              "trace": _outermost(_trace_spans), **_now}
    with open(f"{_OUT}.{os.getpid()}.jsonl", "a") as out:
        out.write(json.dumps(record) + "\n")
