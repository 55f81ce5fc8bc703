"""One periodic refit of many repetitions on a CPU, done three ways, at several chunk sizes.

This times one refit like those of ``accelerator_report.py --quick`` (250 initial blocks and 375
log blocks of 64 cells, 40,000 cells, rank 32, 10 Adam epochs, random cells: only the cost matters)
for ``--reps`` repetitions:

* ``batched``: the full-batch refit under ``vmap``, each chunk of blocks holding the chunk budget per
  repetition, so R times it per chunk of the batch;
* ``one at a time``: the same refit, the repetitions taken one after another
  (`pulse_jax.stats.factorization.one_repetition_at_a_time`);
* ``one at a time, by model``: what the kernel runs on a CPU, every epoch of a few whole models done
  while their cells are in cache (`pulse_jax.stats.refit_by_model.refit_rows_by_model`).

Each budget in ``--bytes`` (0: whole groups, gathered once per refit as on accelerators) is compiled
once per way and timed three times (the minimum is reported)::

    python benchmarks/speed/refit_chunks.py --out docs/benchmarks/refit_chunks.json

Prints a table and writes ``--out`` (JSON) and the same path with ``.md``.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: common
import common  # noqa: E402


def main(argv=None) -> int:
    p = common.parser(__doc__, reps=100, out="results/refit_chunks.json")
    p.add_argument("--bytes", default="131072,32768,524288,0",
                   help="comma-separated chunk budgets per repetition, in bytes (0: whole groups)")
    args = p.parse_args(argv)
    import jax
    import jax.numpy as jnp

    from pulse_jax.engine import adam_refit
    from pulse_jax.stats import factorization as F
    from pulse_jax.stats.refit_by_model import refit_rows_by_model

    R, m, n, r, B, slots, used = args.reps, 250, 3008, 32, 64, 640, 375
    keys = jax.random.split(jax.random.PRNGKey(0), 5)
    V = 0.1 * jax.random.normal(keys[0], (n, r))
    U = 0.1 * jax.random.normal(keys[1], (R, m, r))

    def cells(count, k):
        """``count`` blocks of ``B`` random columns and 0/1 scores per repetition."""
        cols = jax.random.randint(keys[2 + k], (R, count, B), 0, n)
        return cols, jax.random.bernoulli(keys[4], 0.5, cols.shape).astype(jnp.float32)

    init_cols, init_scores = cells(m, 0)
    initial = F.CellBlocks(jnp.broadcast_to(jnp.arange(m), (R, m)), init_cols, init_scores, jnp.ones((R, m, B), bool))
    log_rows = jax.random.randint(keys[3], (R, slots), 0, m)
    log_cols, log_scores = cells(slots, 1)
    log = F.CellBlocks(log_rows, log_cols, log_scores, jnp.broadcast_to((jnp.arange(slots) < used)[None, :, None],
                                                                        (R, slots, B)))
    settings = adam_refit(10, 0.1, 0.01)

    filled = F.FilledPrefix(jnp.int32(used), 64)
    ways = {
        "batched": lambda U, initial, log: F.refit_rows_on_blocks(U, V, (initial, log), n, settings, filled=filled),
        "one at a time": F.one_repetition_at_a_time(
            lambda U, initial, log: F.refit_rows_on_blocks(U, V, (initial, log), n, settings, filled=filled)),
        "one at a time, by model": F.one_repetition_at_a_time(
            lambda U, initial, log: refit_rows_by_model(U, V, (initial, log), n, settings)),
    }
    rows, default = [], F.CPU_CHUNK_BYTES
    try:
        for size in (int(b) for b in args.bytes.split(",")):
            F.CPU_CHUNK_BYTES = size if size > 0 else 1 << 40
            for way, one in ways.items():
                refit = jax.jit(jax.vmap(one))
                refit(U, initial, log).block_until_ready()
                times = []
                for _ in range(3):
                    start = time.perf_counter()
                    refit(U, initial, log).block_until_ready()
                    times.append(time.perf_counter() - start)
                rows.append({"way": way, "bytes_per_repetition": size, "seconds": min(times)})
                print(f"{way}, {size or 'whole'}: {min(times) * 1000:.0f} ms", file=sys.stderr, flush=True)
    finally:
        F.CPU_CHUNK_BYTES = default
    lines = [f"One refit, {R} repetitions under vmap, {jax.default_backend()} (ms):", "",
             "| chunk budget per repetition | " + " | ".join(ways) + " |", "|---:|" + "---:|" * len(ways)]
    for size in dict.fromkeys(row["bytes_per_repetition"] for row in rows):
        times = [row["seconds"] for row in rows if row["bytes_per_repetition"] == size]
        lines.append(f"| {f'{size:,} B' if size else 'whole groups'} | " + " | ".join(f"{t * 1000:.0f}" for t in times)
                     + " |")
    text = "\n".join(lines)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"reps": R, "backend": jax.default_backend(), "rows": rows}, indent=2))
    out.with_suffix(".md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
