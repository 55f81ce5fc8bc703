"""Repetitions sharded over several devices give exactly the single-device results."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from conftest import tiny_problem

from pulse_jax.bandit import BanditConfig
from pulse_jax.simulate import simulate

SCRIPT = """
import json, sys
import jax
sys.path.insert(0, {tests!r})
from conftest import tiny_problem
from pulse_jax.bandit import BanditConfig
from pulse_jax.simulate import simulate
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
