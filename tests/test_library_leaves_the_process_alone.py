"""A library call leaves the process as it found it: ``simulate`` and ``Selector`` do not turn on a disk
cache or change any other JAX setting (only the command line and a user who calls
``enable_compilation_cache`` do)."""
import subprocess
import sys

import pytest

CODE = r"""
import json, jax, numpy as np
import pulse_jax as pj
from jax._src import compilation_cache as jax_cache

def settings():
    values = {name: getattr(jax.config, name) for name in dir(jax.config)
              if name.startswith("jax_") and not callable(getattr(jax.config, name))}
    return {k: repr(v) for k, v in values.items()}, repr(jax_cache._cache)

before = settings()
bench = pj.make_benchmark(seed=0, n_models=4, n_examples=40, n_train=10)
config = pj.BanditConfig(n_models=4, n_examples=40, budget=4 * 4 + 40, batch_size=4, refit_every=3)
V = pj.fit_example_embeddings(bench.train, rank=2)
pj.simulate(bench.scores, config, "pulse", V=V, reps=2, progress=False)
from pulse_jax.live import Selector, run
selector = Selector(list(bench.models), 40, 40, method="ucbe", batch_size=4)
run(lambda model, ids: bench.scores[list(bench.models).index(model), ids].tolist(), selector)
after = settings()
changed = sorted(k for k in set(before[0]) | set(after[0]) if before[0].get(k) != after[0].get(k))
print(json.dumps({"changed": changed, "cache_before": before[1], "cache_after": after[1]}))
"""


@pytest.mark.integration   # a fresh process compiling a run (20 s): the second test command
def test_simulate_and_a_selector_leave_jax_s_configuration_as_they_found_it(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PULSE_JAX_CACHE": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=600, env=env,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    import json

    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["changed"] == [] and result["cache_before"] == result["cache_after"] == "None", result
    assert not (tmp_path / "cache").exists() and not (tmp_path / ".cache").exists()


def test_importing_the_package_s_modules_registers_nothing_at_exit_and_loads_no_jax():
    """Importing the Inspect harness (or any front door) registers no exit handler and imports no JAX: the
    harness's one process-wide state, its selections, registers its handler when the first is made."""
    code = ("import atexit, logging, sys\n"
            "n = atexit._ncallbacks()\n"
            "import pulse_jax.harnesses.inspect_select, pulse_jax.live, pulse_jax.cli.app, pulse_jax.registry\n"
            "print(atexit._ncallbacks() - n, 'jax' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["0", "False"], out.stdout
