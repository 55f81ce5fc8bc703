"""Per-model mean estimators: UCB-E, PULSE, Naive-Pooling and adaptive-sampling PULSE, one file each (the interface in
`pulse_jax.estimators.base`).

An estimator is a `Estimator` -- a small set of pure functions over its
own state pytree -- that the bandit step calls at fixed points:

* ``init(sums, params)`` after the initial batch of every model;
* ``update(state, sums, pull, n_examples, params) -> (state, info)`` when
  model ``pull.model`` receives a batch (``sums`` is the bookkeeping
  *before* the batch, so everything the update takes from it is predictable);
  ``info`` is the estimator's own pytree of per-step numbers (PULSE:
  `PulseInfo`, its lambda; ``()`` for none), which the engine records
  for every step without reading its fields;
* ``refresh(state, sums, n_examples, params)`` right after a factorization refit;
* ``estimate(state, sums, params)`` the current ``mu_hat`` of every model;
* ``radius(state, sums, n_examples, delta, params)`` the half-width of the paper's
  fixed-count ``1 - delta`` interval (NaN where the method has none);
* ``proxies(state, sums, pull, n_examples, params)`` the per-draw observations of the
  pull for the anytime-valid confidence sequence (`confidence.ConfSeq`),
  ``(Y, lower, width)`` with ``E[Y_s | past]`` the mean of the model's
  still-unseen scores and ``Y_s`` in ``[lower_s, lower_s + width_s]``; ``None``
  for a method without a valid interval (Naive-Pooling).

``params`` is the estimator's own traced numbers: the pytree its ``params``
field declares (PULSE: `PulseParams`), with the run's values, so a sweep
over ``estimator.<field>`` never recompiles.

Declared capabilities, which the engine, the CLI and the reports follow
(nothing looks at an estimator's name): ``uses_predictions`` (needs example
embeddings ``V``; the engine refits the factorization for it), ``draw_weights``
(the engine draws the model's examples with probabilities proportional to
these weights instead of uniformly, and hands the estimator the
`DrawDesign` in ``pull.design``; `pulse_jax.estimators.adaptive`) and
``has_interval`` (``proxies`` is given: confidence sequences, certification,
LUCB-style rules and certified stopping are available). ``settings`` lists
the static settings as ``(name, value)`` pairs, which logs record.

All three share the `ModelSums` of observed-cell and prediction sums kept
by the bandit engine, so the statistics exist once.
"""

from pulse_jax.protocols import lazy

#: The package's names, loaded on first use (the built-ins are declared in `pulse_jax.registry.BUILT_INS`;
#: `pulse_jax.estimators.base.built_ins` loads them when a name is resolved).
_EXPORTS = {
    "pulse_jax.estimators.base": ["DrawDesign", "Estimator", "ModelSums", "Pull", "draw_design", "observed_mean", "populations", "raw_proxies"],
    "pulse_jax.estimators.ucbe": ["ucbe"],
    "pulse_jax.estimators.pulse": ["LambdaRule", "PulseInfo", "PulseParams", "PulseState", "aipw_proxies", "constant_lambda", "inverse_variance_weight", "paper_lambda", "pulse", "pulse_certify", "pulse_hedged", "pulse_theta"],
    "pulse_jax.estimators.adaptive": ["pulse_adaptive"],
    "pulse_jax.estimators.naive": ["naive_pooling"],
}

__getattr__, __dir__, __all__ = lazy(globals(), _EXPORTS)
