"""Inputs and outputs: score matrices and embeddings from files (`data`),
evaluation-harness logs and live scorers (`harness`), and the provenance record
every output folder carries (`provenance`)."""
