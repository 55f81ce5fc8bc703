"""Inputs and outputs: score matrices and embeddings from files (:mod:`~pulse_jax.io.data`),
evaluation-harness logs and live scorers (:mod:`~pulse_jax.io.harness`), and the provenance record
every output folder carries (:mod:`~pulse_jax.io.provenance`)."""
