"""What one write and one read of the persistent compilation cache cost as the folder fills.

For folders of 100, 1,000 and 3,000 entries (``--entries``; each ``--size`` bytes), times a write of a
new entry and a read of an existing one with the library's `FolderCache` and with JAX's own
size-limited cache (``LRUCache`` at the library's 8 GiB limit): the median of ``--repeats`` each.
Prints a table and writes JSON (and a Markdown table beside it).

    python benchmarks/speed/bench_compilation_cache.py
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: E402
from jax._src import lru_cache  # noqa: E402

from pulse_jax.compilation_cache import CACHE_MAX_BYTES, FolderCache  # noqa: E402


def _filled(folder: Path, entries: int, size: int) -> None:
    """``entries`` entries of ``size`` bytes, each with JAX's access-time file (both caches read them)."""
    value = os.urandom(size)
    for i in range(entries):
        (folder / f"jit_fill-{i:06d}-cache").write_bytes(value)
        (folder / f"jit_fill-{i:06d}-atime").write_bytes(time.time_ns().to_bytes(8, "little"))


def _median_ms(action, repeats: int) -> float:
    times = []
    for r in range(repeats):
        start = time.perf_counter()
        action(r)
        times.append(time.perf_counter() - start)
    return round(1e3 * statistics.median(times), 2)


def _row(kind: str, entries: int, size: int, repeats: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="pulse-jax-cache-bench-") as name:
        folder = Path(name)
        _filled(folder, entries, size)
        cache = FolderCache(name) if kind == "FolderCache" else lru_cache.LRUCache(name, max_size=CACHE_MAX_BYTES)
        value = os.urandom(size)
        write = _median_ms(lambda r: cache.put(f"jit_new-{r:06d}", value), repeats)
        read = _median_ms(lambda r: cache.get(f"jit_fill-{r % entries:06d}"), repeats)
    return {"cache": kind, "entries": entries, "entry_bytes": size, "write_ms": write, "read_ms": read}


def main() -> None:
    p = common.parser(__doc__, out=str(common.RESULTS / "compilation_cache.json"))
    p.add_argument("--entries", default="100,1000,3000", help="comma-separated folder sizes (entries)")
    p.add_argument("--size", type=int, default=100_000, help="bytes per entry")
    p.add_argument("--repeats", type=int, default=30, help="writes and reads timed per row")
    args = p.parse_args()
    rows = [_row(kind, int(n), args.size, args.repeats) for n in args.entries.split(",")
            for kind in ("FolderCache", "JAX LRUCache")]
    print(f"{'cache':<14} {'entries':>8} {'write (ms)':>11} {'read (ms)':>10}")
    for r in rows:
        print(f"{r['cache']:<14} {r['entries']:>8} {r['write_ms']:>11.2f} {r['read_ms']:>10.2f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"cores": os.cpu_count(), "repeats": args.repeats, "rows": rows}, indent=1) + "\n")
    table = ["`python benchmarks/speed/bench_compilation_cache.py`", "",
             f"Median of {args.repeats} writes and reads, entries of {args.size:,} bytes.", "",
             "| cache | entries | write (ms) | read (ms) |", "|---|---|---|---|"]
    table += [f"| {r['cache']} | {r['entries']:,} | {r['write_ms']:.2f} | {r['read_ms']:.2f} |" for r in rows]
    out.with_suffix(".md").write_text("\n".join(table) + "\n")


if __name__ == "__main__":
    main()
