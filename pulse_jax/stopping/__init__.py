"""Stopping rules: when a repetition stops spending (one file each; see `pulse_jax.stopping.base`).

* `spend_budget` -- fixed budget (the default);
* `when_certified` -- fixed confidence: stop at the first certification;
* `epsilon_good` -- stop once a model is certified within ``epsilon`` of the best;
* `top_k` -- stop once the k best models are certified as a set;
* `tie_group` -- stop once the leader's group of inseparable models is small enough
  (`groups` splits every model into ordered groups).
"""
from pulse_jax.stopping.base import StopInputs, StoppingRule
from pulse_jax.stopping.budget import spend_budget
from pulse_jax.stopping.certified import when_certified
from pulse_jax.stopping.epsilon_good import EpsilonParams, epsilon_good
from pulse_jax.stopping.top_k import top_k
from pulse_jax.stopping.tie_group import TieGroupParams, groups, leader_group, tie_group

__all__ = ["EpsilonParams", "StopInputs", "StoppingRule", "TieGroupParams", "epsilon_good", "groups", "leader_group",
           "spend_budget", "tie_group", "top_k", "when_certified"]
