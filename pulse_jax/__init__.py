"""pulse-jax: valid best-model identification with low-rank predictions (PULSE), in JAX.

Public API::

    import pulse_jax as pj
    pj.simulate(scores, pj.BanditConfig(...), "pulse", V=V, params={"rule.exploration": 0.5})
    pj.simulate(scores, config, pj.Plugins("pulse", rule="top_two", stop="certified"), V=V)
    pj.sweep(scores, config, "pulse", {"exploration": [0.25, 1, 4]}, V=V, reps=200)
    pj.Selector(models, examples, budget, train=history)   # live selection, ask/tell

Plug-ins: `Estimator` (`pulse_jax.estimators`), `SamplingRule`
(`pulse_jax.rules`) and `StoppingRule` (`pulse_jax.stopping`), a run's three together a
`Plugins`; names resolve in `pulse_jax.registry`.

Names load on first use, so ``import pulse_jax.live`` brings in live selection
only (neither the simulation driver nor matplotlib).
"""
from importlib import import_module as _import_module
from importlib import metadata as _metadata

_EXPORTS = {
    "pulse_jax.engine": ["BanditConfig", "Kernel", "Plugins", "RunResult", "build_kernel", "make_run"],
    "pulse_jax.stats.confidence": ["bernstein_serfling_radius", "certify", "freedman_radius"],
    "pulse_jax.stats.information_floor": ["information_floor"],
    "pulse_jax.fileio.data": ["ScoreMatrix", "load", "load_csv", "load_npz"],
    "pulse_jax.errors": ["PulseInputError"],
    "pulse_jax.protocols": ["Range"],
    "pulse_jax.estimators": ["Estimator", "PulseParams", "constant_lambda", "naive_pooling", "paper_lambda", "pulse", "pulse_certify",
                             "pulse_adaptive", "pulse_hedged", "ucbe"],
    "pulse_jax.stats.factorization": ["PAPER_INIT_REFIT", "PAPER_REFIT", "RowPrior", "adam_settings",
                                "fit_example_embeddings", "fit_train_factors", "row_prior_from_rows"],
    "pulse_jax.engine.params": ["BanditParams", "RunParams"],
    "pulse_jax.rules": ["IndexParams", "RuleInputs", "SamplingRule", "TopTwoParams", "focus", "lucb", "lucb_top_k",
                        "successive_halving",
                        "top_two", "ucb_index_rule"],
    "pulse_jax.stopping": ["EpsilonParams", "StopInputs", "StoppingRule", "TieGroupParams", "cheapest_within",
                           "cost_front", "epsilon_good",
                           "spend_budget", "tie_group", "top_k", "when_certified"],
    "pulse_jax.live.plan": ["Plan"],
    "pulse_jax.live.report": ["Report"],
    "pulse_jax.harnesses.inspect_select": ["select_best"],
    "pulse_jax.live.runner": ["EvaluationError", "run"],
    "pulse_jax.live.selector": ["Request", "Selector"],
    "pulse_jax.simulation": ["SimulationResult", "simulate"],
    "pulse_jax.compilation_cache": ["enable_compilation_cache"],
    "pulse_jax.sweeps": ["SweepResult", "sweep"],
    "pulse_jax.synthetic": ["Benchmark", "make_benchmark"],
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}

try:
    __version__ = _metadata.version("pulse-jax")
except _metadata.PackageNotFoundError:   # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = sorted(_WHERE)


def __getattr__(name):
    if name in _WHERE:
        value = getattr(_import_module(_WHERE[name]), name)
        globals()[name] = value   # later look-ups skip this hook
        return value
    raise AttributeError(f"module 'pulse_jax' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_WHERE))

