"""Built-in benchmark: realistic synthetic score matrices, no files needed.

Scores are Bernoulli draws from

    P[i, j] = sigmoid(ability_i - difficulty_j + u_i . v_j)

-- a per-model ability, a per-example difficulty, and a low-rank interaction
(models good at some kinds of questions). Difficulties are spread widely, as
on real leaderboards, where most questions are almost always or almost never
answered correctly (on the Open LLM Leaderboard v2 about a quarter of the fitted
probabilities lie in (0.1, 0.9)).

Candidates are newer than the train models: besides being slightly stronger,
they carry ``novel_rank`` latent skills that no train model has (``novelty``
sets their scale). Embeddings fitted on the train split cannot represent those
skills, so predictions for candidates are biased on the questions that need
them -- as on real leaderboards, where the factorization is never exactly
right. Without novelty the matrix is exactly low-rank logistic, which flatters
predictions (and Naive-Pooling).

A *train* split of historical models provides the side information; the *candidate* pool is built as
the paper builds its difficulty subsets: the best model of a larger pool, the
model whose gap to it is closest to ``gap``, then the next best models.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from pulse_jax.fileio.data import top2_subset
from pulse_jax.errors import require


@dataclasses.dataclass(frozen=True)
class Benchmark:
    """A train split and a candidate pool over the same examples."""

    scores: np.ndarray          # (m, n) candidates' true scores
    train: np.ndarray           # (m_train, n) historical models' scores (NaN = missing)
    models: tuple[str, ...]
    train_models: tuple[str, ...]
    examples: tuple[str, ...]
    description: str = ""

    @property
    def true_means(self) -> np.ndarray:
        return self.scores.mean(axis=1)

    @property
    def best_model(self) -> int:
        return int(np.argmax(self.true_means))


def make_benchmark(seed: int = 0, *, n_models: int = 40, n_train: int = 200, n_examples: int = 1000,
                   rank: int = 4, gap: float = 0.03, pool_factor: int = 4, difficulty_spread: float = 3.5,
                   ability_spread: float = 0.7, interaction_scale: float = 2.0, novel_rank: int = 2,
                   novelty: float = 3.0) -> Benchmark:
    """Generate a train split and a candidate pool with a top-2 gap close to ``gap``.

    Reproducible from ``seed``. Candidate rows are returned in random order so
    that the best model is not the first row.
    """
    for name, value, low in (("n_models", n_models, 2), ("n_train", n_train, 1), ("n_examples", n_examples, 2),
                             ("rank", rank, 1), ("pool_factor", pool_factor, 1)):
        require(int(value) >= low, f"{name} must be >= {low}, got {value}")
    require(gap >= 0, f"gap must be >= 0, got {gap}")
    rng = np.random.default_rng(seed)
    difficulty = rng.normal(0.0, difficulty_spread, n_examples)
    v = rng.normal(0.0, interaction_scale / np.sqrt(rank), (n_examples, rank))
    # Novel skills: each helps on its own random fifth of the questions and nowhere else.
    v_novel = novelty * (rng.random((n_examples, max(novel_rank, 1))) < 0.2)

    def models(count, shift, novel):
        ability = rng.normal(shift, ability_spread, count)
        u = rng.normal(0.0, 1.0, (count, rank))
        logits = ability[:, None] - difficulty[None, :] + u @ v.T
        if novel and novel_rank > 0:
            logits += rng.random((count, v_novel.shape[1])) @ v_novel.T
        return (rng.random((count, n_examples)) < 1.0 / (1.0 + np.exp(-logits))).astype(np.float32)

    train = models(n_train, -0.3, novel=False)
    pool = models(n_models * pool_factor, 0.0, novel=True)
    chosen = top2_subset(pool.mean(axis=1), n_models, gap)
    chosen = chosen[rng.permutation(n_models)]
    scores = pool[chosen]
    means = scores.mean(axis=1)
    top = np.sort(means)[::-1]
    return Benchmark(
        scores=scores,
        train=train,
        models=tuple(f"candidate-{i:03d}" for i in range(n_models)),
        train_models=tuple(f"historical-{i:03d}" for i in range(n_train)),
        examples=tuple(f"q{j:05d}" for j in range(n_examples)),
        description=(f"synthetic benchmark (seed {seed}): {n_models} candidates x {n_examples} examples, "
                     f"{n_train} train models, rank {rank} + {novel_rank} novel, top-2 gap {top[0] - top[1]:.4f}"),
    )
