"""Time the parts of one full-scale repetition on this machine (what the engine spends its time on).

    python benchmarks/speed/profile_parts.py                 # 1,000 models x 12,032 examples, rank 100
    python benchmarks/speed/profile_parts.py --models 200    # smaller

Prints median seconds (compilation excluded) of: one example draw
(``sampling.draw``: Fisher-Yates choices, loop-free resolution, rank to
example), the kernel's ``init`` for UCB-E (1,000 initial draws), the initial refit
(50 epochs on the initial batches), the same with the empty pull log attached
(how the engine ran it before it skipped the log there), one periodic refit on
a full pull log (10 epochs), the dense ``sigmoid(U V^T)`` row sums a refit
recomputes, and, for comparison, one dense masked epoch (the engine's refit
before it worked on observed cells only).
"""
from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from pulse_jax import engine
from pulse_jax.stats import factorization, without_replacement as sampling
from pulse_jax.estimators import ucbe

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402


def timed(fn, *args, repeats=3):
    jax.block_until_ready(fn(*args))        # compile
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None):
    p = common.parser(__doc__, models=1000, rank=100)
    p.add_argument("--examples", type=int, default=12032)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--bandit-budget", type=int, default=400_000)
    args = p.parse_args(argv)
    m, n, r, B = args.models, args.examples, args.rank, args.batch
    steps = args.bandit_budget // B
    key = jax.random.PRNGKey(0)
    rng = np.random.default_rng(0)
    S = jnp.asarray((rng.random((m, n)) < 0.5).astype(np.float32))
    V = jnp.asarray(rng.normal(0, 0.1, (n, r)).astype(np.float32))
    U = jnp.asarray(rng.normal(0, 0.1, (m, r)).astype(np.float32))
    config = engine.BanditConfig(n_models=m, n_examples=n, budget=m * B + B, batch_size=B)
    row = sampling.empty_mask(1, n)[0]

    def block(K, L):
        return factorization.CellBlocks(jnp.asarray(rng.integers(0, m, K), jnp.int32),
                                        jnp.asarray(rng.integers(0, n, (K, L)), jnp.int32),
                                        jnp.asarray((rng.random((K, L)) < 0.5).astype(np.float32)),
                                        jnp.ones((K, L), bool))

    init, log = block(m, B), block(steps, B)
    mask = jnp.asarray(rng.random((m, n)) < (m * B + args.bandit_budget) / (m * n))
    rows = [
        ("one example draw (B examples)", timed(jax.jit(lambda k, w: sampling.draw(k, w, 100, n, B)), key, row)),
        ("reset, UCB-E (m initial draws)",
         timed(jax.jit(lambda k, s: engine.bind(config, ucbe()).init(k, s, V[:, :1], engine.resolve_params(None, engine.bind(config, ucbe()).plugins))[1].sums.obs_sum), key, S)),
        # (blocks passed as arguments, not closed over: XLA would constant-fold their gathers)
        (f"initial refit, 50 epochs on {m * B:,} cells",
         timed(jax.jit(lambda u, v, b: factorization.refit_rows_on_blocks(u, v, b, n, factorization.PAPER_INIT_REFIT)),
               U, V, (init,))),
        (f"initial refit with the empty {steps * B:,}-cell log attached",
         timed(jax.jit(lambda u, v, b: factorization.refit_rows_on_blocks(u, v, b, n, factorization.PAPER_INIT_REFIT)),
               U, V, (init, log._replace(valid=jnp.zeros_like(log.valid))))),
        (f"periodic refit, 10 epochs on {m * B + steps * B:,} cells",
         timed(jax.jit(lambda u, v, b: factorization.refit_rows_on_blocks(u, v, b, n, factorization.PAPER_REFIT)),
               U, V, (init, log))),
        ("dense sigmoid(U V^T) row sums and sums of squares",
         timed(jax.jit(lambda u, v, k: factorization.prediction_row_sums(u, v, k)), U, V, jnp.zeros((m, n), bool))),
        ("one dense masked epoch (gradient)",
         timed(jax.jit(jax.grad(lambda u, v, s, k: factorization.loss(u, v, s, k, 0.01))), U, V, S, mask)),
    ]
    print(f"{m} models x {n} examples, rank {r}, B {B}, backend {jax.default_backend()}")
    for name, seconds in rows:
        print(f"  {name:<52} {seconds * 1000:9.2f} ms")


if __name__ == "__main__":
    main()
