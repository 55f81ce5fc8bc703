"""Stopping rules: when a repetition stops spending (one file each; see `pulse_jax.stopping.base`).

* `spend_budget` -- fixed budget (the default);
* `when_certified` -- fixed confidence: stop at the first certification;
* `epsilon_good` -- stop once a model is certified within ``epsilon`` of the best;
* `top_k` -- stop once the k best models are certified as a set;
* `tie_group` -- stop once the leader's group of inseparable models is small enough
  (`groups` splits every model into ordered groups);
* `cheapest_within` -- stop once the cheapest model within ``epsilon`` of the best is certified;
* `cost_front` -- stop once the cost-accuracy front (within ``epsilon``) is certified.
"""

from pulse_jax.protocols import lazy

#: The package's names, loaded on first use (the built-ins are declared in `pulse_jax.registry.BUILT_INS`;
#: `pulse_jax.stopping.base.built_ins` loads them when a name is resolved).
_EXPORTS = {
    "pulse_jax.stopping.base": ["StopInputs", "StoppingRule"],
    "pulse_jax.stopping.budget": ["spend_budget"],
    "pulse_jax.stopping.certified": ["when_certified"],
    "pulse_jax.stopping.epsilon_good": ["EpsilonParams", "epsilon_good"],
    "pulse_jax.stopping.top_k": ["top_k"],
    "pulse_jax.stopping.tie_group": ["TieGroupParams", "groups", "leader_group", "tie_group"],
    "pulse_jax.stopping.cost": ["cheapest_within", "cost_front"],
}

__getattr__, __dir__, __all__ = lazy(globals(), _EXPORTS)
