"""Repetitions sharded over several devices give exactly the single-device results; other compiled code agrees on one path."""
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from conftest import ON_CPU, tiny_problem

from pulse_jax.engine import BanditConfig
from pulse_jax.simulation import simulate

# Each test starts a second JAX process that compiles its own programs (43 s of a cold default run):
# they run with the integration tests. The default run keeps the properties they rest on: every
# repetition computed from its own key whatever the chunking (test_engine.py's
# test_same_seed_same_result_and_chunking_does_not_matter) and a followed path computed as the free
# run computed it (test_engine.py's test_following_a_runs_choices_repeats_it_and_follows_any_path).
pytestmark = pytest.mark.integration

SCRIPT = """
import json, sys
import jax
sys.path.insert(0, {tests!r})
from conftest import tiny_problem
from pulse_jax.engine import BanditConfig
from pulse_jax.simulation import simulate
assert len(jax.devices()) == 4, jax.devices()
scores, _, V = tiny_problem(seed=4, m=6, n=40)
config = BanditConfig(n_models=6, n_examples=40, budget=6 * 4 + 120, batch_size=4, refit_every=5)
out = {{}}
for method in ("ucbe", "pulse"):
    res = simulate(scores, config, method, V=V, reps=10, seed=3, chunk_size=4)
    out[method] = {{"best": res.best.tolist(), "estimates": res.estimates.tolist(), "n_obs": res.n_obs.tolist()}}
print(json.dumps(out))
"""


def test_four_devices_match_one_device():
    """10 repetitions on 4 (forced host) devices, chunks of 4 padded to the device count: same as 1 device.

    Every repetition is computed independently from its own key, so the
    choices must be identical and the float32 estimates equal to rounding.
    """
    flags = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"   # keeps the suite's flags
    env = dict(os.environ, XLA_FLAGS=flags.strip(), JAX_PLATFORMS="cpu")
    tests = str(Path(__file__).parent)
    proc = subprocess.run([sys.executable, "-c", SCRIPT.format(tests=tests)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sharded = json.loads(proc.stdout.strip().splitlines()[-1])
    scores, _, V = tiny_problem(seed=4, m=6, n=40)
    config = BanditConfig(n_models=6, n_examples=40, budget=6 * 4 + 120, batch_size=4, refit_every=5)
    for method in ("ucbe", "pulse"):
        res = simulate(scores, config, method, V=V, reps=10, seed=3)
        np.testing.assert_array_equal(np.asarray(sharded[method]["best"]), res.best)
        np.testing.assert_array_equal(np.asarray(sharded[method]["n_obs"]), res.n_obs)
        np.testing.assert_allclose(np.asarray(sharded[method]["estimates"]), res.estimates, atol=1e-6)


FOLLOW_SCRIPT = """
import json, sys
import numpy as np
sys.path.insert(0, {tests!r})
from conftest import tiny_problem
from pulse_jax.engine import BanditConfig
from pulse_jax.simulation import simulate
scores, _, V = tiny_problem(seed=5, m=6, n=40)
config = BanditConfig(n_models=6, n_examples=40, budget=6 * 4 + 120, batch_size=4, refit_every=5,
                      record_estimates=True)
chosen = json.loads(sys.stdin.read())
out = {{}}
for method in ("ucbe", "pulse"):
    res = simulate(scores, config, method, V=V, reps=8, seed=9, follow=np.asarray(chosen[method]))
    out[method] = {{k: np.asarray(getattr(res, k)).tolist() for k in ("chosen", "step_estimates", "step_low",
                                                                     "step_high", "lam")}}
print(json.dumps(out))
"""


def test_other_compiled_code_agrees_on_one_sample_path():
    """The same runs compiled at another XLA optimization level (another summation order, as on another
    backend), made to follow this process's choices, agree within the stated float tolerances.

    UCB-E's estimates are ratios of integer counts, so they must be equal on the CPU (a GPU's float32
    division is within 2 ulp: 2.4e-7 off the CPU, see tests/conftest.py); its confidence bounds are
    float32 sums of O(n) terms (measured 6e-8; 1e-6 allowed). PULSE's refits amplify last-bit
    differences: on this problem 5.1e-6 in estimates, 1.2e-7 in bounds and 2.2e-5 in lambda were
    measured (levels 0 and 3, and 0 and XLA's default), so 1e-4 / 1e-5 / 1e-3 leave 20-80x headroom,
    while a wrong path (different cells) moves an estimate by about 1 / 40 = 2.5e-2 per cell. Longer
    runs amplify more: 200 demo-sized repetitions of 407 steps measured up to 3.6e-3 in estimates
    (docs/benchmarks/agreement_cpu_o2_vs_o0.json).
    """
    scores, _, V = tiny_problem(seed=5, m=6, n=40)
    config = BanditConfig(n_models=6, n_examples=40, budget=6 * 4 + 120, batch_size=4, refit_every=5,
                          record_estimates=True)
    here = {m: simulate(scores, config, m, V=V, reps=8, seed=9) for m in ("ucbe", "pulse")}
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "optimization_level" not in f]
    here_at_level_0 = (jax.config.read("jax_disable_most_optimizations")   # the suite's (tests/conftest.py)
                       or "--xla_backend_optimization_level=0" in os.environ.get("XLA_FLAGS", ""))
    other_level = "3" if here_at_level_0 else "0"
    env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_DISABLE_MOST_OPTIMIZATIONS="0",
               XLA_FLAGS=" ".join(flags + [f"--xla_backend_optimization_level={other_level}"]))
    proc = subprocess.run([sys.executable, "-c", FOLLOW_SCRIPT.format(tests=str(Path(__file__).parent))],
                          input=json.dumps({m: r.chosen.tolist() for m, r in here.items()}), env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    there = {m: {k: np.asarray(v, np.float64) for k, v in r.items()}
             for m, r in json.loads(proc.stdout.strip().splitlines()[-1]).items()}
    division = 0.0 if ON_CPU else 2.4e-7
    for method, (est, bound, lam) in {"ucbe": (division, 1e-6, 0.0), "pulse": (1e-4, 1e-5, 1e-3)}.items():
        np.testing.assert_array_equal(there[method]["chosen"], here[method].chosen)
        np.testing.assert_allclose(there[method]["step_estimates"], here[method].step_estimates, rtol=0, atol=est)
        np.testing.assert_allclose(there[method]["step_low"], here[method].step_low, rtol=0, atol=bound)
        np.testing.assert_allclose(there[method]["step_high"], here[method].step_high, rtol=0, atol=bound)
        np.testing.assert_allclose(there[method]["lam"], here[method].lam, rtol=0, atol=lam, equal_nan=True)
