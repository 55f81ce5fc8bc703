"""The persistent XLA compilation cache: a second process reuses compiled programs from disk.

Compiling a PULSE run takes 5-25 s; with the cache, a later process with the same
shapes and settings loads the program instead. The folder is ``$PULSE_JAX_CACHE``
(default ``~/.cache/pulse-jax/xla``); ``PULSE_JAX_CACHE=off`` turns it off. The ``pulse-jax``
command line turns it on; from Python, call `enable_compilation_cache` (the library itself never
changes the process's JAX configuration).

The folder is kept by `FolderCache` (JAX's cache interface): each entry is written to a
temporary file and renamed into place, so processes that share the folder (two runs at once,
pytest-xdist workers) never read an entry half written, and need no lock. JAX's own
size-limited cache locks the folder for every read and write and, before every write, reads the
size and access time of every entry in it, a cost that grows with the cache: 12 ms per write with
1,000 entries and 42 ms with 3,000, against 0.1 ms for `FolderCache`, which counts the folder once
when it opens and lists it again only when a write takes it past the limit
(``benchmarks/speed/bench_compilation_cache.py``, 2 cores).
"""
from __future__ import annotations

import os
import pathlib
import threading
import time
import uuid
import warnings

import jax

from pulse_jax.fileio.files import read_regular

#: Where compiled programs are kept unless ``$PULSE_JAX_CACHE`` says otherwise.
DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "pulse-jax", "xla")
_CACHE_OFF = ("off", "0", "false", "no", "none")
#: The cache's size limit (least recently used programs go first): 8 GiB.
CACHE_MAX_BYTES = 8 * 2**30
#: An eviction deletes entries until the folder holds this share of the limit, so the next
#: writes do not list the folder again at once.
_EVICT_TO = 0.9
#: A temporary file older than this is a writer's that died before its rename: deleted on opening.
_STALE_TEMPORARY_S = 3600.0
_ENTRY, _ATIME = "-cache", "-atime"     # JAX's file names: ``<key>-cache`` and its access time
_cache_checked = False

try:   # JAX's interface for a persistent cache; without it, JAX's own size-limited cache is used
    from jax._src import compilation_cache as _jax_cache
    from jax._src.compilation_cache_interface import CacheInterface as _CacheInterface
except ImportError:   # pragma: no cover -- a JAX without the interface
    _jax_cache, _CacheInterface = None, object


class FolderCache(_CacheInterface):
    """Compiled programs as files in one folder, shared safely by processes without a lock.

    ``put`` writes ``<key>-cache`` to a temporary file in the folder and renames it into place (a
    rename within one file system is atomic), so a reader finds either no entry or all of it; two
    processes writing one key both write the same program. ``get`` reads the file and touches it:
    the least recently used entries (oldest modification time) are evicted first once the folder
    passes ``max_bytes``. Each entry also gets JAX's ``<key>-atime`` file, so JAX's own
    size-limited cache can share the folder.

    Args:
      path: the folder (made if absent).
      max_bytes: the size the folder's entries are kept within.
    """

    def __init__(self, path: str, max_bytes: int = CACHE_MAX_BYTES):
        self._path = pathlib.Path(path)
        self._path.mkdir(parents=True, exist_ok=True)
        self.max_bytes = int(max_bytes)
        self._lock = threading.Lock()
        self._said_unwritable = False
        self._bytes = sum(size for _, _, size in self._entries(remove_stale=True))

    def get(self, key: str) -> bytes | None:
        """The entry of ``key``, read only from a regular file: a FIFO or a device planted under an
        entry's name would block the read or never end; it is passed over (None: the program is
        compiled, and `put` puts a real entry in its place)."""
        entry = self._path / f"{key}{_ENTRY}"
        value = read_regular(entry)
        if value is None:
            return None
        try:
            os.utime(entry)           # recently used: evicted last
        except OSError:
            pass                      # deleted by another process's eviction meanwhile, or read-only
        return value

    def put(self, key: str, value: bytes) -> None:
        """Write ``value`` as the entry of ``key``, replacing one already there: JAX puts a program after a
        miss, or after it could not use what `get` returned (a damaged entry, which is then mended)."""
        entry = self._path / f"{key}{_ENTRY}"
        try:
            replaced = entry.stat().st_size
        except OSError:
            replaced = 0
        try:
            for name, data in ((f"{key}{_ATIME}", time.time_ns().to_bytes(8, "little")), (entry.name, value)):
                temporary = self._path / f".{name}.{uuid.uuid4().hex}.tmp"
                try:
                    temporary.write_bytes(data)
                    os.replace(temporary, self._path / name)
                finally:
                    temporary.unlink(missing_ok=True)
        except OSError as err:
            # A read-only or full folder: said once per process (JAX would warn for every program), and
            # each later program is tried again in silence (space may come back).
            if not self._said_unwritable:
                self._said_unwritable = True
                warnings.warn(f"the compilation cache folder {self._path} takes no new programs "
                              f"({err.strerror or err}): programs compiled now are compiled again in the next "
                              "process; free space there, or set PULSE_JAX_CACHE to another folder or to off",
                              stacklevel=2)
            return
        with self._lock:
            self._bytes += len(value) - replaced
            over = self._bytes > self.max_bytes
        if over:
            self._evict()

    def _entries(self, remove_stale: bool = False) -> list[tuple[int, pathlib.Path, int]]:
        """Every entry as ``(modification time, path, size)``; with ``remove_stale``, temporary files
        older than an hour (a writer killed before its rename) are deleted."""
        found = []
        for item in os.scandir(self._path):
            try:
                if item.name.endswith(_ENTRY):
                    stat = item.stat()
                    found.append((stat.st_mtime_ns, pathlib.Path(item.path), stat.st_size))
                elif remove_stale and item.name.endswith(".tmp") and \
                        time.time() - item.stat().st_mtime > _STALE_TEMPORARY_S:
                    os.unlink(item.path)
            except OSError:
                continue              # deleted by another process meanwhile
        return found

    def _evict(self) -> None:
        """Delete the least recently used entries until the folder holds ``_EVICT_TO`` of the limit."""
        entries = sorted(self._entries())
        total = sum(size for _, _, size in entries)
        for _, entry, size in entries:
            if total <= _EVICT_TO * self.max_bytes:
                break
            for path in (entry, entry.with_name(entry.name.removesuffix(_ENTRY) + _ATIME)):
                path.unlink(missing_ok=True)
            total -= size
        with self._lock:
            self._bytes = total


def _install(path: str) -> bool:
    """Make `FolderCache` at ``path`` JAX's persistent cache; False where this JAX has no place for it.

    The one place that touches JAX's internals (``jax._src.compilation_cache``, for want of a public
    way to give JAX a cache): it does what JAX's own ``_initialize_cache`` does with its file cache --
    the smallest entry size worth keeping, and ``jax_compilation_cache_check_contents``, which wraps
    the cache in JAX's verifying cache -- with `FolderCache` in place of JAX's."""
    if _jax_cache is None or not all(hasattr(_jax_cache, name) for name in ("_cache", "_cache_initialized",
                                                                          "_cache_initialized_mutex")):
        return False
    cache = FolderCache(path)
    if getattr(jax.config, "jax_compilation_cache_check_contents", False) and hasattr(_jax_cache, "VerificationCache"):
        cache = _jax_cache.VerificationCache(cache)
    with _jax_cache._cache_initialized_mutex:
        if getattr(jax.config, "jax_persistent_cache_min_entry_size_bytes", None) == 0 and \
                hasattr(_jax_cache, "default_min_cache_entry_size"):
            jax.config.update("jax_persistent_cache_min_entry_size_bytes", _jax_cache.default_min_cache_entry_size())
        _jax_cache._cache = cache
        _jax_cache._cache_initialized = True
    return True


def enable_compilation_cache(path: str | None = None) -> str | None:
    """Persist compiled programs on disk so a second process skips XLA compilation.

    The folder is ``path``, else ``$PULSE_JAX_CACHE``, else ``~/.cache/pulse-jax/xla``;
    ``PULSE_JAX_CACHE=off`` turns the cache off. Returns the folder (None when off).
    The library never calls it on its own (a library call leaves the process's JAX configuration as it
    found it); the ``pulse-jax`` command line does, once per process, unless JAX's
    ``jax_compilation_cache_dir`` is already set. It changes JAX's configuration for the whole
    process: ``jax_compilation_cache_dir``, ``jax_persistent_cache_min_compile_time_secs`` (programs
    that compile in 0.5 s or more are kept) and the cache object JAX uses.

    A folder that cannot be made or read (a file of that name, no permission) is said in one
    warning, and the run goes on without the cache (None).

    Args:
      path: the folder; None takes ``$PULSE_JAX_CACHE`` or the default.
    """
    global _cache_checked
    _cache_checked = True
    setting = str(path or os.environ.get("PULSE_JAX_CACHE", "")).strip()   # " " is unset, not a folder named " "
    if setting.lower() in _CACHE_OFF:
        return None
    path = setting or DEFAULT_CACHE
    try:
        installed = _install(path)
    except OSError as err:
        warnings.warn(f"the compilation cache folder {path} cannot be used ({err.strerror or err}): compiled "
                      "programs are not kept on disk; set PULSE_JAX_CACHE to another folder, or to off",
                      stacklevel=2)
        return None
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    _add_missing_access_times(path)
    if not installed:
        # JAX's own cache, with a size limit: that turns on its file lock around every read and write
        # (without it an entry is written in place, and a second process can read it half written).
        jax.config.update("jax_compilation_cache_max_size", CACHE_MAX_BYTES)
    return path


def _add_missing_access_times(path: str) -> None:
    """Give every entry without an ``-atime`` file beside it the oldest access time, for JAX's own cache.

    With a limit, JAX's cache (the fallback, or another program sharing the folder) reads every entry's access time before each write, and one missing file fails
    that write (a warning, and the program is compiled again in every later process): a cache filled
    before the limit was set would never take a new entry."""
    try:
        names = set(os.listdir(path))
    except OSError:
        return      # no folder yet: JAX makes it
    for name in names:
        if name.endswith(_ENTRY) and name.removesuffix(_ENTRY) + _ATIME not in names:
            try:
                with open(os.path.join(path, name.removesuffix(_ENTRY) + _ATIME), "xb") as handle:
                    handle.write((0).to_bytes(8, "little"))
            except OSError:
                pass    # written by another process meanwhile, or a read-only cache: JAX reads it as is


def use_compilation_cache() -> None:
    """The command line's call: the disk cache on, once per process, unless the caller configured JAX's own."""
    if not _cache_checked and not jax.config.jax_compilation_cache_dir:
        enable_compilation_cache()
