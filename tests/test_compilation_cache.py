"""The persistent compilation cache's folder (`pulse_jax.compilation_cache.FolderCache`): JAX uses
it, a reader never sees an entry half written, the least recently used entries go first, and JAX's own
size-limited cache can share the folder."""
import contextlib
import os
import threading
import time
import uuid

import jax
import jax.numpy as jnp
import pytest
from jax._src import compilation_cache as jax_cache, lru_cache, monitoring

from pulse_jax import compilation_cache
from pulse_jax.compilation_cache import CACHE_MAX_BYTES, FolderCache


@contextlib.contextmanager
def _suite_cache_kept():
    """The suite's cache folder and its keep-everything threshold again after the block."""
    suite = jax.config.jax_compilation_cache_dir
    threshold = jax.config.jax_persistent_cache_min_compile_time_secs
    try:
        yield
    finally:
        compilation_cache.enable_compilation_cache(suite)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", threshold)


@pytest.fixture
def own_cache(tmp_path):
    """The library's cache at ``tmp_path`` for one test, keeping every program it compiles."""
    with _suite_cache_kept():
        path = compilation_cache.enable_compilation_cache(str(tmp_path))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        yield path


def _entries(folder) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.endswith("-cache"))


def test_a_compiled_program_is_written_to_the_folder_and_loaded_from_it(own_cache):
    assert isinstance(jax_cache._cache, FolderCache) and str(jax_cache._cache._path) == own_cache
    offset = uuid.uuid4().int % 10**6 / 7.0          # a program no earlier test compiled

    def program(x):
        return x * 3.0 + offset

    assert float(jax.jit(program)(jnp.float32(1.0))) == pytest.approx(3.0 + offset)
    written = _entries(own_cache)
    ours = [name for name in written if name.startswith("jit_program-")]
    assert len(ours) == 1
    assert all(os.path.exists(os.path.join(own_cache, n.removesuffix("-cache") + "-atime")) for n in written)
    hits = []

    def listen(event, **_):
        hits.append(event)

    monitoring.register_event_listener(listen)
    try:
        jax.clear_caches()                            # the next call looks on disk, not in memory
        assert float(jax.jit(program)(jnp.float32(2.0))) == pytest.approx(6.0 + offset)
    finally:
        monitoring.unregister_event_listener(listen)
    assert "/jax/compilation_cache/cache_hits" in hits
    assert [name for name in _entries(own_cache) if name.startswith("jit_program-")] == ours   # loaded, not rewritten


def test_a_reader_never_sees_an_entry_half_written(tmp_path):
    """One thread writes 24 entries of 8 MB while another reads each key as fast as it can: every read
    is nothing or the whole entry (a write in place is seen partly written here within a few reads)."""
    cache = FolderCache(str(tmp_path))
    values = {f"jit_k{i}-{i:04d}": bytes([i]) * (8 * 2**20) for i in range(24)}
    seen, done = [], threading.Event()

    def read():
        while not done.is_set():
            for key, value in values.items():
                got = cache.get(key)
                if got is not None:
                    seen.append(got == value)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for key, value in values.items():
            cache.put(key, value)
    finally:
        done.set()
        reader.join()
    assert seen and all(seen)
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]


def test_the_least_recently_used_entries_are_evicted_past_the_limit(tmp_path):
    cache = FolderCache(str(tmp_path), max_bytes=1000)
    cache.put("jit_a-1", b"a" * 400)
    cache.put("jit_b-2", b"b" * 400)
    os.utime(tmp_path / "jit_a-1-cache", ns=(1, 1))  # a written first ...
    os.utime(tmp_path / "jit_b-2-cache", ns=(2, 2))
    assert cache.get("jit_a-1") == b"a" * 400         # ... but read since: b is the least recently used
    cache.put("jit_c-3", b"c" * 400)                  # 1,200 bytes: down to 900 or fewer
    assert _entries(tmp_path) == ["jit_a-1-cache", "jit_c-3-cache"]
    assert not (tmp_path / "jit_b-2-atime").exists() and cache.get("jit_b-2") is None


def test_the_folder_is_counted_when_the_cache_opens_and_stale_temporary_files_go(tmp_path):
    for key in ("jit_old-1", "jit_old-2"):
        FolderCache(str(tmp_path), max_bytes=10**6).put(key, b"x" * 600)
    stale, fresh = tmp_path / ".jit_dead-cache.0.tmp", tmp_path / ".jit_live-cache.1.tmp"
    stale.write_bytes(b"a writer killed before its rename")
    fresh.write_bytes(b"a writer still writing")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    cache = FolderCache(str(tmp_path), max_bytes=1500)
    assert not stale.exists() and fresh.exists()
    cache.put("jit_new-3", b"y" * 600)                # 1,800 bytes with what was there before
    assert len(_entries(tmp_path)) == 2 and cache.get("jit_new-3") == b"y" * 600


def test_jax_s_own_size_limited_cache_can_share_the_folder(tmp_path):
    """JAX's cache reads every entry's access-time file before each write: the library writes one with
    each entry, and enabling the cache gives one to entries written without (the oldest time)."""
    (tmp_path / "jit_old-0123-cache").write_bytes(b"an entry from a cache without a limit")
    (tmp_path / "jit_new-4567-cache").write_bytes(b"an entry with its access time")
    (tmp_path / "jit_new-4567-atime").write_bytes((123).to_bytes(8, "little"))
    with _suite_cache_kept():
        assert compilation_cache.enable_compilation_cache(str(tmp_path)) == str(tmp_path)
        jax_cache._cache.put("jit_ours-89ab", b"written by the library")
    assert (tmp_path / "jit_old-0123-atime").read_bytes() == (0).to_bytes(8, "little")   # oldest: evicted first
    assert (tmp_path / "jit_new-4567-atime").read_bytes() == (123).to_bytes(8, "little")  # left as it was
    theirs = lru_cache.LRUCache(str(tmp_path), max_size=CACHE_MAX_BYTES)
    theirs.put("jit_next-cdef", b"a new entry")       # reads every entry's access time first
    assert theirs.get("jit_next-cdef") == b"a new entry"
    assert theirs.get("jit_ours-89ab") == b"written by the library"


def test_without_a_place_for_the_folder_cache_jax_s_locked_cache_is_used(tmp_path, monkeypatch):
    """Where JAX has no slot for another cache, the library keeps JAX's own with a size limit, which
    locks the folder around every read and write (two processes never read an entry half written)."""
    monkeypatch.setattr(compilation_cache, "_install", lambda path: False)
    before = jax.config.jax_compilation_cache_max_size
    suite = jax.config.jax_compilation_cache_dir
    with _suite_cache_kept():
        try:
            assert compilation_cache.enable_compilation_cache(str(tmp_path)) == str(tmp_path)
            assert jax.config.jax_compilation_cache_max_size == CACHE_MAX_BYTES
        finally:
            jax.config.update("jax_compilation_cache_max_size", before)
            monkeypatch.undo()
    assert isinstance(jax_cache._cache, FolderCache) and str(jax_cache._cache._path) == suite


def test_an_unusable_folder_is_said_in_one_warning_and_the_run_goes_on(tmp_path):
    taken = tmp_path / "not-a-folder"
    taken.write_text("a file where the cache folder would go")
    before = jax_cache._cache
    with _suite_cache_kept():
        with pytest.warns(UserWarning, match=f"compilation cache folder {taken} cannot be used .*not kept on disk"):
            assert compilation_cache.enable_compilation_cache(str(taken)) is None
        assert jax_cache._cache is before and jax.config.jax_compilation_cache_dir != str(taken)
    assert float(jax.jit(lambda x: x + 1.5)(jnp.float32(1.0))) == 2.5


def test_the_command_line_in_process_leaves_a_configured_cache_as_it_is(tmp_path, capsys):
    """``pulse_jax.cli.main`` called from Python (as these tests do) keeps the folder and the threshold
    the caller set: the cache is turned on once per process."""
    from pulse_jax import cli

    with _suite_cache_kept():
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        folder = jax.config.jax_compilation_cache_dir
        cli.main(["log", "show", str(tmp_path / "missing.db")])
        assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.0
        assert jax.config.jax_compilation_cache_dir == folder
    capsys.readouterr()


def test_a_blank_cache_setting_is_the_default_folder_not_a_folder_named_blank(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PULSE_JAX_CACHE", " ")
    monkeypatch.setattr(compilation_cache, "DEFAULT_CACHE", str(tmp_path / "default"))
    with _suite_cache_kept():
        assert compilation_cache.enable_compilation_cache() == str(tmp_path / "default")
    assert not (tmp_path / " ").exists()


def test_a_damaged_entry_is_replaced_by_the_program_compiled_in_its_place(own_cache):
    """A damaged entry made JAX warn in every later process and was never written again: the program
    JAX compiles after failing to read it now replaces it, and the next process loads it."""
    offset = uuid.uuid4().int % 10**6 / 7.0

    def program(x):
        return x * 5.0 + offset

    jax.jit(program)(jnp.float32(1.0))
    (name,) = [n for n in _entries(own_cache) if n.startswith("jit_program-")]
    entry = os.path.join(own_cache, name)
    good = open(entry, "rb").read()
    with open(entry, "wb") as handle:
        handle.write(b"\0" * len(good))                 # damaged, same size
    jax.clear_caches()
    with pytest.warns(UserWarning):
        assert float(jax.jit(program)(jnp.float32(2.0))) == pytest.approx(10.0 + offset)
    assert open(entry, "rb").read() != b"\0" * len(good)   # mended
    hits = []

    def listen(event, **_):
        hits.append(event)

    monitoring.register_event_listener(listen)
    try:
        jax.clear_caches()
        assert float(jax.jit(program)(jnp.float32(3.0))) == pytest.approx(15.0 + offset)
    finally:
        monitoring.unregister_event_listener(listen)
    assert "/jax/compilation_cache/cache_hits" in hits


def test_a_folder_that_takes_no_new_programs_is_said_once_per_process(own_cache, monkeypatch):
    """A read-only or full folder made JAX warn (two lines) for every program a run compiled: the cache
    now says it once, and each later program is compiled and run as usual."""
    import errno
    import pathlib
    import warnings

    def full(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pathlib.Path, "write_bytes", full)
    offset = uuid.uuid4().int % 10**6 / 7.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(4):                               # four programs, none of them kept
            assert float(jax.jit(lambda x, k=k: x * k + offset)(jnp.float32(1.0))) == pytest.approx(k + offset)
    said = [str(w.message) for w in caught]
    assert len(said) == 1 and "takes no new programs (No space left on device)" in said[0], said
    assert not [n for n in _entries(own_cache) if n.startswith("jit_<lambda>-")]


def test_an_entry_that_is_not_a_regular_file_is_a_miss_not_a_hang(tmp_path):
    """Every file the project reads by a fixed name is read as a regular file or passed over: a FIFO under
    an entry's name blocked the read forever; it is now a miss, and the entry compiled in its place is
    written as a regular file."""
    import stat as stat_module

    cache = FolderCache(str(tmp_path))
    os.mkfifo(tmp_path / "k1-cache")
    done = []
    reader = threading.Thread(target=lambda: done.append(cache.get("k1")), daemon=True)
    reader.start()
    reader.join(5)
    assert done == [None]                                   # returned at once, a miss
    cache.put("k1", b"program")
    assert stat_module.S_ISREG(os.stat(tmp_path / "k1-cache").st_mode) and cache.get("k1") == b"program"
