"""Sampling rules: which model the next batch goes to (one file each; see `pulse_jax.rules.base`).

* `ucb_index_rule` -- the paper's UCB-E index (the default);
* `lucb` -- LUCB's leader or challenger, built for certification; `lucb_top_k(k)` the same for a top-k set;
* `top_two` -- Top-Two with the empirical-best leader and transportation-cost challenger (EB-TC);
* `successive_halving` -- fixed-budget successive halving;
* `focus` -- the widest interval per unit of cost among the models the stopping rule waits on.

Given costs (``inputs.cost``), the rules that compare two models weigh them by price
(`cost_share`): Top-Two's coin and LUCB's "wider interval"; equal costs change nothing.
"""

from pulse_jax.protocols import lazy

#: The package's names, loaded on first use (the built-ins are declared in `pulse_jax.registry.BUILT_INS`;
#: `pulse_jax.rules.base.built_ins` loads them when a name is resolved).
_EXPORTS = {
    "pulse_jax.rules.base": ["RuleInputs", "SamplingRule", "cost_share", "cost_weighted_width", "ucb_index"],
    "pulse_jax.rules.ucb_index": ["IndexParams", "ucb_index_rule"],
    "pulse_jax.rules.lucb": ["lucb", "lucb_top_k"],
    "pulse_jax.rules.top_two": ["TopTwoParams", "top_two"],
    "pulse_jax.rules.successive_halving": ["successive_halving"],
    "pulse_jax.rules.focus": ["focus"],
}

__getattr__, __dir__, __all__ = lazy(globals(), _EXPORTS)
