"""Many repetitions of one method as one ``vmap``-ed, ``jit``-compiled program.

Repetition ``r`` uses the key ``fold_in(PRNGKey(seed), r)``, whatever the
chunking, so chunk sizes never change results, and two methods run with the
same seed share every random draw (paired comparisons).
"""
from __future__ import annotations

import dataclasses
import functools
import os
import sys
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from pulse_jax import engine
from pulse_jax.stats import factorization, without_replacement as sampling
from pulse_jax.analysis.metrics import SimulationResult
from pulse_jax.engine import BanditConfig
from pulse_jax.errors import PulseInputError, require
from pulse_jax.engine.params import BanditParams, RunParams, check_params
from pulse_jax.stats.seeds import check_seed, seed_key

#: Memory the default chunk size aims to stay within (bytes).
DEFAULT_MEMORY_BUDGET = 4 * 1024**3
#: On a CPU, more repetitions per chunk than this only add cache misses: a 12-point x 200-repetition
#: ``sweep`` of PULSE on the demo's setting took 22.5 s with ``chunk_size=2400`` and 16.2 s with 256 (2 cores).
CPU_MAX_CHUNK = 256


def cpu_workers() -> int:
    """Chunks a CPU runs at once: one per core this process may use. XLA:CPU runs most of a step's
    operations, and all of a refit's, on the calling thread, so one chunk keeps about one core busy;
    chunks launched from one thread each run one after another, from several threads at once
    (docs/performance.md, "Chunks at once on a CPU")."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:      # no affinity on this platform (macOS, Windows)
        return max(1, os.cpu_count() or 1)


def device_memory_budget(device=None) -> int:
    """Bytes one chunk may use on ``device``: 4 GiB on a CPU, 60% of an accelerator's memory pool.

    An accelerator's pool (``memory_stats()["bytes_limit"]``, what JAX
    preallocated) holds the compiled program's temporaries too, hence 60%.
    """
    device = device if device is not None else jax.devices()[0]
    if device.platform == "cpu":
        return DEFAULT_MEMORY_BUDGET
    try:
        limit = (device.memory_stats() or {}).get("bytes_limit", 0)
    except Exception:   # some backends do not report memory
        limit = 0
    return int(0.6 * limit) if limit else DEFAULT_MEMORY_BUDGET


def default_chunk_size(config: BanditConfig, rank: int, reps: int, uses_predictions: bool = True,
                       memory_budget: int | None = None) -> int:
    """Repetitions per compiled batch so that the working set fits ``memory_budget``.

    Per repetition: the packed observed mask (``m ceil(n/32)`` words), the
    initial draws (``B`` slots per model, resolved in order), a step's ``B x B``
    draw comparisons, the per-step records and,
    for methods that refit, the pull log, two dense ``(m, n)`` float32
    prediction arrays, the ``(m, r)`` factors with their optimizer moments, and
    the gathered ``V`` rows: of every observed cell, or of one chunk where the
    refit gathers chunk by chunk (`pulse_jax.stats.factorization.chunk_bytes`,
    decided like the kernel's, by JAX's default backend).
    (At 1,000 x 12,032, rank 100, 400,000 bandit cells: 96 MB per PULSE
    repetition on a CPU, 282 MB on an accelerator.)
    """
    memory_budget = memory_budget or device_memory_budget()
    m, n, B = config.n_models, config.n_examples, config.batch_size
    records = config.n_steps * (1 + (m if config.record_estimates else 0)) if config.record_steps else 1
    per_rep = 4 * (m * sampling.n_words(n) + 2 * m * B + B * B + 4 * records)
    if uses_predictions:
        cells = config.n_steps * B + m * config.init_cells_per_model
        chunk = factorization.chunk_bytes()
        gathered = 4 * cells * rank if chunk is None else chunk
        per_rep += gathered + 4 * (2 * m * n + 2 * cells + 4 * m * rank)   # log: examples + scores
    return int(max(1, min(reps, memory_budget // max(per_rep, 1))))


def repetition_mesh(devices=None) -> jax.sharding.Mesh:
    """A one-axis mesh (``"reps"``) over every device JAX sees, across hosts under ``jax.distributed``."""
    return jax.sharding.Mesh(np.asarray(devices if devices is not None else jax.devices()), ("reps",))


# Each entry holds compiled programs, and on the CPU each loaded program takes several hundred memory
# mappings (a tiny PULSE run: about 900; Linux allows 65,530 per process by default): 32 entries stay
# far from that limit in a long notebook session.
@functools.lru_cache(maxsize=32)
def compiled_runner(config: BanditConfig, plugins: engine.Plugins, mesh: jax.sharding.Mesh | None = None,
                    follow: bool = False):
    """``jit(vmap(make_run(config, plugins)))`` over ``(key, params)`` pairs (and each item's ``choices``
    with ``follow``), cached so repeated calls reuse the executable: parameters are traced, so new
    values never recompile.

    With a ``mesh``, the pairs are split along its ``"reps"`` axis with
    ``shard_map``: each device runs its own repetitions with the score matrix
    and ``V`` replicated, and no device ever talks to another.
    """
    per_item = (0,) * (2 if follow else 1)
    run = engine.make_batched_run(config, plugins, follow) if config.concurrency == 1 else \
        engine.make_concurrent_run(config, plugins)

    def batched(keys, scores, V, start, params, choices=None):
        return run(keys, scores, V, params, choices, start)

    if mesh is None or mesh.size == 1:
        return jax.jit(batched)
    P = jax.sharding.PartitionSpec
    specs = (P("reps"), P(), P(), P()) + (P("reps"),) * len(per_item)
    return jax.jit(jax.shard_map(batched, mesh=mesh, in_specs=specs, out_specs=P("reps"),
                                 check_vma=False))   # the scan carries start replicated, become per-device


def _interactive() -> bool:
    """A person is watching: a terminal on stderr, or a Jupyter / Colab kernel (never under pytest)."""
    if "PYTEST_CURRENT_TEST" in os.environ:
        return False
    if "ipykernel" in sys.modules:
        return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def simulate(scores, config: BanditConfig, plugins="pulse", *, params: BanditParams | None = None, V=None,
             reps: int = 100, seed: int = 0, chunk_size: int | None = None,
             progress: bool | Callable[[int, int, float], None] | None = None, model_names=None, devices=None,
             follow=None, init_U=None, row_prior=None, cost=None) -> SimulationResult:
    """Run ``reps`` repetitions of ``plugins``: a `pulse_jax.Plugins` (estimator, sampling rule, stopping
    rule), or an estimator ("ucbe", "pulse", "naive", "package.module:attribute": `pulse_jax.registry`)
    with the paper's index rule spending the whole budget.

    Args:
      scores: (m, n) true scores in [0, 1] of the candidates; NaN marks a missing cell (each model's
        benchmark is then the examples it has a score for).
      config: static run parameters; ``config.n_models/n_examples`` must match.
      params: the traced numbers: a dict ``{name or path: value}`` over the defaults (e.g.
        ``{"delta": 0.1, "rule.exploration": 0.5, "estimator.fixed_lambda": 0.5}``), a
        `pulse_jax.RunParams`, or a `pulse_jax.BanditParams` (the engine's numbers);
        default: the paper's. New values reuse the compiled program.
      V: (n, r) example embeddings from the train split (required by PULSE and
        Naive-Pooling; see `pulse_jax.stats.factorization.fit_example_embeddings`).
      reps: number of repetitions.
      seed: base seed (repetition ``r`` uses ``fold_in(PRNGKey(seed), r)``).
      chunk_size: repetitions per compiled batch (default: from the problem size, `default_chunk_size`;
        a CPU runs one chunk per core at once, `cpu_workers`). Does not change results.
      progress: True to print a progress bar to stderr, False for none, None
        (the default) for a bar only when a person is watching (a terminal or a
        Jupyter/Colab kernel; not under pytest or with output redirected), or a callback
        ``(done, total, seconds)``. Reported as each chunk's results arrive
        (on accelerators, while the next chunk is already running).
      devices: the devices to split the repetitions over (default: all of
        ``jax.devices()``, i.e. every GPU / TPU core, or every host's devices
        after ``jax.distributed.initialize()``). Results do not depend on it.
      follow: ``(reps, n_steps)`` model indices (-1: no pull), e.g. another run's ``chosen``:
        repetition ``r`` pulls ``follow[r, t - 1]`` at step ``t`` instead of choosing. With the
        same seed this repeats that run's sample path on any backend (``backend_agreement.py``).
      init_U: ``(m, r)`` rows of ``U`` the first fit starts from (zeros by default; see
        `pulse_jax.engine.make_run`). With ``init_refit_epochs = refit_epochs = 0`` in
        ``config`` the predictions stay ``sigmoid(init_U V^T)``: e.g. the true probabilities'
        factors, an oracle (``benchmarks/paper/paper_scale_configs.py``).
      row_prior: a `pulse_jax.RowPrior` (``row_prior_from_rows(U_train)``) every refit pulls each row
        towards, with weight ``params.refit_prior`` (> 0; 1: the MAP row); rows start from its mean unless
        ``init_U`` is given. Fits use observed cells only, so estimates stay valid whatever the prior.
      cost: what a cell costs (any unit), ``(m,)`` per model or ``(m, n)`` per cell: ``money`` adds up
        the cells paid for, the rules spend by it and `pulse_jax.cheapest_within` / `pulse_jax.cost_front`
        rank by it (`pulse_jax.rules`). None: every cell costs 1 (``money`` counts cells).
    """
    if isinstance(params, BanditParams):
        check_params(params)     # the engine's numbers, refused before anything else
    check_seed(seed)   # refuses a bad seed before anything runs
    reps = _count(reps, "reps")
    config, plugins, scores, V = prepare_run(scores, config, plugins, V)
    params = engine.resolve_params(params, plugins)
    engine.check_levels(config, plugins, params)
    follow = None if follow is None else _check_follow(follow, reps, config)
    start = start_rows(init_U, row_prior, config, plugins.estimator, V, params)._replace(
        cost=check_cost(cost, scores, stop=plugins.stop))
    stacked = jax.tree_util.tree_map(lambda v: np.full(reps, v, np.float32), params)
    out, seconds, compile_seconds = execute(scores, config, plugins, V, np.arange(reps), stacked, seed=seed,
                                            chunk_size=chunk_size, progress=progress, devices=devices, follow=follow,
                                            start=start)
    return result_from(out, plugins, config, params, seed, scores, seconds=seconds,
                       compile_seconds=compile_seconds, model_names=model_names, cost=start.cost)


def _count(value, name: str) -> int:
    require(is_count(value), f"{name} must be a positive integer, got {value!r}")
    return int(value)


def check_cost(cost, scores: np.ndarray, where: str = "cost", stop=None) -> np.ndarray | None:
    """``cost`` (``(m,)`` per model or ``(m, n)`` per cell) as an ``(m, n)`` float32 matrix, 0 where a
    score is missing; or a one-line error naming the model (and example) that is wrong. Every cost must
    be a real, finite number >= 0 small enough for a run's money to add up in float32, and every model's
    mean cost per cell > 0 (the rules weigh models by it). ``stop``: a stopping rule that ranks the
    models by cost (``uses_cost``) needs one."""
    require(cost is not None or stop is None or not stop.uses_cost,
            f"stopping rule {getattr(stop, 'name', stop)!r} ranks the models by cost, and no {where} was given: "
            f"pass {where}= (each model's cost per cell), or another stopping rule")
    if cost is None:
        return None
    m, n = scores.shape
    require(not np.iscomplexobj(np.asarray(cost)), f"{where} must be real numbers, got complex values")
    try:
        arr = np.asarray(cost, dtype=np.float64)
    except (TypeError, ValueError):
        raise PulseInputError(f"{where} must be numbers: an (n_models,) vector or an (n_models, n_examples) "
                              f"matrix, got {type(cost).__name__}") from None
    require(arr.shape in ((m,), (m, n)), f"{where} must have shape (n_models,) = ({m},) or (n_models, n_examples) = "
                                         f"({m}, {n}), got {arr.shape}")
    arr = np.broadcast_to(arr[:, None] if arr.ndim == 1 else arr, (m, n))
    scored = ~np.isnan(scores)
    bad = np.argwhere(scored & ~(np.isfinite(arr) & (arr >= 0)))
    if len(bad):
        r, c = bad[0]
        at = f"model {r}" if np.ndim(cost) == 1 else f"row {r}, column {c}"
        raise PulseInputError(f"{where} must be finite and >= 0: {at} is {arr[r, c]}")
    arr = np.where(scored, arr, 0.0)
    # money adds up cells x cost in float32: a run's whole spend must stay finite (and far from overflow)
    with np.errstate(over="ignore"):
        total = float(arr.sum())
    require(total <= 1e30, f"{where} is too large to add up: the whole matrix costs {total:.3g} (float32 money "
                           "would overflow); rescale the costs (e.g. to thousands)")
    mean = arr.sum(1) / np.maximum(scored.sum(1), 1)
    free = np.flatnonzero(mean <= 0)
    require(not len(free), f"{where}: model {free[0] if len(free) else 0} costs nothing per cell; give every model a "
                           "positive cost (the rules weigh each model's pulls by its price)")
    return arr.astype(np.float32)


def _check_init_U(init_U, config: BanditConfig, estimator, V) -> np.ndarray:
    """``init_U`` as a finite ``(m, r)`` float32 array (zeros when None), or a one-line error."""
    if init_U is None:
        return np.zeros((config.n_models, V.shape[1]), np.float32)
    require(estimator.uses_predictions, f"init_U: method {estimator.name!r} makes no predictions")
    arr = np.asarray(init_U, dtype=np.float32)
    want = (config.n_models, V.shape[1])
    require(arr.shape == want, f"init_U must have shape (n_models, rank of V) = {want}, got {arr.shape}")
    require(np.isfinite(arr).all(), "init_U contains NaN or inf")
    return arr


def start_rows(init_U, row_prior, config: BanditConfig, estimator, V, params) -> engine.Start:
    """``Start(init_U, row_prior)`` checked; the rows start from the prior's mean unless ``init_U`` is given."""
    row_prior = _check_row_prior(row_prior, estimator, V, params)
    if init_U is None and row_prior is not None:
        init_U = np.tile(row_prior.mean, (config.n_models, 1))
    return engine.Start(_check_init_U(init_U, config, estimator, V), row_prior)


def _check_row_prior(row_prior, estimator, V, params: RunParams):
    """``row_prior`` as a float32 `pulse_jax.RowPrior` of ``V``'s rank, or a one-line error."""
    if row_prior is None:
        return None
    require(isinstance(row_prior, factorization.RowPrior),
            f"row_prior must be a pulse_jax.RowPrior (e.g. row_prior_from_rows(U_train)), got "
            f"{type(row_prior).__name__}")
    require(estimator.uses_predictions, f"row_prior: method {estimator.name!r} makes no predictions")
    rank = V.shape[1]
    mean, precision = np.asarray(row_prior.mean, np.float32), np.asarray(row_prior.precision, np.float32)
    require(mean.shape == (rank,), f"row_prior.mean must have shape (rank of V,) = ({rank},), got {mean.shape}")
    require(precision.shape == (rank, rank),
            f"row_prior.precision must have shape (rank, rank) = ({rank}, {rank}), got {precision.shape}")
    require(np.isfinite(mean).all() and np.isfinite(precision).all(), "row_prior contains NaN or inf")
    require(np.allclose(precision, precision.T, rtol=1e-4, atol=1e-6), "row_prior.precision must be symmetric")
    require(np.linalg.eigvalsh(precision.astype(np.float64)).min() > 0,
            "row_prior.precision must be positive definite")
    require(np.any(np.asarray(params.refit_prior) > 0),
            "row_prior is given but params.refit_prior is 0, so it would change nothing: "
            "set refit_prior=1 for the maximum a posteriori rows")
    return factorization.RowPrior(mean, precision)


def _check_follow(follow, reps: int, config: BanditConfig) -> np.ndarray:
    """``follow`` as an ``(reps, n_steps)`` int32 array of model indices or -1, or a one-line error."""
    require(config.concurrency == 1, f"follow: a run with concurrency={config.concurrency} cannot follow given "
                                     "choices (a choice there is made with its batches in flight)")
    arr = np.asarray(follow)
    want = (reps, config.n_steps)
    require(arr.shape == want, f"follow must have shape (reps, n_steps) = {want}, got {arr.shape}")
    integral = arr.dtype.kind in "iu" or (arr.dtype.kind == "f" and np.isfinite(arr).all()
                                           and np.array_equal(arr, np.round(arr)))
    require(integral, f"follow must hold model indices (integers), got dtype {arr.dtype}")
    bad = np.argwhere((arr < -1) | (arr >= config.n_models))
    if len(bad):
        raise PulseInputError(f"follow[{bad[0][0]}, {bad[0][1]}] = {arr[tuple(bad[0])]} is not a model index "
                              f"in [0, {config.n_models}) nor -1")
    return arr.astype(np.int32)


def is_count(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)) and x >= 1


def prepare_run(scores, config: BanditConfig, plugins, V):
    """Validate the inputs of a simulation or sweep; returns ``(config, plugins, scores, V)``."""
    require(isinstance(config, BanditConfig), f"config must be a pulse_jax.BanditConfig, got {type(config).__name__}")
    plugins = engine.check_compatible(config, plugins)
    estimator = plugins.estimator
    scores = np.asarray(scores, dtype=np.float32)
    require(scores.ndim == 2, f"scores must be a 2-D (models x examples) matrix, got shape {scores.shape}")
    require(scores.shape == (config.n_models, config.n_examples),
            f"scores have shape {scores.shape} but config says ({config.n_models}, {config.n_examples})")
    scored = ~np.isnan(scores)
    bad = np.argwhere(scored & ~((scores >= 0) & (scores <= 1)))
    if len(bad):
        r, c = bad[0]
        raise PulseInputError(f"scores must lie in [0, 1]: row {r}, column {c} is {scores[r, c]}")
    if not scored.all():   # missing cells: each model's benchmark is the examples it has a score for
        config = dataclasses.replace(config, populations=tuple(int(k) for k in scored.sum(axis=1)))
    if estimator.uses_predictions:
        require(V is not None, f"method {estimator.name!r} needs side information: pass V (example embeddings "
                               "fitted on a train split)")
        V = np.asarray(V, dtype=np.float32)
        require(V.ndim == 2 and V.shape[0] == config.n_examples,
                f"V must have shape (n_examples={config.n_examples}, rank), got {V.shape}")
        require(np.isfinite(V).all(), "V contains NaN or inf")
    else:
        V = np.zeros((config.n_examples, 1), np.float32)
    return config, plugins, scores, V


def execute(scores, config: BanditConfig, plugins: engine.Plugins, V, rep_index, params: RunParams, *, seed: int,
            chunk_size=None, progress=False, devices=None, follow=None, start: engine.Start | None = None):
    """Run the items ``k`` = (repetition ``rep_index[k]``, parameters ``params[k]``) as one compiled program
    (each following the choices ``follow[k]`` when given: see `simulate`).

    Repetition ``r`` uses the key ``fold_in(PRNGKey(seed), r)`` whatever its
    parameters (common random numbers across sweep points) and whatever the
    chunking. Returns ``(RunResult of NumPy arrays with a leading item axis,
    seconds, compile_seconds)``.
    """
    total = len(rep_index)
    rank = V.shape[1]
    require(devices is None or len(devices) >= 1, "devices: pass at least one device (or None for all)")
    require(chunk_size is None or is_count(chunk_size), f"chunk_size must be a positive integer, got {chunk_size!r}")
    mesh = repetition_mesh(devices)
    workers = cpu_workers() if mesh.size == 1 and mesh.devices.flat[0].platform == "cpu" else 1
    chunk = _chunk_of(config, plugins.estimator, rank, total, chunk_size, mesh, workers=workers)

    run = compiled_runner(config, plugins, mesh if mesh.size > 1 else None,
                          follow is not None)
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    by_rep = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("reps"))
    start = start or engine.Start()
    init_U = np.zeros((config.n_models, rank), np.float32) if start.init_U is None else start.init_U
    scores_dev = _put(scores, replicated)
    V_dev = (_put(V, replicated), engine.Start(_put(init_U, replicated), None if start.row_prior is None else
                                               jax.tree_util.tree_map(lambda a: _put(a, replicated), start.row_prior),
                                               None if start.cost is None else _put(start.cost, replicated)))
    if progress is None:
        progress = _interactive()
    report = _progress_printer(plugins.estimator.name) if progress is True else (progress or None)
    rep_index = np.asarray(rep_index)
    params = jax.tree_util.tree_map(lambda v: np.asarray(v, np.float32), params)

    def inputs(start):
        """Keys, parameters (and choices) of items ``start .. start + chunk`` (the last item repeated as padding)."""
        take = np.minimum(np.arange(start, start + chunk), total - 1)
        keys = np.asarray(rep_keys_for(seed, rep_index[take]))
        items = (_put(keys, by_rep), jax.tree_util.tree_map(lambda v: _put(v[take], by_rep), params))
        return items if follow is None else items + (_put(follow[take], by_rep),)

    # Compile ahead of time so its cost is reported apart from the run. ``run`` is the cached jit of
    # this configuration and JAX keeps its executables, so a later call with the same shapes (any
    # parameter values, any seed) traces and compiles nothing.
    start_time = time.perf_counter()
    compiled = run.lower(*_with_data(inputs(0), scores_dev, V_dev)).compile()
    compile_seconds = time.perf_counter() - start_time
    launch = lambda start: compiled(*_with_data(inputs(start), scores_dev, V_dev))   # noqa: E731
    out = _run_chunks(launch, total, chunk, report, start_time, workers)
    return out, time.perf_counter() - start_time, compile_seconds


#: The share of padded items a run accepts to keep the compiled chunk's shape (see `_chunk_of`).
MAX_PADDING = 1 / 3


def _chunk_of(config: BanditConfig, estimator, rank: int, total: int, chunk_size, mesh, *, workers: int = 1) -> int:
    """Items per compiled call, a multiple of the device count: ``chunk_size``, or sized from the device's
    memory (capped on a CPU, and split between the ``workers`` chunks a CPU runs at once, so each core
    gets one). More items than one chunk run in chunks of exactly that size, the last one padded (its
    extra items are computed and dropped), so any larger count reuses the compiled program (200 then
    500 repetitions: one compile), unless the padding would exceed `MAX_PADDING` of the items; then the
    chunks are made equal, and smaller, at the price of a program of their own."""
    device = mesh.devices.flat[0]
    chunk = int(chunk_size) if chunk_size else default_chunk_size(
        config, rank, max(total, 1), estimator.uses_predictions, device_memory_budget(device) // workers) * mesh.size
    if not chunk_size and device.platform == "cpu":
        chunk = min(chunk, CPU_MAX_CHUNK * mesh.size, -(-max(total, 1) // workers))
    def up(x: int, k: int) -> int:         # x rounded up to a multiple of k
        return -(-x // k) * k

    chunk = up(chunk, mesh.size)
    if total <= chunk:
        return up(total, mesh.size)
    if up(total, chunk) - total <= MAX_PADDING * total:
        return chunk
    n_chunks = -(-total // chunk)                 # as few chunks as fit, then made equal
    return up(-(-total // n_chunks), mesh.size)


def _run_chunks(launch, total: int, chunk: int, report, start_time: float, workers: int = 1):
    """Every chunk's results, concatenated. On accelerators chunk k + 1 is dispatched before chunk k is
    fetched, so the device never waits on the host (executions on one device run in order). On a CPU
    ``workers`` threads each launch and fetch one chunk at a time (`cpu_workers`)."""
    if workers > 1 and total > chunk:
        return _run_chunks_at_once(launch, total, chunk, report, start_time, workers)
    overlap = jax.default_backend() != "cpu"
    parts, in_flight = [], None
    for start in list(range(0, total, chunk)) + [None]:
        launched = (start, launch(start)) if start is not None and overlap else None
        if in_flight is not None:
            done_start, result = in_flight
            count = min(chunk, total - done_start)
            parts.append(jax.tree_util.tree_map(lambda a: a[:count], _fetch(result)))
            if report:
                report(done_start + count, total, time.perf_counter() - start_time)
        if start is not None and not overlap:
            launched = (start, launch(start))
        in_flight = launched
    return jax.tree_util.tree_map(lambda *a: np.concatenate(a), *parts)


def _run_chunks_at_once(launch, total: int, chunk: int, report, start_time: float, workers: int):
    """`_run_chunks` on a CPU: up to ``workers`` chunks running at once, each launched and fetched by a
    thread of its own; results (and progress) in chunk order. Every chunk is the same computation
    whichever thread runs it, so the results are those of one chunk at a time, to the bit."""
    from concurrent.futures import ThreadPoolExecutor

    starts = list(range(0, total, chunk))
    parts = []
    pool = ThreadPoolExecutor(max_workers=min(workers, len(starts)), thread_name_prefix="pulse-jax-chunk")
    try:
        futures = [pool.submit(lambda s=s: _fetch(launch(s))) for s in starts]
        for start, future in zip(starts, futures):
            count = min(chunk, total - start)
            parts.append(jax.tree_util.tree_map(lambda a: a[:count], future.result()))
            if report:
                report(start + count, total, time.perf_counter() - start_time)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)     # an interrupt waits only for the chunks running
    return jax.tree_util.tree_map(lambda *a: np.concatenate(a), *parts)


def _with_data(items, scores, side):
    """The run's arguments: the items' keys, the shared data (scores, V, the rows' `Start`), then the
    items' parameters (and choices)."""
    return (items[0], scores) + tuple(side) + tuple(items[1:])


def rep_keys_for(seed: int, reps) -> jax.Array:
    """The keys of repetitions ``reps`` (any integers): ``fold_in(PRNGKey(seed), r)``."""
    base = seed_key(seed)
    return jax.vmap(lambda r: jax.random.fold_in(base, r))(jnp.asarray(reps))


def result_from(out, plugins: engine.Plugins, config: BanditConfig, params: RunParams, seed: int, scores, *, seconds: float,
                compile_seconds: float, model_names=None, cost=None) -> SimulationResult:
    """A `SimulationResult` from the stacked run outputs (NumPy, leading axis = repetition); ``cost`` the
    run's checked ``(m, n)`` cell costs (None: none)."""
    reps = out.init_best.shape[0]
    init_spent = np.full((reps, 1), config.init_cells, dtype=np.int64)
    money = np.concatenate([np.asarray(out.init_money, np.float64)[:, None], np.asarray(out.steps.money, np.float64)],
                           axis=1)
    if cost is not None:
        scored = ~np.isnan(np.asarray(scores, np.float64))
        cost = np.asarray(cost, np.float64).sum(1) / np.maximum(scored.sum(1), 1)
    return SimulationResult(
        method=plugins.estimator.name, config=config, plugins=plugins, seed=seed, true_means=np.nanmean(np.asarray(scores, np.float64), axis=1),
        best=np.concatenate([out.init_best[:, None], out.steps.best], axis=1).astype(np.int64),
        spent=np.concatenate([init_spent, out.steps.spent], axis=1).astype(np.int64),
        chosen=np.asarray(out.steps.chosen), step_info=_info_dict(out.steps.info),
        estimates=np.asarray(out.estimates, np.float64), radius=np.asarray(out.radius, np.float64),
        n_obs=np.asarray(out.n_obs), n_pulls=np.asarray(out.n_pulls),
        seconds=seconds, compile_seconds=compile_seconds,
        model_names=tuple(model_names) if model_names is not None else None,
        cs_low=np.asarray(out.cs_low, np.float64), cs_high=np.asarray(out.cs_high, np.float64),
        cs_seq_low=np.asarray(out.cs_seq_low, np.float64), cs_seq_high=np.asarray(out.cs_seq_high, np.float64),
        certified_spent=np.asarray(out.certified.spent, np.int64),
        certified_model=np.asarray(out.certified.model, np.int64),
        stopped=np.asarray(out.stopped, bool), claimed=np.asarray(out.claimed, bool),
        snapshot_cs=np.asarray(out.snapshots.cs, np.float64), snapshot_paper=np.asarray(out.snapshots.paper, np.float64),
        params=params, money=money, cost=cost,
        **({"step_estimates": np.asarray(out.steps.estimates), "step_low": np.asarray(out.steps.low),
            "step_high": np.asarray(out.steps.high)} if config.record_estimates else {}),
    )


def _info_dict(info) -> dict:
    """An estimator's per-step info pytree as ``{field: array}`` (a NamedTuple's fields, a dict, or leaves)."""
    if hasattr(info, "_asdict"):
        return {k: np.asarray(v) for k, v in info._asdict().items()}
    if isinstance(info, dict):
        return {str(k): np.asarray(v) for k, v in info.items()}
    return {f"info_{k}": np.asarray(v) for k, v in enumerate(jax.tree_util.tree_leaves(info))}


def _put(array, sharding):
    """Place a host array with ``sharding``; each process supplies the shards it holds (multi-host safe)."""
    array = np.asarray(array)
    return jax.make_array_from_callback(array.shape, sharding, lambda index: array[index])


def _fetch(tree):
    """Device results to NumPy; under ``jax.distributed`` every process gathers all repetitions."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        return multihost_utils.process_allgather(tree, tiled=True)
    return jax.device_get(tree)


def _progress_printer(name: str):
    def report(done, total, seconds):
        width = 30
        filled = int(width * done / total)
        end = "\n" if done == total else ""
        sys.stderr.write(f"\r  {name:<6} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} repetitions"
                         f"  {seconds:6.1f} s{end}")
        sys.stderr.flush()

    return report
