"""One kernel: `init`/`step` in the anchors' shape, the same object for simulations and live runs.

What is checked: the `Kernel` exposes seven functions; a live selection builds one kernel, with the
selector's own stopping rule (no rule replaced or grafted), and asks through its ``ask``; no module
replaces a field of a plug-in outside the plug-in's own package; every field of the state is read by
a step; the lowered program of one step does not grow past the count measured when the kernel took
this shape (docs/performance.md).
"""
import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from pulse_jax import engine
from pulse_jax.engine import Kernel
from pulse_jax.engine.op_count import step_operations
import pulse_jax.live.compiled as compiled
from pulse_jax.live import Selector

ROOT = Path(__file__).resolve().parents[1] / "pulse_jax"


def test_the_kernel_exposes_seven_functions():
    functions = [f for f in Kernel._fields if f not in ("config", "plugins")]
    assert functions == ["init", "stop_status", "ask", "tell", "step", "bounds", "record"]


def test_a_live_selection_builds_one_kernel_with_its_own_stopping_rule(small_bench, monkeypatch):
    b, V = small_bench
    built = []
    real = engine.build_kernel

    def counting(config, plugins):
        built.append(config)
        return real(config, plugins)

    monkeypatch.setattr(compiled.engine, "build_kernel", counting)
    compiled.compiled.cache_clear()
    sel = Selector(b.models, 200, 6 * 8 + 160, batch_size=8, V=V, seed=3, refit_every=4, stop="certified",
                   concurrency=4)
    for _ in range(40):
        request = sel.ask()
        if request is None:
            break
        sel.tell(request, b.scores[request.model_index, list(request.example_index)])
    compiled.compiled.cache_clear()
    assert built == [sel.config]                          # one kernel, on the selector's own config
    kernel = sel._programs.kernel
    assert kernel.plugins == sel.plugins
    assert kernel.plugins.stop.name == "certified"


def test_no_plugin_field_is_replaced_outside_its_own_package():
    """A plug-in is a NamedTuple of functions: `stop._replace(focus=...)` outside `pulse_jax/stopping`
    would graft one rule's behaviour onto another, which a reader of the rule cannot see."""
    owners = {"stop": "stopping", "rule": "rules", "estimator": "estimators"}
    found = []
    for path in ROOT.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "_replace"
                    and isinstance(node.func.value, (ast.Name, ast.Attribute, ast.Call))):
                target = ast.unparse(node.func.value)
                for name, package in owners.items():
                    if (target.endswith(name) or target.endswith(f".{name}") or f"{name}s_of" in target
                            or target.endswith(f".plugins.{name}")) and path.parent.name != package:
                        found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: {ast.unparse(node)[:80]}")
    assert found == []


@pytest.mark.skipif(not jax.__version__.startswith("0.10."),
                    reason=f"the ceiling was measured with JAX 0.10; JAX {jax.__version__} lowers differently")
def test_one_step_lowers_to_no_more_operations_than_measured():
    """The StableHLO operations of one PULSE step with the Top-Two rule and the certified stop, on the
    small problem (`pulse_jax.engine.op_count.SMALL`), as docs/performance.md gives them. A change
    that adds operations to every step must raise this ceiling on purpose, not by accident."""
    assert step_operations("pulse", stop="certified", rule="top_two_interval")["lowered"] <= 3195
    assert step_operations("ucbe", stop="certified", rule="top_two_interval")["lowered"] <= 1788


@pytest.mark.skipif(not jax.__version__.startswith("0.10."),
                    reason=f"the ceiling was measured with JAX 0.10; JAX {jax.__version__} compiles differently")
def test_a_pulse_step_runs_few_more_thunks_than_a_ucbe_step():
    """The thunks of the scan body of a whole compiled run (`pulse_jax.engine.op_count.scan_body_thunks`,
    one kernel launch each on a GPU), certified stop on the small problem, under the Top-Two rule and
    the paper's index rule: a PULSE step without a refit runs at most 1.1x UCB-E's, and no count grows
    past what docs/performance.md gives. The refit's branch is counted apart (a step with a refit runs
    more)."""
    # In a process of its own with XLA's default settings (the suite's faster-compiling ones fuse less).
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_DISABLE_MOST_OPTIMIZATIONS", "XLA_FLAGS")}
    code = ("import json; from pulse_jax.engine.op_count import scan_body_thunks as t; "
            "print(json.dumps([[t(m, stop='certified', rule=r) for m in ('pulse', 'ucbe')] "
            "for r in ('top_two_interval', 'ucbe')]))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    (pulse, ucbe), (pulse_index, ucbe_index) = json.loads(out.stdout.strip().splitlines()[-1])
    assert pulse["step"] <= 702 and ucbe["step"] <= 665, (pulse, ucbe)
    assert pulse_index["step"] <= 447 and ucbe_index["step"] <= 409, (pulse_index, ucbe_index)
    assert pulse["step"] <= 1.1 * ucbe["step"] and pulse_index["step"] <= 1.1 * ucbe_index["step"]
    for p, u in ((pulse, ucbe), (pulse_index, ucbe_index)):
        assert p["refit_step"] > p["step"] and u["refit_step"] == u["step"]


def _state_leaves_read_by_a_step(method, **settings):
    """Which leaves of the state one step reads, by name: a leaf counts as read when some output of the
    step other than its own new value depends on it (the step's jaxpr, dead code removed with that
    output alone left out)."""
    from jax._src.interpreters import partial_eval as pe   # the jaxpr dead-code pass JAX itself uses
    import jax.numpy as jnp
    import numpy as np
    m, n = 6, 64
    rng = np.random.default_rng(0)
    scores = (rng.random((m, n)) < 0.5).astype(np.float32)
    V = rng.normal(size=(n, 3)).astype(np.float32)
    cost = settings.pop("cost", None)
    plugins = engine.Plugins(method, settings.pop("rule", "ucbe"), settings.pop("stop", "budget"))
    config = engine.BanditConfig(n_models=m, n_examples=n, batch_size=4, refit_every=3, budget=m * 4 + 100,
                                 **settings)
    kernel = engine.build_kernel(config, plugins)
    params = engine.resolve_params(None, plugins)
    episode, state = jax.jit(kernel.init)(jax.random.PRNGKey(0), scores, V, params, engine.Start(cost=cost))
    leaves = jax.tree_util.tree_flatten_with_path(state)[0]
    closed = jax.make_jaxpr(lambda st, t: kernel.step(episode, st, params, t))(state, jnp.int32(5))
    read = set()
    for j, (path, _) in enumerate(leaves):
        used = [True] * len(closed.jaxpr.outvars)
        used[j] = False          # the state's leaves come first among the outputs, in the same order
        if pe.dce_jaxpr(closed.jaxpr, used)[1][j]:
            read.add(jax.tree_util.keystr(path))
    return read, {jax.tree_util.keystr(p) for p, _ in leaves}


def test_the_state_holds_only_what_the_next_step_reads():
    """Every leaf of `BanditState` is read by a step of some configuration (the union over four that
    between them use every field: PULSE with the certified stop and the Top-Two rule, PULSE with a
    cost-aware certificate, UCB-E with the paper's interval and LUCB, betting sequences). What only a
    report reads (money, the stop's claim, snapshots, each sequence's own bounds) is in `StepInfo`;
    a field kept in the state for a report fails here."""
    import numpy as np
    cost = np.linspace(1, 2, 6, dtype=np.float32)[:, None] * np.ones((6, 64), np.float32)
    read, everything = _state_leaves_read_by_a_step("pulse", rule="top_two_interval", stop="certified")
    for method, settings in [("pulse", {"stop": "cheapest_within", "cost": cost}),
                             ("ucbe", {"interval": "paper", "stop": "certified", "rule": "lucb"}),
                             ("pulse_hedged", {"cs_grid": 8, "stop": "certified", "rule": "top_two_interval"})]:
        read |= _state_leaves_read_by_a_step(method, **settings)[0]
    assert sorted(everything - read) == []
    assert not {"money", "claimed", "snapshots"} & set(engine.BanditState._fields)


def test_a_step_writes_its_log_slot_only_when_it_spends():
    """Step ``t`` writes slot ``t - 1`` of the pull log (its model, examples, scores and size) when it
    spends, and a step that spends nothing (a stopped run) writes no slot at all: every leaf of the
    log, and the prediction sums, exactly as they were. The refits read the log, so a write on a step
    that spends nothing would have to leave an empty slot (size 0) to keep them right."""
    import jax.numpy as jnp
    import numpy as np

    m, n = 6, 64
    rng = np.random.default_rng(1)
    scores = (rng.random((m, n)) < 0.5).astype(np.float32)
    V = rng.normal(size=(n, 3)).astype(np.float32)
    config = engine.BanditConfig(n_models=m, n_examples=n, batch_size=4, refit_every=3, budget=m * 4 + 100)
    kernel = engine.build_kernel(config, engine.Plugins("pulse"))
    params = engine.resolve_params(None, engine.Plugins("pulse"))
    episode, state = jax.jit(kernel.init)(jax.random.PRNGKey(0), scores, V, params)
    step = jax.jit(lambda st, t: kernel.step(episode, st, params, t)[0])
    spent = step(state, jnp.int32(1))
    assert int(spent.spent) > int(state.spent) and int(spent.log.sizes[0]) > 0
    for name in ("models", "examples", "scores", "sizes"):
        assert np.array_equal(np.asarray(getattr(spent.log, name))[1:], np.asarray(getattr(state.log, name))[1:])
    stopped = state._replace(stopped=jnp.bool_(True))
    after = step(stopped, jnp.int32(1))
    assert int(after.spent) == int(state.spent)
    for before, now in zip(jax.tree_util.tree_leaves((stopped.log, stopped.sums)),
                           jax.tree_util.tree_leaves((after.log, after.sums))):
        assert np.array_equal(np.asarray(before), np.asarray(now))
