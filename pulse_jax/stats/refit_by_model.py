"""The refit of ``U`` on a CPU, a few whole models at a time with every epoch done while their cells
are in cache.

`pulse_jax.stats.factorization.refit_rows_on_blocks` takes ``epochs`` full-batch Adam steps, each a
pass over every observed cell: the ``V`` row of every cell is gathered again at every epoch, and the
cells of a repetition (5 MB at 40,000 cells, rank 32) do not fit a core's cache. The steps need not
be taken that way. With ``V`` frozen, the objective is a sum over models of a term in ``u_i`` alone

    L(U) = sum_i [ (1/|Omega|) sum_{j in Omega_i} BCE(S_ij, sigmoid(u_i . v_j)) + lam/(2(m+n)) ||u_i||^2
                   + (kappa/(2|Omega|)) (u_i - mu)^T P (u_i - mu) ],

(``|Omega|`` is a constant of the refit), and Adam is elementwise: its moments, its bias correction
and its update of ``u_i`` read only ``u_i``'s gradient and the step count, which every row shares.
So the rows of any group of models, stepped ``epochs`` times on their own cells alone, end exactly
where the full-batch steps leave them. Here the observed blocks are sorted by model; a chunk is a
run of consecutive models whose blocks fit ``capacity`` blocks; its ``V`` rows are gathered once and
all ``epochs`` steps run on them while they are in cache. The numbers are the full-batch refit's up
to float summation order.

Two cases couple the rows, and there `refit_rows_in_cache` takes the full-batch refit: the prior
pulls towards the rows' own mean (``shrink > 0`` without a `RowPrior`: ``ubar`` moves with every
row), and a model with more observed blocks than a chunk holds.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from pulse_jax.stats.factorization import (PRECISION, CellBlocks, FilledPrefix, FitSettings, chunk_bytes,
                                           prior_gradient, refit_rows_on_blocks)


def _one_group(blocks: tuple[CellBlocks, ...], width: int) -> CellBlocks:
    """Every group's blocks as blocks of ``width`` cells, in one group (a wider block is split into
    several of the same model, padded with cells that are not valid)."""
    parts = []
    for b in blocks:
        K, W = b.cols.shape
        pad = -W % width
        widen = lambda a, v: jnp.pad(a, ((0, 0), (0, pad)), constant_values=v)   # noqa: E731
        cols, scores, valid = widen(b.cols, 0), widen(b.scores, 0.0), widen(b.valid, False)
        split = (W + pad) // width
        parts.append(CellBlocks(jnp.repeat(b.rows, split), cols.reshape(K * split, width),
                                scores.reshape(K * split, width), valid.reshape(K * split, width)))
    return jax.tree_util.tree_map(lambda *a: jnp.concatenate(a), *parts)


def capacity(n_examples: int, width: int, rank: int, n_blocks: int) -> int:
    """Blocks per chunk: what `chunk_bytes` holds of ``V`` rows, and at least two models evaluated on
    every example (``2 ceil(n / width) + 2`` blocks), so a chunk rarely runs half empty."""
    budget = (chunk_bytes("cpu") or 0) // (width * rank * 4)
    return max(1, min(n_blocks, max(budget, 2 * (-(-n_examples // width)) + 2)))


def refit_rows_by_model(U, V, blocks: tuple[CellBlocks, ...], n_examples: int, settings: FitSettings):
    """`refit_rows_on_blocks` from a fresh optimizer state, a chunk of whole models at a time (see the
    module's docstring). The caller guarantees that the rows decouple (``settings.shrink == 0`` or a
    ``settings.row_prior``) and that no model has more blocks than `capacity`."""
    m, r = U.shape
    width = blocks[-1].cols.shape[1]
    group = _one_group(blocks, width)
    cap = capacity(n_examples, width, r, group.rows.shape[0])
    has_cells = jnp.any(group.valid, axis=1)
    # Model i's blocks with cells are sorted blocks starts[i] .. starts[i + 1] - 1; the empty ones last.
    starts = jnp.concatenate([jnp.zeros(1, jnp.int32),
                              jnp.cumsum(jax.ops.segment_sum(has_cells.astype(jnp.int32), group.rows, m))])
    order = jnp.argsort(jnp.where(has_cells, group.rows, m), stable=True)
    group = jax.tree_util.tree_map(lambda a: jnp.concatenate([a[order], jnp.zeros((cap,) + a.shape[1:], a.dtype)]),
                                   group)
    count = jnp.maximum(jnp.sum(group.valid), 1).astype(U.dtype)
    decay = settings.lam / (m + n_examples)
    padded = jnp.concatenate([U, jnp.zeros((cap, r), U.dtype)])

    def chunk(carry):
        first, padded = carry
        # The models first .. last - 1 whose blocks fit the chunk (at least one: the caller checked
        # that each model's do; the floor keeps the loop finite should a vmap run this branch anyway).
        last = jnp.minimum(jnp.searchsorted(starts, starts[first] + cap, side="right") - 1, jnp.minimum(first + cap, m))
        last = jnp.maximum(last, first + 1)
        part = jax.tree_util.tree_map(lambda a: jax.lax.dynamic_slice_in_dim(a, starts[first], cap, 0), group)
        inside = jnp.arange(cap) < starts[last] - starts[first]
        local = jnp.where(inside, part.rows - first, 0)
        valid = part.valid & inside[:, None]
        rows_of_V = V[part.cols]                          # gathered once for every epoch
        own = jnp.arange(cap) < last - first

        def gradient(u):
            logits = jnp.einsum("klr,kr->kl", rows_of_V, u[local], precision=PRECISION)
            residual = jnp.where(valid, jax.nn.sigmoid(logits) - part.scores, 0.0)
            data = jax.ops.segment_sum(jnp.einsum("klr,kl->kr", rows_of_V, residual, precision=PRECISION), local, cap)
            prior = 0.0 if settings.row_prior is None else prior_gradient(u, settings)
            return (data + prior) / count + decay * u

        def step(_, state):
            u, opt_state = state
            updates, opt_state = settings.optimizer.update(gradient(u), opt_state, u)
            return optax.apply_updates(u, updates), opt_state

        before = jax.lax.dynamic_slice_in_dim(padded, first, cap, 0)
        after, _ = jax.lax.fori_loop(0, settings.epochs, step, (before, settings.optimizer.init(before)))
        return last, jax.lax.dynamic_update_slice_in_dim(padded, jnp.where(own[:, None], after, before), first, 0)

    _, padded = jax.lax.while_loop(lambda carry: carry[0] < m, chunk, (jnp.int32(0), padded))
    return padded[:m]


def refit_rows_in_cache(U, V, blocks: tuple[CellBlocks, ...], n_examples: int, settings: FitSettings,
                        filled: FilledPrefix | None = None):
    """`refit_rows_on_blocks` (from a fresh state of an elementwise optimizer such as Adam), by
    `refit_rows_by_model` wherever the rows decouple and every model's blocks fit a chunk (decided on
    the values, at each call), by the full-batch refit elsewhere."""
    m, r = U.shape
    width = blocks[-1].cols.shape[1]
    group = _one_group(blocks, width)
    per_model = jax.ops.segment_sum(jnp.any(group.valid, axis=1).astype(jnp.int32), group.rows, m)
    fits = jnp.max(per_model) <= capacity(n_examples, width, r, group.rows.shape[0])
    decoupled = fits if settings.row_prior is not None else fits & (jnp.asarray(settings.shrink) == 0)
    return jax.lax.cond(decoupled, lambda u: refit_rows_by_model(u, V, blocks, n_examples, settings),
                        lambda u: refit_rows_on_blocks(u, V, blocks, n_examples, settings, filled=filled), U)
