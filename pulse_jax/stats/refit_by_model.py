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

The numbers are the full-batch refit's up to float summation order. A prior towards the rows' own
mean (``shrink > 0`` without a `RowPrior`) couples the rows through ``ubar``, which moves with every
row; then the refit makes ``epochs`` passes of one step each, ``ubar`` taken from the rows at the pass's
start and the optimizer's per-row state carried from pass to pass, so each pass is exactly one
full-batch step (`_schedule`).
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from pulse_jax.stats.factorization import PRECISION, CellBlocks, FitSettings, chunk_bytes, prior_gradient


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


class _Stepping(NamedTuple):
    """How a pass steps its rows: ``steps`` steps of ``optimizer`` from the state whose per-row leaves
    each chunk carries (``per_row`` marks them in the state's ``treedef``) and whose other leaves
    (Adam's step count, the same for every row) are ``counts`` at the pass's start."""

    optimizer: optax.GradientTransformation
    treedef: object
    per_row: tuple
    counts: list
    steps: jax.Array


class _Objective(NamedTuple):
    """What turns a data gradient into the objective's: the refit's cell count, its L2 weight per row
    (``lam / (m + n)``), its settings (the prior), the rows' mean at the pass's start (the centre of a
    prior towards it) and how the pass steps."""

    count: jax.Array
    decay: jax.Array
    settings: FitSettings
    ubar: jax.Array
    stepping: _Stepping


def _objective_gradient(data, u, objective: _Objective):
    settings = objective.settings
    if settings.row_prior is not None:
        prior = prior_gradient(u, settings)
    else:   # towards the rows' mean: 0 unless the rows couple, and then a pass takes one step
        prior = settings.shrink * (u - objective.ubar)
    return (data + prior) / objective.count + objective.decay * u


def _split_state(state, shape):
    """An optimizer state's tree, which of its leaves are shaped like the rows (the moments), those
    leaves and the others (step counts)."""
    leaves, treedef = jax.tree_util.tree_flatten(state)
    per_row = tuple(leaf.shape == shape for leaf in leaves)
    return (treedef, per_row, [leaf for leaf, own in zip(leaves, per_row) if own],
            [leaf for leaf, own in zip(leaves, per_row) if not own])


def _steps(u, moments, gradient, stepping: _Stepping):
    """``stepping.steps`` optimizer steps of the rows ``u``, whose per-row state is ``moments``:
    ``(u, moments, counts)`` after them."""
    own, shared = iter(moments), iter(stepping.counts)
    state = stepping.treedef.unflatten([next(own) if mine else next(shared) for mine in stepping.per_row])

    def step(_, carry):
        u, opt_state = carry
        updates, opt_state = stepping.optimizer.update(gradient(u), opt_state, u)
        return optax.apply_updates(u, updates), opt_state

    u, state = jax.lax.fori_loop(0, stepping.steps, step, (u, state))
    _, _, moments, counts = _split_state(state, u.shape)
    return u, moments, counts


def _by_model(U, moments, V, group: CellBlocks, *, starts, cap: int, objective: _Objective):
    """Every row stepped in chunks of consecutive models whose blocks (sorted blocks ``starts[i] ..
    starts[i + 1] - 1`` for model ``i``, each model at most ``cap``) fit ``cap`` blocks; a model
    without blocks gets the steps of its L2 and prior terms alone. ``(U, moments, counts)`` after."""
    m, r = U.shape
    pad = lambda a: jnp.concatenate([a, jnp.zeros((cap,) + a.shape[1:], a.dtype)])   # noqa: E731

    def chunk(carry):
        first, rows, moments, _ = carry
        # The models first .. last - 1 (at least one: each model's blocks fit a chunk).
        last = jnp.minimum(jnp.searchsorted(starts, starts[first] + cap, side="right") - 1, jnp.minimum(first + cap, m))
        last = jnp.maximum(last, first + 1)
        part = jax.tree_util.tree_map(lambda a: jax.lax.dynamic_slice_in_dim(a, starts[first], cap, 0), group)
        inside = jnp.arange(cap) < starts[last] - starts[first]
        local = jnp.where(inside, part.rows - first, 0)
        valid = part.valid & inside[:, None]
        G = V[part.cols]                          # gathered once for every step of the pass

        def gradient(u):
            return _objective_gradient(_data_gradient(u, G, local, valid, part.scores, cap), u, objective)

        take = lambda a: jax.lax.dynamic_slice_in_dim(a, first, cap, 0)   # noqa: E731
        after, after_moments, counts = _steps(take(rows), [take(a) for a in moments], gradient, objective.stepping)
        own = (jnp.arange(cap) < last - first)[:, None]
        put = lambda a, new: jax.lax.dynamic_update_slice_in_dim(a, jnp.where(own, new, take(a)), first, 0)   # noqa: E731
        return last, put(rows, after), [put(a, b) for a, b in zip(moments, after_moments)], counts

    start = (jnp.int32(0), pad(U), [pad(a) for a in moments], objective.stepping.counts)
    _, rows, moments, counts = jax.lax.while_loop(lambda carry: carry[0] < m, chunk, start)
    return rows[:m], [a[:m] for a in moments], counts


def _dense_rows(U, moments, V, group: CellBlocks, *, begin, large, per_model, size: int, objective: _Objective):
    """The rows of the ``large`` models (whose ``per_model`` blocks with cells are the sorted blocks from
    ``begin`` on, by row), stepped `group_size` at a time on dense rows: each model's cells scattered ``size`` blocks
    at a time (no more than the sorted blocks' padding) into a count and a score sum per example,
    then every step two products with the whole of ``V`` (no gather). ``(U, moments)`` after."""
    m, r = U.shape
    n = V.shape[0]
    k = group_size(n, m)
    per_model = jnp.where(large, per_model, 0)
    first_block = begin + jnp.cumsum(per_model) - per_model            # each large model's first sorted block
    members = jnp.concatenate([jnp.nonzero(large, size=m, fill_value=m)[0], jnp.full(k, m)])
    rank = jnp.cumsum(large) - 1                                        # a large model's place among them
    pad = lambda a: jnp.concatenate([a, jnp.zeros((1,) + a.shape[1:], a.dtype)])   # noqa: E731 (row m: the fill rows')
    V_t = V.T                                     # XLA:CPU multiplies u V^T 2x faster from V^T in memory

    def one_group(g, carry):
        rows, moments = carry
        members_now = jax.lax.dynamic_slice_in_dim(members, g * k, k)
        live = (members_now < m)[:, None]
        last = members_now[jnp.maximum(jnp.sum(live) - 1, 0)]
        first, end = first_block[members_now[0]], first_block[last] + per_model[last]

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

        after, after_moments, _ = _steps(rows[members_now], [a[members_now] for a in moments], gradient,
                                         objective.stepping)
        put = lambda a, new: a.at[members_now].set(jnp.where(live, new, a[members_now]))   # noqa: E731
        return put(rows, after), [put(a, b) for a, b in zip(moments, after_moments)]

    groups = (jnp.sum(large) + k - 1) // k
    rows, moments = jax.lax.fori_loop(0, groups, one_group, (pad(U), [pad(a) for a in moments]))
    return rows[:m], [a[:m] for a in moments]


def _schedule(settings: FitSettings):
    """``(passes, steps per pass)``: every step in one pass where the rows decouple (a `RowPrior`, or
    ``shrink == 0``); ``epochs`` passes of one step where a prior towards the rows' own mean couples
    them, so each pass is one full-batch step with ``ubar`` taken at its start."""
    if settings.row_prior is not None:
        return 1, jnp.int32(settings.epochs)
    coupled = jnp.asarray(settings.shrink) != 0
    return jnp.where(coupled, settings.epochs, 1), jnp.where(coupled, 1, settings.epochs)


def _passes(U, settings: FitSettings, one_pass, *, count, decay):
    """``U`` after `_schedule`'s passes of ``one_pass(U, moments, objective) -> (U, moments, counts)``
    from a fresh optimizer state (``count`` cells in the refit, ``decay`` its L2 weight per row)."""
    passes, steps = _schedule(settings)
    treedef, per_row, moments, counts = _split_state(settings.optimizer.init(U), U.shape)

    def body(_, carry):
        U, moments, counts = carry
        stepping = _Stepping(settings.optimizer, treedef, per_row, counts, steps)
        return one_pass(U, moments, _Objective(count, decay, settings, jnp.mean(U, axis=0), stepping))

    return jax.lax.fori_loop(0, passes, body, (U, moments, counts))[0]


def refit_rows_by_model(U, V, blocks: tuple[CellBlocks, ...], n_examples: int, settings: FitSettings):
    """`refit_rows_on_blocks` from a fresh state of an elementwise optimizer (such as Adam), models
    with at most `capacity` blocks a chunk of whole models at a time, the largest on dense rows (see
    the module's docstring); where a prior towards the rows' own mean couples the rows, one step per
    pass over them (`_schedule`)."""
    m, r = U.shape
    width = blocks[-1].cols.shape[1]
    group = _one_group(blocks, width)
    cap, size = capacity(width, r, group.rows.shape[0], n_examples), piece(width, r, group.rows.shape[0])
    has_cells = jnp.any(group.valid, axis=1)
    per_model = jax.ops.segment_sum(has_cells.astype(jnp.int32), group.rows, m)
    small = (per_model <= cap) & (per_model * width < DENSE_SHARE * n_examples)
    group = _sorted_blocks(group, small, max(cap, size))
    starts = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(jnp.where(small, per_model, 0))])
    count = jnp.maximum(jnp.sum(group.valid), 1).astype(U.dtype)
    decay = jnp.asarray(settings.lam / (m + n_examples), U.dtype)

    def one_pass(U, moments, objective):
        by_rows, by_moments, counts = _by_model(U, moments, V, group, starts=starts, cap=cap, objective=objective)

        def dense_rows(carry):
            return _dense_rows(*carry, V, group, begin=starts[m], large=~small, per_model=per_model, size=size,
                               objective=objective)

        dense, dense_moments = jax.lax.cond(jnp.all(small), lambda carry: carry, dense_rows, (U, moments))
        pick = lambda a, b: jnp.where(small[:, None], a, b)   # noqa: E731
        return pick(by_rows, dense), [pick(a, b) for a, b in zip(by_moments, dense_moments)], counts

    return _passes(U, settings, one_pass, count=count, decay=decay)


def refit_first_look(U, V, first: CellBlocks, n_examples: int, settings: FitSettings):
    """`refit_rows_by_model` on the first look alone (``first``: one block per model, ``first.rows =
    arange(m)``): the same numbers up to summation order from a much smaller program (no sort, no
    dense rows). The models are taken in chunks of a fixed count, a `CACHE_BYTES` of ``V`` rows each,
    each chunk's rows gathered once per pass."""
    m, r = U.shape
    width = first.cols.shape[1]
    per_chunk = max(1, min(m, CACHE_BYTES // (width * r * 4)))
    chunks = -(-m // per_chunk)

    def chunked(a, fill=0):
        pad = jnp.full((chunks * per_chunk - m,) + a.shape[1:], fill, a.dtype)
        return jnp.concatenate([a, pad]).reshape((chunks, per_chunk) + a.shape[1:])

    cells = (chunked(first.cols), chunked(first.scores), chunked(first.valid, False))
    count = jnp.maximum(jnp.sum(first.valid), 1).astype(U.dtype)
    decay = jnp.asarray(settings.lam / (m + n_examples), U.dtype)

    def one_pass(U, moments, objective):

        def chunk(_, part):
            u, own_moments, cols, scores, valid = part
            G = V[cols]                              # gathered once for every step of the pass

            def gradient(u):
                residual = jnp.where(valid, jax.nn.sigmoid(jnp.einsum("cwr,cr->cw", G, u, precision=PRECISION))
                                     - scores, 0.0)
                return _objective_gradient(jnp.einsum("cwr,cw->cr", G, residual, precision=PRECISION), u, objective)

            u, own_moments, counts = _steps(u, own_moments, gradient, objective.stepping)
            return counts, (u, own_moments)

        xs = (chunked(U), [chunked(a) for a in moments]) + cells
        counts, (rows, moments) = jax.lax.scan(chunk, objective.stepping.counts, xs)
        return rows.reshape(-1, r)[:m], [a.reshape(-1, r)[:m] for a in moments], counts

    return _passes(U, settings, one_pass, count=count, decay=decay)
