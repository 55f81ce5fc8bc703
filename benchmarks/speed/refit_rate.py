"""How fast one refit's epochs run: the arithmetic rate of `factorization.refit_rows_on_blocks`.

A refit like the last one of a full-scale run: 1,000 models' initial blocks (64 cells each) and a
pull log of 6,000 batches of 64 cells, rank 100, 10 Adam epochs, ``--reps`` repetitions under
``vmap`` (random cells; only the cost matters). Each epoch costs ``4 r`` floating-point operations
per observed cell (a dot product for the logit, a scaled row for the gradient)::

    python benchmarks/speed/refit_rate.py --out docs/benchmarks/refit_rate.json

Prints the rate and writes ``--out`` (JSON).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402


def main(argv=None) -> int:
    p = common.parser(__doc__, reps=20, out="results/refit_rate.json")
    args = p.parse_args(argv)
    import jax
    import jax.numpy as jnp

    from pulse_jax.stats import factorization as F
    from pulse_jax.engine import adam_refit

    m, n, r, B, K, epochs = 1000, 12032, 100, 64, 6000, 10
    V = jax.random.normal(jax.random.PRNGKey(0), (n, r)) * 0.1
    settings = adam_refit(epochs, 0.05, 0.01)

    def refit(seed, U):
        k1, k2, k3 = jax.random.split(jax.random.PRNGKey(seed), 3)
        init = F.CellBlocks(jnp.arange(m, dtype=jnp.int32), jax.random.randint(k1, (m, B), 0, n), jnp.zeros((m, B)),
                            jnp.ones((m, B), bool))
        log = F.CellBlocks(jax.random.randint(k2, (K,), 0, m), jax.random.randint(k3, (K, B), 0, n),
                           (jax.random.uniform(k3, (K, B)) < 0.5).astype(jnp.float32), jnp.ones((K, B), bool))
        filled = F.FilledPrefix(jnp.int32(K), 1000)
        blocks = (init, log)
        return F.refit_rows_on_blocks(U, V, blocks, n, settings, filled, F.plan_visits(V, blocks, filled))

    seeds, U = jnp.arange(args.reps), jnp.zeros((args.reps, m, r))
    run = jax.jit(jax.vmap(refit)).lower(seeds, U).compile()
    jax.block_until_ready(run(seeds, U))
    times = []
    for _ in range(3):
        start = time.perf_counter()
        jax.block_until_ready(run(seeds, U))
        times.append(time.perf_counter() - start)
    seconds = sorted(times)[1]
    cells = (K + m) * B
    gflops = 4 * r * cells * epochs * args.reps / seconds / 1e9
    row = {"backend": jax.default_backend(), "reps": args.reps, "cells_per_rep": cells, "rank": r, "epochs": epochs,
           "seconds_median_of_3": seconds, "gflop_per_s": gflops, "seconds_per_rep": seconds / args.reps}
    print(f"{jax.default_backend()}: {args.reps} repetitions x {cells:,} cells x {epochs} epochs, rank {r}: "
          f"{seconds:.2f} s (median of 3), {gflops:.1f} GFLOP/s, {seconds / args.reps * 1e3:.0f} ms per repetition")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(row, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
