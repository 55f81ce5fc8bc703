"""The persistent XLA compilation cache: a second process reuses compiled programs from disk.

Compiling a PULSE run takes 5-25 s; with the cache, a later process with the same
shapes and settings loads the program instead. The folder is ``$PULSE_JAX_CACHE``
(default ``~/.cache/pulse-jax/xla``); ``PULSE_JAX_CACHE=off`` turns it off.
"""
from __future__ import annotations

import os

import jax

#: Where compiled programs are kept unless ``$PULSE_JAX_CACHE`` says otherwise.
DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "pulse-jax", "xla")
_CACHE_OFF = ("off", "0", "false", "no", "none")
#: The cache's size limit (least recently used programs go first): 8 GiB.
CACHE_MAX_BYTES = 8 * 2**30
_cache_checked = False


def enable_compilation_cache(path: str | None = None) -> str | None:
    """Persist compiled programs on disk so a second process skips XLA compilation.

    The folder is ``path``, else ``$PULSE_JAX_CACHE``, else ``~/.cache/pulse-jax/xla``;
    ``PULSE_JAX_CACHE=off`` turns the cache off. Returns the folder (None when off).
    `pulse_jax.simulate`, `pulse_jax.sweep` and the live selector call this once per
    process themselves, unless JAX's ``jax_compilation_cache_dir`` is already set.
    """
    global _cache_checked
    _cache_checked = True
    setting = path or os.environ.get("PULSE_JAX_CACHE", "")
    if setting.strip().lower() in _CACHE_OFF:
        return None
    path = setting or DEFAULT_CACHE
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    # A size limit turns on JAX's file lock around every cache read and write. Without it an entry is
    # written in place, and a second process (a pytest-xdist worker, two runs at once) can read it half
    # written and abort while deserializing it.
    jax.config.update("jax_compilation_cache_max_size", CACHE_MAX_BYTES)
    _add_missing_access_times(path)
    return path


def _add_missing_access_times(path: str) -> None:
    """Give every entry written without a size limit (no ``-atime`` file beside it) the oldest access time.

    With a limit, JAX reads every entry's access time before each write, and one missing file fails
    that write (a warning, and the program is compiled again in every later process): a cache filled
    before the limit was set would never take a new entry."""
    try:
        names = set(os.listdir(path))
    except OSError:
        return      # no folder yet: JAX makes it
    for name in names:
        if name.endswith("-cache") and name.removesuffix("-cache") + "-atime" not in names:
            try:
                with open(os.path.join(path, name.removesuffix("-cache") + "-atime"), "xb") as handle:
                    handle.write((0).to_bytes(8, "little"))
            except OSError:
                pass    # written by another process meanwhile, or a read-only cache: JAX reads it as is


def use_compilation_cache() -> None:
    """The first run in a process turns the disk cache on, unless the caller configured JAX's own."""
    if not _cache_checked and not jax.config.jax_compilation_cache_dir:
        enable_compilation_cache()
