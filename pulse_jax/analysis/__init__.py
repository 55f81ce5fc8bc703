"""Analysis of simulation results: every metric (:mod:`~pulse_jax.analysis.metrics`), the figures
(:mod:`~pulse_jax.analysis.plotting`) and the written reports (:mod:`~pulse_jax.analysis.report`)."""
