"""Time the parts of one full-scale repetition on this machine (input to the performance work).

    python benchmarks/profile_parts.py                 # 1,000 models x 12,032 examples, rank 100
    python benchmarks/profile_parts.py --models 200    # smaller

Prints median seconds (compilation excluded) for: drawing every model's example
order (``bandit.draw_orders``), ``bandit.reset`` for UCB-E, one dense
``sigmoid(U V^T)`` with the row sums a refit recomputes, and the gradient of the
refit loss over a 540,800-cell observation log done with an XLA gather/scatter
and with a sorted ``segment_sum``, the two sparse alternatives to the dense
masked epoch the engine uses.
"""
from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from pulse_jax import bandit
from pulse_jax.estimators import ucbe


def timed(fn, *args, repeats=3):
    jax.block_until_ready(fn(*args))        # compile
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", type=int, default=1000)
    p.add_argument("--examples", type=int, default=12032)
    p.add_argument("--rank", type=int, default=100)
    p.add_argument("--cells", type=int, default=540_800)
    args = p.parse_args(argv)
    m, n, r, c = args.models, args.examples, args.rank, args.cells
    key = jax.random.PRNGKey(0)
    rng = np.random.default_rng(0)
    S = jnp.asarray((rng.random((m, n)) < 0.5).astype(np.float32))
    V = jnp.asarray(rng.normal(0, 0.1, (n, r)).astype(np.float32))
    U = jnp.asarray(rng.normal(0, 0.1, (m, r)).astype(np.float32))
    config = bandit.BanditConfig(n_models=m, n_examples=n, budget=m * 64 + 64, batch_size=64)
    rows = [
        ("draw_orders (per-model example orders)", timed(jax.jit(lambda k: bandit.draw_orders(k, m, n)[0]), key)),
        ("reset, UCB-E", timed(jax.jit(lambda k: bandit.reset(k, S, V[:, :1], config, ucbe())[1].ledger.obs_sum), key)),
        ("dense sigmoid(U V^T) + row sums", timed(jax.jit(lambda u: (jax.nn.sigmoid(u @ V.T).sum(1))), U)),
    ]
    mi = jnp.asarray(rng.integers(0, m, c))
    ei = jnp.asarray(rng.integers(0, n, c))
    s = jnp.asarray((rng.random(c) < 0.5).astype(np.float32))

    def loss(u):
        z = jnp.sum(u[mi] * V[ei], -1)
        return jnp.mean(jnp.logaddexp(0.0, z) - s * z)

    order = jnp.argsort(mi)
    mis, eis, ss = mi[order], ei[order], s[order]

    def sorted_grad(u):
        z = jnp.sum(u[mis] * V[eis], -1)
        w = (jax.nn.sigmoid(z) - ss) / c
        return jax.ops.segment_sum(w[:, None] * V[eis], mis, m, indices_are_sorted=True)

    rows += [(f"gather/scatter gradient over {c:,} cells", timed(jax.jit(jax.grad(loss)), U)),
             (f"sorted segment_sum gradient over {c:,} cells", timed(jax.jit(sorted_grad), U))]
    print(f"{m} models x {n} examples, rank {r}, backend {jax.default_backend()}")
    for name, seconds in rows:
        print(f"  {name:<48} {seconds * 1000:9.1f} ms")


if __name__ == "__main__":
    main()
