"""Two JAX processes under ``jax.distributed`` (CPU, gloo collectives) give one process's results.

Each process owns one CPU device; ``simulate`` shards the repetitions over the
two-device mesh spanning both processes and gathers every repetition back to
every process. The two workers talk over 127.0.0.1 on a free port.
"""
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import tiny_problem

from pulse_jax import BanditConfig
from pulse_jax.simulation import simulate

WORKER = textwrap.dedent("""
    import sys
    import jax
    import numpy as np
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    port, pid, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=pid)
    sys.path.insert(0, sys.argv[4])
    from conftest import tiny_problem
    from pulse_jax import BanditConfig
    from pulse_jax.simulation import simulate
    scores, _, V = tiny_problem(seed=0, m=5, n=40)
    config = BanditConfig(n_models=5, n_examples=40, budget=80, batch_size=4, refit_every=5)
    res = simulate(scores, config, "pulse", V=V, reps=6, seed=3)
    assert jax.process_count() == 2 and jax.device_count() == 2
    np.savez(out, chosen=res.chosen, best=res.best, estimates=res.estimates, cs_low=res.cs_low)
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.integration   # subprocesses for seconds each: the second test command
def test_two_processes_equal_one(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    port = _free_port()
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(Path(__file__).parents[1])}
    # One CPU device per process (no forced device count); the suite's other flags stay, as in this process.
    env["XLA_FLAGS"] = " ".join(f for f in env.get("XLA_FLAGS", "").split() if "device_count" not in f)
    tests_dir = str(Path(__file__).parent)
    procs = [subprocess.Popen([sys.executable, str(script), str(port), str(i), str(tmp_path / f"p{i}.npz"), tests_dir],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(2)]
    try:
        logs = [p.communicate(timeout=240)[0] for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail("the two jax.distributed workers did not finish within 240 s")
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log[-2000:]
    scores, _, V = tiny_problem(seed=0, m=5, n=40)
    config = BanditConfig(n_models=5, n_examples=40, budget=80, batch_size=4, refit_every=5)
    one = simulate(scores, config, "pulse", V=V, reps=6, seed=3)
    for i in range(2):   # every process holds every repetition
        got = np.load(tmp_path / f"p{i}.npz")
        np.testing.assert_array_equal(got["chosen"], one.chosen)
        np.testing.assert_array_equal(got["best"], one.best)
        np.testing.assert_allclose(got["estimates"], one.estimates, atol=1e-6)
        np.testing.assert_allclose(got["cs_low"], one.cs_low, atol=1e-6)
