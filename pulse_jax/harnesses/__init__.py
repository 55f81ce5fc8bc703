"""Evaluation harnesses in the loop: their logs in, live scoring through them, early stopping inside them.

* `pulse_jax.harnesses.lm_evaluation`: lm-evaluation-harness's per-document logs as a score matrix,
  and `LmEvalScorer`, which scores a live selection's batches through lm-eval;
* `pulse_jax.harnesses.inspect_logs`: Inspect's eval logs as a score matrix (scores, tokens), and
  `InspectScorer`, which scores batches through ``inspect_ai.eval``;
* `pulse_jax.harnesses.inspect_select`: `select_best`, the early-stopping manager that runs a
  certified selection inside ``inspect eval --model a,b,c``.

Each loads its harness only when used; ``pip install "pulse-jax[harness]"`` brings them.
"""
