"""Random choices of the bandit step: the per-step uniforms and the argmax with random ties.

Every random choice of a step takes its own uniform, ``tie_uniform(tie_key, t,
stream)``, from the repetition's tie key, the step and a stream number, so a
choice depends on the key and the step only (never on the method or on how
many other choices came before): runs of different methods or rules on one
key share their random numbers, and a NumPy reference can replay them.
Sampling rules defined outside the package take their streams from here too.
"""
from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

#: The streams of a step: the pull, the recorded best, LUCB's and Top-Two's leader and challenger,
#: and Top-Two's coin. A plug-in that needs more uses numbers from ``FIRST_FREE_STREAM`` on.
PULL, BEST, LEADER, CHALLENGER, COIN = 0, 1, 2, 3, 4
FIRST_FREE_STREAM = 5


def tie_uniform(tie_key: chex.PRNGKey, t, which: int) -> chex.Array:
    """The uniform that breaks ties at step ``t`` in the pull (``PULL``) or the recorded best (``BEST``)."""
    return jax.random.uniform(jax.random.fold_in(jax.random.fold_in(tie_key, t), which))


def random_argmax(u: chex.Array, values: chex.Array, model_order: chex.Array) -> chex.Array:
    """Argmax with ties broken uniformly at random.

    The tied models are listed in the repetition's shuffled ``model_order``
    and the ``floor(u * count)``-th is returned, so every tied model is equally
    likely and the file order of the rows never matters. One uniform per call.
    """
    v = values[model_order]
    tied = v == jnp.max(v)
    count = jnp.sum(tied)
    k = jnp.minimum(jnp.floor(u * count).astype(jnp.int32), count - 1)
    return model_order[kth_true(tied, k)]


def kth_true(mask: chex.Array, k: chex.Array, width: int = 32) -> chex.Array:
    """Position of the ``k``-th (0-based) true entry of a 1-D ``mask`` (0 when ``k < 0``).

    In blocks of ``width``: the block holding it from the blocks' counts, then the position
    inside that block. A cumulative sum over all ``m`` entries is what XLA on CPU does slowly
    (3 us per 1,000); this is one counting pass and two sums of ``m / width`` and ``width``
    entries. A cumulative count never decreases, so "the first place it exceeds k" is "how
    many places it does not"."""
    n = mask.shape[0]
    n_blocks = -(-n // width)
    blocks = jnp.pad(mask, (0, n_blocks * width - n)).reshape(n_blocks, width).astype(jnp.int32)
    through = jnp.cumsum(jnp.sum(blocks, axis=1))                  # true entries up to each block's end
    b = jnp.minimum(jnp.sum(through <= k), n_blocks - 1)
    before = jnp.where(b > 0, through[jnp.maximum(b - 1, 0)], 0)
    return b * width + jnp.sum(jnp.cumsum(blocks[b]) <= k - before)
