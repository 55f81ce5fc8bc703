"""The statistics the engine and the plug-ins compute with: drawing without replacement
(`without_replacement`), random tie-breaking (`ties`), confidence sequences and certificates
(`confidence`), the low-rank logistic factorization (`factorization`, and its refit a few models at a time, `refit_by_model`) and seeds (`seeds`).
Nothing here imports the engine or a plug-in.
"""
