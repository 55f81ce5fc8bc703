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
where the full-batch steps leave them, and different groups may be stepped differently:

* models with at most `capacity` blocks (a cache's worth of ``V`` rows): the blocks sorted by model,
  a chunk is a run of consecutive such models; its ``V`` rows are gathered once and all ``epochs``
  steps run on them while they are in cache;
* the few models with more (those evaluated on most examples): ``epochs`` full-batch steps over
  their blocks alone, gathered a cache-sized piece at a time at every epoch, as the full-batch
  refit does.

The numbers are the full-batch refit's up to float summation order. Where a prior pulls towards the
rows' own mean (``shrink > 0`` without a `RowPrior`: ``ubar`` moves with every row) the rows couple,
and `refit_rows_in_cache` takes the full-batch refit.
"""
from __future__ import annotations

from typing import NamedTuple

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


#: Bytes of ``V`` rows a chunk of models holds: within a core's 2 MiB L2, with room for the rest.
CACHE_BYTES = 512 * 1024


def capacity(width: int, rank: int, n_blocks: int, n_examples: int) -> int:
    """Blocks per chunk of models: `CACHE_BYTES` of gathered ``V`` rows, and no more than two models
    evaluated on every example hold (a chunk computes on all its blocks, filled or not: on a small
    matrix a chunk as large as the cache would be mostly empty early in a run)."""
    return max(1, min(n_blocks, CACHE_BYTES // (width * rank * 4), 2 * (-(-n_examples // width)) + 2))


def piece(width: int, rank: int, n_blocks: int) -> int:
    """Blocks a streamed epoch visits at a time: `chunk_bytes` of ``V`` rows, as the full-batch refit."""
    return max(1, min(n_blocks, (chunk_bytes("cpu") or 0) // (width * rank * 4)))


def _sorted_blocks(group: CellBlocks, small, pad: int):
    """``group`` sorted: the blocks with cells of small models by row, then those of the others by
    row, then the empty blocks; ``pad`` empty blocks added at the end (no slice runs past it)."""
    m = small.shape[0]
    has_cells = jnp.any(group.valid, axis=1)
    key = jnp.where(has_cells, jnp.where(small[group.rows], group.rows, m + group.rows), 2 * m)
    order = jnp.argsort(key, stable=True)
    return jax.tree_util.tree_map(lambda a: jnp.concatenate([a[order], jnp.zeros((pad,) + a.shape[1:], a.dtype)]),
                                  group)


def _data_gradient(u, G, rows, valid, scores, n_rows):
    """``sum over cells of (sigmoid(u_row . v) - score) v`` per row, for blocks whose ``V`` rows are ``G``."""
    logits = jnp.einsum("klr,kr->kl", G, u[rows], precision=PRECISION)
    residual = jnp.where(valid, jax.nn.sigmoid(logits) - scores, 0.0)
    return jax.ops.segment_sum(jnp.einsum("klr,kl->kr", G, residual, precision=PRECISION), rows, n_rows)


class _Objective(NamedTuple):
    """What turns a data gradient into the objective's: the refit's cell count, its L2 weight per row
    (``lam / (m + n)``) and its settings (the prior, the optimizer, the epochs)."""

    count: jax.Array
    decay: jax.Array
    settings: FitSettings


def _objective_gradient(data, u, objective: _Objective):
    settings = objective.settings
    prior = 0.0 if settings.row_prior is None else prior_gradient(u, settings)
    return (data + prior) / objective.count + objective.decay * u


def _steps(u, gradient, settings):
    """``settings.epochs`` optimizer steps from a fresh state."""
    def step(_, state):
        u, opt_state = state
        updates, opt_state = settings.optimizer.update(gradient(u), opt_state, u)
        return optax.apply_updates(u, updates), opt_state

    return jax.lax.fori_loop(0, settings.epochs, step, (u, settings.optimizer.init(u)))[0]


def _by_model(U, V, group: CellBlocks, starts, cap: int, objective: _Objective):
    """Every row stepped in chunks of consecutive models whose blocks (sorted blocks ``starts[i] ..
    starts[i + 1] - 1`` for model ``i``, each model at most ``cap``) fit ``cap`` blocks; a model
    without blocks gets the steps of its L2 and prior terms alone."""
    m, r = U.shape
    padded = jnp.concatenate([U, jnp.zeros((cap, r), U.dtype)])

    def chunk(carry):
        first, padded = carry
        # The models first .. last - 1 (at least one: each model's blocks fit a chunk).
        last = jnp.minimum(jnp.searchsorted(starts, starts[first] + cap, side="right") - 1, jnp.minimum(first + cap, m))
        last = jnp.maximum(last, first + 1)
        part = jax.tree_util.tree_map(lambda a: jax.lax.dynamic_slice_in_dim(a, starts[first], cap, 0), group)
        inside = jnp.arange(cap) < starts[last] - starts[first]
        local = jnp.where(inside, part.rows - first, 0)
        valid = part.valid & inside[:, None]
        G = V[part.cols]                          # gathered once for every epoch

        def gradient(u):
            return _objective_gradient(_data_gradient(u, G, local, valid, part.scores, cap), u, objective)

        before = jax.lax.dynamic_slice_in_dim(padded, first, cap, 0)
        after = _steps(before, gradient, objective.settings)
        own = jnp.arange(cap) < last - first
        return last, jax.lax.dynamic_update_slice_in_dim(padded, jnp.where(own[:, None], after, before), first, 0)

    return jax.lax.while_loop(lambda carry: carry[0] < m, chunk, (jnp.int32(0), padded))[1][:m]


def _streamed(U, V, group: CellBlocks, span, size: int, objective: _Objective):
    """Every row stepped on the sorted blocks ``span = (begin, end)``, ``begin .. end - 1``, alone, ``size`` blocks at a time at
    every epoch (rows with no block among them get their L2 and prior terms alone)."""
    m = U.shape[0]
    begin, end = span

    def gradient(u):
        def add_piece(k, data):
            start = begin + k * size
            part = jax.tree_util.tree_map(lambda a: jax.lax.dynamic_slice_in_dim(a, start, size, 0), group)
            valid = part.valid & (start + jnp.arange(size) < end)[:, None]
            return data + _data_gradient(u, V[part.cols], part.rows, valid, part.scores, m)

        data = jax.lax.fori_loop(0, (end - begin + size - 1) // size, add_piece, jnp.zeros_like(u))
        return _objective_gradient(data, u, objective)

    return _steps(U, gradient, objective.settings)


def refit_rows_by_model(U, V, blocks: tuple[CellBlocks, ...], n_examples: int, settings: FitSettings):
    """`refit_rows_on_blocks` from a fresh optimizer state, models with at most `capacity` blocks a
    chunk of whole models at a time, the others streamed (see the module's docstring). The caller
    guarantees that the rows decouple (``settings.shrink == 0`` or a ``settings.row_prior``)."""
    m, r = U.shape
    width = blocks[-1].cols.shape[1]
    group = _one_group(blocks, width)
    cap, size = capacity(width, r, group.rows.shape[0], n_examples), piece(width, r, group.rows.shape[0])
    has_cells = jnp.any(group.valid, axis=1)
    per_model = jax.ops.segment_sum(has_cells.astype(jnp.int32), group.rows, m)
    small = per_model <= cap
    group = _sorted_blocks(group, small, max(cap, size))
    starts = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(jnp.where(small, per_model, 0))])
    objective = _Objective(jnp.maximum(jnp.sum(group.valid), 1).astype(U.dtype),
                           jnp.asarray(settings.lam / (m + n_examples), U.dtype), settings)
    by_model = _by_model(U, V, group, starts, cap, objective)
    streamed = jax.lax.cond(jnp.all(small), lambda u: u,
                            lambda u: _streamed(u, V, group, (starts[m], jnp.sum(per_model)), size, objective), U)
    return jnp.where(small[:, None], by_model, streamed)


def refit_rows_in_cache(U, V, blocks: tuple[CellBlocks, ...], n_examples: int, settings: FitSettings,
                        filled: FilledPrefix | None = None):
    """`refit_rows_on_blocks` (from a fresh state of an elementwise optimizer such as Adam), by
    `refit_rows_by_model` wherever the rows decouple (decided on the values, at each call), by the
    full-batch refit elsewhere."""
    if settings.row_prior is not None:
        return refit_rows_by_model(U, V, blocks, n_examples, settings)
    return jax.lax.cond(jnp.asarray(settings.shrink) == 0, lambda u: refit_rows_by_model(u, V, blocks, n_examples, settings),
                        lambda u: refit_rows_on_blocks(u, V, blocks, n_examples, settings, filled=filled), U)
