"""Sampling rules: which model the next batch goes to (one file each; see `pulse_jax.rules.base`).

* `ucb_index_rule` -- the paper's UCB-E index (the default);
* `lucb` -- LUCB's leader or challenger, built for certification; `lucb_top_k(k)` the same for a top-k set;
* `top_two` -- Top-Two with the empirical-best leader and transportation-cost challenger (EB-TC);
* `successive_halving` -- fixed-budget successive halving.
"""
# Imported in the order the names list (each built-in adds itself to BUILT_IN on import).
from pulse_jax.rules.base import RuleInputs, SamplingRule, ucb_index  # isort: skip
from pulse_jax.rules.ucb_index import IndexParams, ucb_index_rule  # isort: skip
from pulse_jax.rules.lucb import lucb, lucb_top_k  # isort: skip
from pulse_jax.rules.top_two import TopTwoParams, top_two  # isort: skip
from pulse_jax.rules.successive_halving import successive_halving  # isort: skip

__all__ = ["IndexParams", "RuleInputs", "SamplingRule", "TopTwoParams", "ucb_index", "ucb_index_rule", "lucb", "lucb_top_k", "top_two",
           "successive_halving"]
