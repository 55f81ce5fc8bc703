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
* the few models with more, or with blocks for at least `DENSE_SHARE` of the examples (those
  evaluated on most examples): `group_size` of them at a time on dense rows. Their cells are
  scattered once into a count ``c_ij`` and a score sum ``t_ij`` per example, and each epoch's data
  gradient is ``sum_j (c_ij sigmoid(u_i . v_j) - t_ij) v_j``: two products with the whole of ``V``,
  read once for the group and never gathered, the same sum as over the cells (a cell seen twice
  counts twice).

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

#: A model with blocks for at least this share of the examples, or more blocks than a chunk holds,
#: is stepped on dense rows: two products with all of ``V`` per epoch beat gathering its rows again.
DENSE_SHARE = 0.5

#: Models stepped together on dense rows, at most: enough to read ``V`` once for several, few enough
#: that a group part empty wastes little (measured at 1,000 x 12,032, rank 100: 4, 8 and 16 alike).
GROUP_MODELS = 8

#: Bytes of one group's dense rows at most (a count, a score sum and a logit per example and model).
DENSE_BYTES = 2 * 1024 * 1024


def group_size(n_examples: int, n_models: int) -> int:
    """Models stepped together on dense rows: `GROUP_MODELS`, fewer where their rows pass `DENSE_BYTES`."""
    return max(1, min(n_models, GROUP_MODELS, DENSE_BYTES // (12 * n_examples)))


def capacity(width: int, rank: int, n_blocks: int, n_examples: int) -> int:
    """Blocks per chunk of models: `CACHE_BYTES` of gathered ``V`` rows, and no more than two models
    evaluated on every example hold (a chunk computes on all its blocks, filled or not: on a small
    matrix a chunk as large as the cache would be mostly empty early in a run)."""
    return max(1, min(n_blocks, CACHE_BYTES // (width * rank * 4), 2 * (-(-n_examples // width)) + 2))


def piece(width: int, rank: int, n_blocks: int) -> int:
    """Blocks scattered into dense rows at a time: `chunk_bytes` of ``V`` rows' worth, as the full-batch refit."""
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


def _dense_rows(U, V, group: CellBlocks, begin, large, *, per_model, size: int, objective: _Objective):
    """The rows of the ``large`` models (whose ``per_model`` blocks with cells are the sorted blocks from
    ``begin`` on, by row), stepped `group_size` at a time on dense rows: each model's cells scattered ``size`` blocks
    at a time (no more than the sorted blocks' padding) into a count and a score sum per example,
    then every epoch two products with the whole of ``V`` (no gather)."""
    m, r = U.shape
    n = V.shape[0]
    k = group_size(n, m)
    per_model = jnp.where(large, per_model, 0)
    first_block = begin + jnp.cumsum(per_model) - per_model            # each large model's first sorted block
    members = jnp.concatenate([jnp.nonzero(large, size=m, fill_value=m)[0], jnp.full(k, m)])
    rank = jnp.cumsum(large) - 1                                        # a large model's place among them
    padded = jnp.concatenate([U, jnp.zeros((1, r), U.dtype)])          # row m: where the fill rows go
    V_t = V.T                                     # XLA:CPU multiplies u V^T 2x faster from V^T in memory

    def one_group(g, padded):
        rows = jax.lax.dynamic_slice_in_dim(members, g * k, k)
        live = rows < m
        last = rows[jnp.maximum(jnp.sum(live) - 1, 0)]
        first, end = first_block[rows[0]], first_block[last] + per_model[last]

        def add_piece(p, counts):
            start = first + p * size
            part = jax.tree_util.tree_map(lambda a: jax.lax.dynamic_slice_in_dim(a, start, size, 0), group)
            valid = part.valid & (start + jnp.arange(size) < end)[:, None]
            local = jnp.where(valid, (rank[part.rows] - g * k)[:, None], 0)
            return (counts[0].at[local, part.cols].add(valid.astype(U.dtype)),
                    counts[1].at[local, part.cols].add(jnp.where(valid, part.scores, 0.0)))

        zeros = jnp.zeros((k, n), U.dtype)
        cells, totals = jax.lax.fori_loop(0, (end - first + size - 1) // size, add_piece, (zeros, zeros))

        def gradient(u):
            logits = jnp.einsum("kr,rn->kn", u, V_t, precision=PRECISION)
            residual = cells * jax.nn.sigmoid(logits) - totals        # a cell seen twice counts twice
            return _objective_gradient(jnp.einsum("kn,nr->kr", residual, V, precision=PRECISION), u, objective)

        before = padded[rows]
        after = _steps(before, gradient, objective.settings)
        return padded.at[rows].set(jnp.where(live[:, None], after, before))

    groups = (jnp.sum(large) + k - 1) // k
    return jax.lax.fori_loop(0, groups, one_group, padded)[:m]


def refit_rows_by_model(U, V, blocks: tuple[CellBlocks, ...], n_examples: int, settings: FitSettings, *,
                        most_blocks: int | None = None):
    """`refit_rows_on_blocks` from a fresh optimizer state, models with at most `capacity` blocks a
    chunk of whole models at a time, the largest on dense rows (see the module's docstring). The caller
    guarantees that the rows decouple (``settings.shrink == 0`` or a ``settings.row_prior``).

    ``most_blocks`` (static, optional): no model has more blocks than this, known before the run (the
    first look's one block per model). Where it rules the dense rows out, the program leaves them out
    (the same numbers, less to compile)."""
    m, r = U.shape
    width = blocks[-1].cols.shape[1]
    group = _one_group(blocks, width)
    cap, size = capacity(width, r, group.rows.shape[0], n_examples), piece(width, r, group.rows.shape[0])
    has_cells = jnp.any(group.valid, axis=1)
    per_model = jax.ops.segment_sum(has_cells.astype(jnp.int32), group.rows, m)
    small = (per_model <= cap) & (per_model * width < DENSE_SHARE * n_examples)
    group = _sorted_blocks(group, small, max(cap, size))
    starts = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(jnp.where(small, per_model, 0))])
    objective = _Objective(jnp.maximum(jnp.sum(group.valid), 1).astype(U.dtype),
                           jnp.asarray(settings.lam / (m + n_examples), U.dtype), settings)
    by_model = _by_model(U, V, group, starts, cap, objective)
    if most_blocks is not None and most_blocks <= cap and most_blocks * width < DENSE_SHARE * n_examples:
        return by_model                           # every model is small

    def dense_rows(u):
        return _dense_rows(u, V, group, starts[m], ~small, per_model=per_model, size=size, objective=objective)

    dense = jax.lax.cond(jnp.all(small), lambda u: u, dense_rows, U)
    return jnp.where(small[:, None], by_model, dense)


def refit_rows_in_cache(U, V, blocks: tuple[CellBlocks, ...], n_examples: int, settings: FitSettings, *,
                        filled: FilledPrefix | None = None, most_blocks: int | None = None):
    """`refit_rows_on_blocks` (from a fresh state of an elementwise optimizer such as Adam), by
    `refit_rows_by_model` wherever the rows decouple (decided on the values, at each call), by the
    full-batch refit elsewhere. ``most_blocks``: as in `refit_rows_by_model`."""
    def by_model(u):
        return refit_rows_by_model(u, V, blocks, n_examples, settings, most_blocks=most_blocks)

    if settings.row_prior is not None:
        return by_model(U)
    return jax.lax.cond(jnp.asarray(settings.shrink) == 0, by_model,
                        lambda u: refit_rows_on_blocks(u, V, blocks, n_examples, settings, filled=filled), U)
