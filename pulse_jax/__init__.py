"""pulse-jax: valid best-model identification with low-rank predictions (PULSE), in JAX.

Public API::

    from pulse_jax import BanditConfig, simulate, make_run, make_benchmark
"""
from pulse_jax.bandit import BanditConfig, RunResult, make_run, reset, step
from pulse_jax.confidence import bernstein_serfling_radius, freedman_radius
from pulse_jax.data import ScoreMatrix, load, load_csv, load_npz
from pulse_jax.errors import PulseInputError
from pulse_jax.estimators import Estimator, naive_pooling, paper_lambda, pulse, ucbe
from pulse_jax.factorization import PAPER_INIT_REFIT, PAPER_REFIT, adam_settings, fit_example_embeddings
from pulse_jax.simulate import SimulationResult, simulate
from pulse_jax.synthetic import Benchmark, make_benchmark

__version__ = "0.1.0"

__all__ = [
    "BanditConfig", "RunResult", "make_run", "reset", "step",
    "freedman_radius", "bernstein_serfling_radius",
    "ScoreMatrix", "load", "load_csv", "load_npz",
    "PulseInputError",
    "Estimator", "ucbe", "pulse", "naive_pooling", "paper_lambda",
    "PAPER_INIT_REFIT", "PAPER_REFIT", "adam_settings", "fit_example_embeddings",
    "SimulationResult", "simulate",
    "Benchmark", "make_benchmark",
]
