"""Sampling without replacement in O(B + n/32) per draw, with no per-repetition O(m n) set-up.

Each model's observed examples are a packed bit mask, ``W = ceil(n / 32)``
``uint32`` words per model (1.5 MB per repetition at 1,000 x 12,032). A draw
of ``B'`` examples from model ``i``'s ``r`` unobserved ones is exact:

1. **Fisher-Yates choices.** ``t_k`` uniform on ``[0, r - k)`` for slots
   ``k < B``. The partial Fisher-Yates shuffle of the ranks ``[0, r)`` swaps
   positions ``k`` and ``j_k = k + t_k`` for ``k = 0, 1, ...``; its first
   ``B'`` positions are then a uniformly random ordered ``B'``-subset of the
   ranks, for every ``B' <= B`` (Knuth, TAOCP vol. 2, 3.4.2, Algorithm P).
2. **Resolution without a loop** (`fisher_yates_prefix`). The shuffle
   only touches positions ``< B`` and the ``j_k``, so the value it leaves at
   position ``k`` follows from the choices alone: ``j_k`` itself if no earlier
   slot chose ``j_k``, else whatever the latest such slot ``k'`` moved there,
   which is the value that was at position ``k'`` at step ``k'``. That value
   is found by following "who last chose this position" links back to a
   position nobody chose, by pointer doubling over ``B x B`` comparisons.
   ``log2 B`` rounds of vector work instead of ``B`` dependent swaps, which
   is what keeps the step cheap under ``vmap`` and on accelerators.
3. **Rank to example** (`kth_unobserved`). The rank ``q`` names the
   ``q``-th unobserved example in index order: a prefix count of zero bits
   over the ``W`` words finds the word, a 5-step binary search with popcounts
   finds the bit.

Given everything observed so far, the batch is therefore a uniformly random
``B'``-subset of the unobserved examples (Lemma 1's sampling assumption). The
choices are drawn from ``fold_in(fold_in(key, i), N_i)``: they depend only on
the repetition's key, the model and how many of its examples were seen, so
methods run with the same key see the same batches (common random numbers).
"""
from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

WORD = 32


def n_words(n_examples: int) -> int:
    return -(-n_examples // WORD)


def empty_mask(n_models: int, n_examples: int) -> chex.Array:
    """``(m, W)`` uint32 with nothing observed; the padding bits past ``n`` are set (never drawn)."""
    bits = jnp.arange(n_words(n_examples) * WORD, dtype=jnp.int32).reshape(-1, WORD)
    padding = jnp.sum(jnp.where(bits >= n_examples, jnp.left_shift(jnp.uint32(1), bits.astype(jnp.uint32) % WORD),
                                jnp.uint32(0)), axis=1, dtype=jnp.uint32)
    return jnp.broadcast_to(padding, (n_models, padding.shape[0]))


def pack(flags: chex.Array) -> chex.Array:
    """``(..., n)`` booleans -> ``(..., W)`` packed words (bit ``j % 32`` of word ``j // 32``)."""
    n = flags.shape[-1]
    padded = jnp.pad(flags, [(0, 0)] * (flags.ndim - 1) + [(0, n_words(n) * WORD - n)])
    bits = padded.reshape(flags.shape[:-1] + (-1, WORD)).astype(jnp.uint32)
    return jnp.sum(jnp.left_shift(bits, jnp.arange(WORD, dtype=jnp.uint32)), axis=-1, dtype=jnp.uint32)


def unpack(words: chex.Array, n_examples: int) -> chex.Array:
    """``(..., W)`` packed words -> ``(..., n)`` booleans (True = observed)."""
    bits = jnp.right_shift(words[..., :, None], jnp.arange(WORD, dtype=jnp.uint32)) & jnp.uint32(1)
    return bits.reshape(words.shape[:-1] + (-1,))[..., :n_examples].astype(bool)


def mark(row: chex.Array, examples: chex.Array, valid: chex.Array) -> chex.Array:
    """Set the bits of the ``valid`` ``examples`` (distinct, unobserved) in one model's ``(W,)`` row."""
    bit = jnp.left_shift(jnp.uint32(1), examples.astype(jnp.uint32) % WORD)
    # The bits are distinct and were clear, so adding them is OR-ing them.
    return row.at[examples // WORD].add(jnp.where(valid, bit, jnp.uint32(0)))


def draw_key(examples_key: chex.PRNGKey, i: chex.Array, n_obs_i: chex.Array) -> chex.PRNGKey:
    return jax.random.fold_in(jax.random.fold_in(examples_key, i), n_obs_i)


def fisher_yates_choices(key: chex.PRNGKey, remaining: chex.Array, slots: int) -> chex.Array:
    """``t_k`` uniform on ``[0, remaining - k)`` for ``k < slots`` (0 where that range is empty)."""
    span = jnp.maximum(remaining - jnp.arange(slots, dtype=jnp.int32), 1)
    return jax.random.randint(key, (slots,), 0, span, dtype=jnp.int32)


def fisher_yates_prefix(choices: chex.Array) -> chex.Array:
    """Values at positions ``0..B-1`` after swapping ``k <-> k + choices[k]`` for ``k = 0..B-1`` on the identity.

    Exact for every prefix: entry ``k`` depends on ``choices[:k + 1]`` only.
    """
    B = choices.shape[0]
    slot = jnp.arange(B, dtype=jnp.int32)
    target = slot + choices                                            # j_k
    earlier = slot[None, :] < slot[:, None]                            # [k, k']: k' < k
    # latest earlier slot that chose the same target as slot k (-1: none)
    same = (target[:, None] == target[None, :]) & earlier
    last_same = jnp.max(jnp.where(same, slot[None, :], -1), axis=1)
    # latest earlier slot that chose position s (-1: none): who moved a value into s
    into = (target[None, :] == slot[:, None]) & earlier
    parent = jnp.max(jnp.where(into, slot[None, :], -1), axis=1)
    parent = jnp.where(parent < 0, slot, parent)
    for _ in range(max(1, (B - 1).bit_length())):                      # pointer doubling to the root
        parent = parent[parent]
    # position k' held value root(k') when slot k' swapped it away.
    return jnp.where(last_same < 0, target, parent[jnp.maximum(last_same, 0)])


def fisher_yates_prefix_in_order(choices: chex.Array) -> chex.Array:
    """`fisher_yates_prefix` computed slot by slot, with ``O(B)`` memory instead of ``B x B``.

    Before slot ``k`` swaps, a position ``p >= k`` holds what the latest earlier slot that chose
    ``p`` moved there (the value that slot found at its own position), or ``p`` itself when none
    did: positions below ``k`` are never chosen again (``j_k >= k``). So one pass over the slots,
    keeping what each slot moved, gives the same values as the pointer doubling. Many draws at
    once (every model's initial batches, under ``vmap`` over models and repetitions) then never
    build ``B x B`` intermediates per model (two ``s32[R, m, B, B]`` arrays, 410 MB at
    100 x 250 x 64 x 64); a single draw keeps the loop-free version, which adds no loop to a step.
    """
    B = choices.shape[0]
    slot = jnp.arange(B, dtype=jnp.int32)
    target = slot + choices

    def value_at(position, k, moved):
        latest = jnp.max(jnp.where((slot < k) & (target == position), slot, -1))
        return jnp.where(latest < 0, position, moved[jnp.maximum(latest, 0)])

    def one_slot(k, carry):
        out, moved = carry
        return out.at[k].set(value_at(target[k], k, moved)), moved.at[k].set(value_at(k, k, moved))

    zeros = jnp.zeros(B, jnp.int32)
    return jax.lax.fori_loop(0, B, one_slot, (zeros, zeros))[0]


def _select_bit(x: chex.Array, q: chex.Array) -> chex.Array:
    """Index of the ``q``-th (0-based) set bit of the uint32 ``x`` (``q < popcount(x)``)."""
    pos = jnp.zeros_like(q)
    for width in (16, 8, 4, 2, 1):
        low = jax.lax.population_count(x & jnp.uint32((1 << width) - 1)).astype(q.dtype)
        high = q >= low
        q = jnp.where(high, q - low, q)
        x = jnp.where(high, jnp.right_shift(x, jnp.uint32(width)), x)
        pos = pos + jnp.where(high, width, 0)
    return pos


def kth_unobserved(row: chex.Array, ranks: chex.Array) -> chex.Array:
    """The example index of the ``q``-th unobserved example (index order) of a ``(W,)`` row, per rank ``q``."""
    free = jnp.bitwise_not(row)
    count = jax.lax.population_count(free).astype(jnp.int32)
    before = jnp.cumsum(count) - count                                  # free bits in earlier words
    word = jnp.clip(jnp.searchsorted(before, ranks, side="right") - 1, 0, row.shape[0] - 1)
    return word * WORD + _select_bit(free[word], ranks - before[word])


def draw(key: chex.PRNGKey, row: chex.Array, n_obs_i: chex.Array, n_examples, slots: int,
         resolve=fisher_yates_prefix) -> chex.Array:
    """``slots`` example indices; for every ``B' <= slots`` the first ``B'`` are a uniform ``B'``-subset
    of the unobserved examples of this ``(W,)`` row (entries past the unobserved count are meaningless).

    ``n_examples`` is the model's population: the examples it has a score for. Examples it has
    none for are set bits of ``row`` from the start, so they are never drawn. ``resolve``: how the
    shuffle's choices become ranks (`fisher_yates_prefix` or `fisher_yates_prefix_in_order`, which
    give the same ranks)."""
    remaining = n_examples - n_obs_i
    ranks = resolve(fisher_yates_choices(key, remaining, slots))
    return kth_unobserved(row, jnp.minimum(ranks, jnp.maximum(remaining - 1, 0)))


def weighted_draw(key: chex.PRNGKey, weights: chex.Array, slots: int) -> chex.Array:
    """``slots`` examples drawn one after another without replacement, each with probability
    proportional to ``weights`` (``(n,)``, >= 0; 0 = not drawable) among those not drawn yet.

    The Gumbel-top-k trick: the ``slots`` largest ``log w_j + G_j`` (``G_j`` i.i.d. standard
    Gumbel), in decreasing order, are distributed exactly as such sequential draws (the
    Plackett-Luce model; Yellott 1977). Slots past the number of drawable examples hold undrawable
    ones; the caller's ``valid`` mask covers them.
    """
    keys = jnp.where(weights > 0, jnp.log(jnp.where(weights > 0, weights, 1.0)), -jnp.inf)
    _, examples = jax.lax.top_k(keys + jax.random.gumbel(key, weights.shape), slots)
    return examples.astype(jnp.int32)
