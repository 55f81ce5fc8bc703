"""pulse-jax: valid best-model identification with low-rank predictions (PULSE), in JAX.

Public API::

    import pulse_jax as pj
    pj.simulate(scores, pj.BanditConfig(...), "pulse", V=V, params=pj.BanditParams(exploration=0.5))
    pj.sweep(scores, config, "pulse", {"exploration": [0.25, 1, 4]}, V=V, reps=200)
    pj.Selector(models, examples, budget, train=history)   # live selection, ask/tell
"""
from importlib import metadata as _metadata

from pulse_jax.bandit import BanditConfig, Kernel, RunResult, build_kernel, make_run
from pulse_jax.confidence import bernstein_serfling_radius, certify, freedman_radius
from pulse_jax.data import ScoreMatrix, load, load_csv, load_npz
from pulse_jax.errors import PulseInputError
from pulse_jax.estimators import Estimator, constant_lambda, naive_pooling, paper_lambda, pulse, ucbe
from pulse_jax.factorization import PAPER_INIT_REFIT, PAPER_REFIT, adam_settings, fit_example_embeddings
from pulse_jax.params import BanditParams
from pulse_jax.report import Report
from pulse_jax.runner import EvaluationError, run
from pulse_jax.selector import Request, Selector
from pulse_jax.simulate import SimulationResult, simulate
from pulse_jax.sweep import SweepResult, sweep
from pulse_jax.synthetic import Benchmark, make_benchmark

try:
    __version__ = _metadata.version("pulse-jax")
except _metadata.PackageNotFoundError:   # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "BanditConfig", "BanditParams", "Kernel", "RunResult", "build_kernel", "make_run",
    "freedman_radius", "bernstein_serfling_radius", "certify",
    "ScoreMatrix", "load", "load_csv", "load_npz",
    "PulseInputError",
    "Estimator", "ucbe", "pulse", "naive_pooling", "paper_lambda", "constant_lambda",
    "PAPER_INIT_REFIT", "PAPER_REFIT", "adam_settings", "fit_example_embeddings",
    "SimulationResult", "simulate", "SweepResult", "sweep",
    "Selector", "Request", "Report", "run", "EvaluationError",
    "Benchmark", "make_benchmark",
]
