"""Low-rank logistic factorization of a partially observed score matrix.

Model: ``P[i, j] = sigmoid(u_i . v_j)`` with ``U`` in R^{m x r}, ``V`` in R^{n x r}.
Loss (Tolochinsky, Tenzer & Romano 2026, eq. 1), over the observed set Omega:

    L(U, V) = (1/|Omega|) sum_{(i,j) in Omega} BCE(S_ij, sigmoid(u_i . v_j))
              + lam / (2 (m + n)) * (||U||_F^2 + ||V||_F^2)

Scores may be soft (in [0, 1]); BCE is then the cross-entropy against the
soft label. Missing cells simply carry mask 0.

An *epoch* here is one full-batch optimizer step over every observed cell.
All loops are ``lax.fori_loop`` so a fit runs inside ``jit``/``scan``/``vmap``.
Optimizers are any ``optax.GradientTransformation``; the defaults are the
paper's published settings (Adam; see `PAPER_REFIT`).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.custom_batching import custom_vmap

from pulse_jax.errors import require
from pulse_jax.stats.seeds import seed_key
from pulse_jax.stats.without_replacement import unpack


class FitSettings(NamedTuple):
    """One optimisation schedule: ``epochs`` steps of ``optimizer`` with L2 weight ``lam``.

    ``shrink`` (refits of ``U`` only): the weight ``kappa`` of a population prior that pulls
    every row towards the mean row ``ubar`` of all rows, ``(kappa / 2) sum_i ||u_i - ubar||^2``
    added to the data term's *sum* over cells (so ``kappa`` counts in cells). A model with few
    observed cells then gets predictions near the candidates' average ones instead of what a few
    steps from zero give. Fitted on observed cells only, so every prediction stays predictable.
    """

    epochs: int
    lam: float
    optimizer: optax.GradientTransformation
    shrink: float | jax.Array = 0.0
    row_prior: "RowPrior | None" = None


class RowPrior(NamedTuple):
    """A Gaussian prior ``N(mean, precision^-1)`` on every candidate's row ``u_i`` of ``U``.

    In a refit with weight ``kappa`` (``FitSettings.shrink``, ``BanditParams.refit_prior``) the
    term ``(kappa / 2) sum_i (u_i - mean)^T precision (u_i - mean)`` is added to the data term's
    sum over observed cells, so ``kappa = 1`` makes the refit the maximum a posteriori row under
    this prior (`row_prior_from_rows` learns one from a train split's rows). A model seen on
    a single batch then starts from the population of earlier models instead of from zero. The
    prior is fixed before the run and the rows are fitted on observed cells only, so every
    prediction stays predictable and every estimate unbiased, whatever the prior.
    """

    mean: chex.Array        # (r,)
    precision: chex.Array   # (r, r), symmetric positive definite


def row_prior_from_rows(U_train, ridge: float = 1e-6) -> RowPrior:
    """The Gaussian with the mean and covariance of ``U_train``'s rows (``(m_train, r)``, e.g. the
    train split's stage-0 ``U``): ``RowPrior(mean, inv(cov + ridge I))``, float32.

    ``ridge`` keeps the precision finite when the rows span fewer than ``r`` dimensions.
    """
    U_train = np.asarray(U_train, np.float64)
    require(U_train.ndim == 2 and U_train.shape[0] >= 2,
            f"U_train must be a 2-D array of at least 2 rows, got shape {U_train.shape}")
    require(np.isfinite(U_train).all(), "U_train contains NaN or inf")
    require(ridge >= 0 and math.isfinite(ridge), f"ridge must be finite and >= 0, got {ridge}")
    r = U_train.shape[1]
    cov = np.cov(U_train, rowvar=False).reshape(r, r) + ridge * np.eye(r)
    require(np.linalg.matrix_rank(cov) == r,
            f"the rows' covariance is singular (rank {np.linalg.matrix_rank(cov)} < {r}): pass ridge > 0")
    precision = np.linalg.inv(cov)
    return RowPrior(np.asarray(U_train.mean(axis=0), np.float32), np.asarray((precision + precision.T) / 2,
                                                                             np.float32))


def prior_penalty(U: chex.Array, settings: FitSettings) -> chex.Array:
    """The prior term itself, in the units of a sum over cells (what `prior_gradient` differentiates)."""
    prior = settings.row_prior
    if prior is None:
        return 0.5 * settings.shrink * jnp.sum(jnp.square(U - jnp.mean(U, axis=0, keepdims=True)))
    centred = U - prior.mean[None, :]
    return 0.5 * settings.shrink * jnp.sum(centred * (centred @ prior.precision))


def prior_gradient(U: chex.Array, settings: FitSettings) -> chex.Array:
    """``d/dU`` of the prior term, in the units of a sum over cells.

    Without a `RowPrior`: ``(kappa/2) sum_i ||u_i - ubar||^2`` with ``ubar`` the rows' own
    mean, whose gradient is ``kappa (u_i - ubar)`` (the mean's own terms cancel). With one:
    ``kappa precision (u_i - mean)``.
    """
    prior = settings.row_prior
    if prior is None:
        return settings.shrink * (U - jnp.mean(U, axis=0, keepdims=True))
    centred = U - prior.mean[None, :]
    return settings.shrink * jnp.einsum("ir,rs->is", centred, prior.precision, precision=PRECISION)


def adam_settings(epochs: int, learning_rate: float, lam: float) -> FitSettings:
    """Adam with the given learning rate, as in the paper."""
    return FitSettings(int(epochs), float(lam), optax.adam(learning_rate))


#: Paper: initial refit of the candidates' U after the first batch (50 epochs, lr 0.01, lam 0.01).
PAPER_INIT_REFIT = adam_settings(50, 0.01, 0.01)
#: Paper: periodic refits inside the bandit loop (10 epochs, lr 0.1, lam 0.01).
PAPER_REFIT = adam_settings(10, 0.1, 0.01)


#: float32 products at full precision on every backend. XLA on GPUs otherwise runs them in TF32
#: (10-bit mantissa): prediction sums then differ from the CPU's by ~1e-3 relative, enough to flip
#: close choices and to fail the step-for-step NumPy reference test there. The contractions here
#: are memory-bound, so full precision costs little.
PRECISION = jax.lax.Precision.HIGHEST


def _logits(U, V):
    return jnp.matmul(U, V.T, precision=PRECISION)


def masked_bce(logits: chex.Array, scores: chex.Array, mask: chex.Array) -> chex.Array:
    """Sum over observed cells of BCE(score, sigmoid(logit)), numerically stable."""
    per_cell = jnp.logaddexp(0.0, logits) - scores * logits
    return jnp.sum(jnp.where(mask, per_cell, 0.0))


def loss(U: chex.Array, V: chex.Array, scores: chex.Array, mask: chex.Array, lam: float) -> chex.Array:
    """The paper's objective L(U, V) over the cells where ``mask`` is true."""
    m, n = scores.shape
    n_obs = jnp.maximum(jnp.sum(mask), 1)
    data = masked_bce(_logits(U, V), scores, mask) / n_obs
    reg = lam / (2.0 * (m + n)) * (jnp.sum(U * U) + jnp.sum(V * V))
    return data + reg


def _optimise(params, loss_fn, settings: FitSettings):
    """``settings.epochs`` full-batch steps of ``settings.optimizer`` on ``loss_fn``."""
    return _descend(params, jax.grad(loss_fn), settings)


def _descend(params, grad_fn, settings: FitSettings):
    """``settings.epochs`` full-batch steps of ``settings.optimizer`` along ``grad_fn``, from a fresh
    optimizer state."""
    return _descend_from(params, settings.optimizer.init(params), grad_fn, settings)[0]


def _descend_from(params, opt_state, grad_fn, settings: FitSettings):
    """``settings.epochs`` steps of ``settings.optimizer`` from ``opt_state``: ``(params, opt_state)``."""
    opt = settings.optimizer

    def body(_, carry):
        p, opt_state = carry
        updates, opt_state = opt.update(grad_fn(p), opt_state, p)
        return optax.apply_updates(p, updates), opt_state

    return jax.lax.fori_loop(0, settings.epochs, body, (params, opt_state))


def fit(key: chex.PRNGKey, scores: chex.Array, mask: chex.Array, rank: int,
        settings: FitSettings, init_scale: float = 0.1) -> tuple[chex.Array, chex.Array]:
    """Stage 0: fit ``(U, V)`` jointly on a (possibly incomplete) train matrix.

    Missing cells are those where ``mask`` is false (their ``scores`` value is ignored).
    Returns ``(U_train, V)``; PULSE keeps ``V`` and discards ``U_train``.
    """
    m, n = scores.shape
    ku, kv = jax.random.split(key)
    scores = jnp.where(mask, scores, 0.0)
    params = (init_scale * jax.random.normal(ku, (m, rank)), init_scale * jax.random.normal(kv, (n, rank)))
    U, V = _optimise(params, lambda p: loss(p[0], p[1], scores, mask, settings.lam), settings)
    return U, V


def refit_rows(U: chex.Array, V: chex.Array, scores: chex.Array, mask: chex.Array,
               settings: FitSettings) -> chex.Array:
    """Refit the row factors ``U`` with ``V`` frozen, warm-started from ``U``.

    The problem is convex in ``U`` (one logistic regression per row, coupled
    only through the shared normalisation), so warm starts are safe.
    """
    V = jax.lax.stop_gradient(V)
    count = jnp.maximum(jnp.sum(mask), 1).astype(U.dtype)

    def objective(u):
        return loss(u, V, scores, mask, settings.lam) + prior_penalty(u, settings) / count

    return _optimise(U, objective, settings)


class CellBlocks(NamedTuple):
    """Observed cells in blocks: block ``k`` holds up to ``L`` cells of model row ``rows[k]``.

    The bandit observes cells a batch at a time, so its observed set is
    naturally a list of (model, batch) blocks; ``valid`` marks the cells
    present (a short batch, an unused log slot).
    """

    rows: chex.Array     # (K,) int32 model row
    cols: chex.Array     # (K, L) int32 example column
    scores: chex.Array   # (K, L) float32
    valid: chex.Array    # (K, L) bool


class FilledPrefix(NamedTuple):
    """Only the first ``used`` blocks of the *last* block group hold valid cells (the caller
    guarantees it: the rest have ``valid`` false, as unused slots of the pull log do); visit them
    ``chunk`` blocks at a time (``chunk`` static and dividing the group's length; ``used`` an int,
    possibly traced but the same across a ``vmap``), so the cost follows the cells observed, not
    the group's capacity. The bandit's pull log is such a group: it is allocated for the whole
    budget and filled one slot per step."""

    used: jax.Array
    chunk: int


#: Bytes of gathered ``V`` rows that a refit visits at a time on a CPU. Gathering the rows of every
#: observed cell once per refit makes an array of ``|Omega| r`` floats (186 MB per repetition at
#: 464,000 cells, rank 100) that every epoch reads twice from memory; gathered a chunk at a time from
#: ``V`` (which stays in cache) and used at once, the rows never leave the cache. The budget is one
#: repetition's: on a CPU the kernel refits the repetitions of a vmapped run one at a time
#: (`one_repetition_at_a_time`), and where the rows decouple it takes every epoch of a chunk's models
#: before moving on (`pulse_jax.stats.refit_by_model`). Accelerators gather whole groups once per
#: refit (``None``): there a chunk loop would cost kernel launches.
CPU_CHUNK_BYTES = 128 * 1024


def one_repetition_at_a_time(fn):
    """``fn`` (a function of array pytrees) that, under ``vmap``, runs its batch one member after
    another (``lax.map``) instead of as one batched program; called unbatched it is ``fn``.

    Why, on a CPU: a refit is ``epochs`` passes over the same observed cells. Batched over R
    repetitions each pass is an op over R times the cells, so what one op writes has left the
    caches before the next reads it; one repetition at a time, a repetition's cells and ``V`` are
    still in cache for its next pass, and the batched program's per-op parallelism (about 1.35 of
    2 cores) bought less than that loses. Measured on 2 cores, one refit of 100 repetitions as in
    ``accelerator_report.py --quick``: 658 ms batched, 420 ms one at a time, 259 ms one at a time
    and a few whole models at a time (`pulse_jax.stats.refit_by_model`;
    ``benchmarks/speed/refit_chunks.py``). Each member's arithmetic is unchanged, so results are
    the batched program's up to float summation order. Arguments the batch does not vary are
    shared, not copied per member; nested ``vmap`` nests the loops.
    """
    wrapped = custom_vmap(fn)

    @wrapped.def_vmap
    def _batched(axis_size, in_batched, *args):
        del axis_size
        leaves, treedef = jax.tree_util.tree_flatten(args)
        flags = jax.tree_util.tree_leaves(list(in_batched))
        varying = [leaf for leaf, flag in zip(leaves, flags) if flag]

        def member(xs):
            xs = iter(xs)
            return wrapped(*treedef.unflatten([next(xs) if flag else leaf for leaf, flag in zip(leaves, flags)]))

        out = jax.lax.map(member, varying)
        return out, jax.tree_util.tree_map(lambda _: True, out)

    return wrapped


def chunk_bytes(platform: str | None = None) -> int | None:
    """`CPU_CHUNK_BYTES` on a CPU, ``None`` (whole block groups) elsewhere; ``platform``
    defaults to JAX's default backend (the one a ``jit`` compiles for)."""
    return CPU_CHUNK_BYTES if (platform or jax.default_backend()) == "cpu" else None


class _Visit(NamedTuple):
    """How `_fold` visits one block group: whole, with its ``V`` rows gathered once per refit
    (``rows``), or ``n_chunks`` chunks of ``chunk`` blocks (then the last ``tail`` blocks), each
    gathered as it is visited."""

    block: CellBlocks
    rows: jax.Array
    chunk: int
    n_chunks: jax.Array
    tail: int


def _largest_divisor_at_most(k: int, cap: int) -> int:
    return max(d for d in range(1, max(min(k, cap), 1) + 1) if k % d == 0)


def _plan(V, blocks, filled: FilledPrefix | None) -> list[_Visit]:
    """The visits of every block group (see `_Visit` and `chunk_bytes`); under
    ``filled`` the last group's chunks past its used blocks are never visited. Called once per
    refit: the rows of groups visited whole are gathered here (``V`` is frozen)."""
    budget = chunk_bytes()
    visits = []
    for k, b in enumerate(blocks):
        K, L = b.cols.shape[-2:]
        per_block = L * V.shape[-1] * V.dtype.itemsize
        cap = K if budget is None else max(budget // per_block, 1)
        if filled is not None and k == len(blocks) - 1:
            # A divisor of ``filled.chunk`` (itself dividing K): no chunk runs past the group.
            c = _largest_divisor_at_most(filled.chunk, cap)
            visits.append(_Visit(b, None, c, (filled.used + c - 1) // c, 0))
        elif cap >= K:
            visits.append(_Visit(b, V[b.cols], K, 0, 0))
        else:
            visits.append(_Visit(b, None, cap, K // cap, K % cap))
    return visits


def _fold(fn, acc, visits: list[_Visit], V):
    """``acc`` plus ``fn(block, its V rows)`` summed over every visit of every group, in block order."""
    add = lambda a, b: jax.tree_util.tree_map(jnp.add, a, b)   # noqa: E731

    def piece(block, start, size):
        part = jax.tree_util.tree_map(lambda a: jax.lax.dynamic_slice_in_dim(a, start, size, 0), block)
        return fn(part, V[part.cols])

    for v in visits:
        if v.rows is not None:
            acc = add(acc, fn(v.block, v.rows))
            continue
        acc = jax.lax.fori_loop(0, v.n_chunks, lambda c, acc, v=v: add(acc, piece(v.block, c * v.chunk, v.chunk)), acc)
        if v.tail:
            acc = add(acc, piece(v.block, v.block.cols.shape[0] - v.tail, v.tail))
    return acc


def _block_logits(u, block: CellBlocks, rows_of_V):
    return jnp.einsum("klr,kr->kl", rows_of_V, u[block.rows], precision=PRECISION)


def refit_rows_on_blocks(U: chex.Array, V: chex.Array, blocks: tuple[CellBlocks, ...], n_examples: int,
                         settings: FitSettings, *, filled: FilledPrefix | None = None, visits=None) -> chex.Array:
    """`refit_rows` (the same objective and optimizer) computed on the observed cells only.

    Costs ``O(|Omega| r)`` per epoch instead of ``O(m n r)``: the ``V`` rows of
    every observed cell are gathered (once per refit, or a cache-sized chunk
    at a time on a CPU, see `chunk_bytes`), and the gradient of the BCE
    term is written out,

        dL/du_i = (1/|Omega|) sum_{(i,j) in Omega} (sigmoid(u_i . v_j) - S_ij) v_j + lam/(m + n) u_i
                  + (kappa / |Omega|) (u_i - ubar)   (``settings.shrink``, 0 by default;
                                                      ``P (u_i - mean)`` under a `RowPrior`),

    as two batched contractions and a ``segment_sum`` per block (a third
    less work than differentiating the loss, which also evaluates it).
    ``visits``: `plan_visits` of these blocks, when the caller has it.
    """
    gradient = _block_gradient(U, V, blocks, n_examples, settings, filled=filled, visits=visits)
    return _descend(U, gradient, settings)


def continue_refit_on_blocks(U: chex.Array, opt_state, V: chex.Array, blocks: tuple[CellBlocks, ...],
                             n_examples: int, settings: FitSettings, *, filled: FilledPrefix | None = None):
    """`refit_rows_on_blocks` continuing one optimizer run: ``settings.epochs`` steps from
    ``opt_state`` (``settings.optimizer.init(U)`` before the first), returning ``(U, opt_state)``.

    Carried from refit to refit, Adam's moment estimates (and its bias correction) keep what the
    earlier refits learnt of each row's gradient scale, instead of restarting from zero moments,
    whose first steps move every coordinate by about the learning rate whatever the gradient.
    The objective is the same, so this changes only how fast the refit approaches its minimum.
    """
    gradient = _block_gradient(U, V, blocks, n_examples, settings, filled=filled)
    return _descend_from(U, opt_state, gradient, settings)


def _block_gradient(U, V, blocks, n_examples, settings, *, filled=None, visits=None):
    """The refit objective's gradient in ``u`` over the observed cells of ``blocks``
    (see `refit_rows_on_blocks`)."""
    m = U.shape[0]
    V = jax.lax.stop_gradient(V)
    visits = _plan(V, blocks, filled) if visits is None else visits
    count = jnp.maximum(sum(jnp.sum(b.valid) for b in blocks), 1).astype(U.dtype)

    def data_gradient(u, block, rows_of_V):
        residual = jnp.where(block.valid, jax.nn.sigmoid(_block_logits(u, block, rows_of_V)) - block.scores, 0.0)
        per_block = jnp.einsum("klr,kl->kr", rows_of_V, residual, precision=PRECISION)
        return jax.ops.segment_sum(per_block, block.rows, m)

    def gradient(u):
        data = _fold(lambda b, g: data_gradient(u, b, g), jnp.zeros_like(u), visits, V)
        return (data + prior_gradient(u, settings)) / count + settings.lam / (m + n_examples) * u

    return gradient


def block_prediction_sums(U: chex.Array, V: chex.Array, blocks: tuple[CellBlocks, ...],
                          filled: FilledPrefix | None = None, visits=None) -> tuple[chex.Array, chex.Array]:
    """Per model row, the sums of ``f = sigmoid(u_i . v_j)`` and of ``f^2`` over the valid cells of ``blocks``."""
    m = U.shape[0]
    visits = _plan(V, blocks, filled) if visits is None else visits

    def sums(block, rows_of_V):
        f = jnp.where(block.valid, jax.nn.sigmoid(_block_logits(U, block, rows_of_V)), 0.0)
        first, second = _sum_and_sum_of_squares(f)
        return jax.ops.segment_sum(first, block.rows, m), jax.ops.segment_sum(second, block.rows, m)

    zeros = jnp.zeros(m, U.dtype)
    return _fold(sums, (zeros, zeros), visits, V)


def plan_visits(V: chex.Array, blocks: tuple[CellBlocks, ...], filled: FilledPrefix | None = None):
    """How a refit visits ``blocks`` (gathering the rows of groups visited whole); pass it to
    `refit_rows_on_blocks` and `block_prediction_sums` so they share one gather."""
    return _plan(jax.lax.stop_gradient(V), blocks, filled)


def _sum_and_sum_of_squares(x):
    """Row sums of ``x`` and of ``x * x``, as contractions: XLA on CPU runs the two-output
    reduction ``jnp.sum(x, 1), jnp.sum(x * x, 1)`` unvectorized, 4x slower."""
    ones = jnp.ones(x.shape[-1], x.dtype)
    return jnp.matmul(x, ones, precision=PRECISION), jnp.einsum("...n,...n->...", x, x, precision=PRECISION)


#: Bytes of dense predictions (per repetition) that `prediction_row_sums` forms at a time on
#: a CPU: a few rows of ``sigmoid(U V^T)`` are made and summed while in cache, instead of the whole
#: ``(m, n)`` matrix written out and read back (48 MB per repetition at 1,000 x 12,032). Measured
#: on 2 cores under ``vmap`` (35 repetitions, rank 100): 61-64 ms per repetition whole, 20-25 ms a
#: row at a time; the demo's 40 x 1,000 (200 repetitions): 0.17 ms whole, 0.03 ms 8 rows at a time.
CPU_DENSE_BYTES = 32 * 1024


def prediction_row_sums(U: chex.Array, V: chex.Array, missing: chex.Array,
                        observed: chex.Array | None = None) -> tuple[chex.Array, chex.Array]:
    """Per row, the sums of ``sigmoid(u_i . v_j)`` and of its square over the cells neither ``missing``
    nor ``observed``.

    ``observed``: ``(m, ceil(n / 32))`` packed bits (`pulse_jax.stats.without_replacement.pack`) of
    cells to leave out too, unpacked a few rows at a time, so the sums over a model's *unobserved*
    cells (PULSE's ``F`` and ``Phi``) come from one pass over the dense predictions, with no second
    pass over the observed cells to subtract. On a CPU (see `chunk_bytes`) a few rows at a time:
    each row's sums are the same arithmetic, so only the rows' grouping changes."""
    n = V.shape[0]

    def rows_sums(u, miss, words):
        if words is not None:
            miss = miss | unpack(words, n)
        return _sum_and_sum_of_squares(jnp.where(miss, 0.0, predict(u, V)))

    m = missing.shape[0]
    rows = m if chunk_bytes() is None else min(m, max(1, CPU_DENSE_BYTES // (n * U.dtype.itemsize)))
    if rows >= m:
        return rows_sums(U, missing, observed)

    def part_of(a, start, size):
        return None if a is None else jax.lax.dynamic_slice_in_dim(a, start, size, 0)

    def one_block(b, sums):
        start = b * rows
        part = rows_sums(*(part_of(a, start, rows) for a in (U, missing, observed)))
        return tuple(jax.lax.dynamic_update_slice_in_dim(s, x, start, 0) for s, x in zip(sums, part))

    zeros = jnp.zeros(m, U.dtype)
    sums = jax.lax.fori_loop(0, m // rows, one_block, (zeros, zeros))
    tail = m % rows
    if tail:
        part = rows_sums(*(None if a is None else a[m - tail:] for a in (U, missing, observed)))
        sums = tuple(s.at[m - tail:].set(x) for s, x in zip(sums, part))
    return sums



def predict(U: chex.Array, V: chex.Array) -> chex.Array:
    """Predicted scores ``sigmoid(U V^T)``."""
    return jax.nn.sigmoid(_logits(U, V))


#: Stage 0 default for full-batch training of (U, V) on a train split. The
#: paper's "5 epochs" are mini-batch epochs; one full-batch step per epoch
#: needs more of them. Choose your own with cross-validation.
DEFAULT_STAGE0 = adam_settings(300, 0.05, 0.01)
DEFAULT_RANK = 16


def fit_example_embeddings(train, rank: int = DEFAULT_RANK, settings: FitSettings = DEFAULT_STAGE0,
                           seed: int = 0):
    """Fit stage 0 on a train matrix with NaN for missing cells; return ``V`` (n, rank).

    Host-level convenience around `fit` (validates, then one jitted fit).
    """
    return fit_train_factors(train, rank, settings, seed)[1]


def fit_train_factors(train, rank: int = DEFAULT_RANK, settings: FitSettings = DEFAULT_STAGE0,
                      seed: int = 0):
    """Stage 0 as `fit_example_embeddings`, returning both ``(U_train, V)`` as NumPy arrays:
    the train models' rows feed `row_prior_from_rows`."""
    train = np.asarray(train, dtype=np.float32)
    require(train.ndim == 2, f"train matrix must be 2-D, got shape {train.shape}")
    m, n = train.shape
    require(m >= 1 and n >= 1, f"train matrix is empty (shape {train.shape})")
    require(1 <= rank <= min(m, n),
            f"rank={rank} is not allowed: it must be between 1 and min(train models, examples) = {min(m, n)}")
    mask = ~np.isnan(train)
    require(mask.any(), "train matrix has no observed cell")
    U_train, V = jax.jit(fit, static_argnums=(3, 4))(seed_key(seed), jnp.asarray(np.nan_to_num(train)),
                                                     jnp.asarray(mask), int(rank), settings)
    return np.asarray(U_train), V
