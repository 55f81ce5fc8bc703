import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("PULSE_JAX_CACHE", "/tmp/pulse-jax-test-xla-cache")
# Compilation is most of a cold run of this suite, and the test problems are small. Two settings
# halve it twice: JAX's "disable most optimizations" (LLVM at level 0, its expensive passes off; set
# per compile, so a test can turn it back on) and XLA:CPU's older elemental fusion emitters instead of
# its MLIR-based ones (a PULSE run's backend compile takes half the time of the MLIR emitters'). The
# programs compute the same things; only float rounding may differ, as between backends. A program
# built so runs about 3x slower, so the few tests that run one long Monte Carlo study
# (``@pytest.mark.optimized``) build theirs fully optimized. Subprocesses inherit both settings.
# PULSE_JAX_TEST_OPTIMIZE=1 keeps XLA's defaults throughout.
FAST_COMPILE = os.environ.get("PULSE_JAX_TEST_OPTIMIZE") != "1"
if FAST_COMPILE:
    os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
    if "xla_cpu_use_fusion_emitters" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_use_fusion_emitters=false").strip()

from pulse_jax.compilation_cache import enable_compilation_cache  # noqa: E402

enable_compilation_cache()
# At the settings above most of the suite's programs compile in under 0.5 s, the library's threshold for
# keeping a program on disk, and thousands of single operations run op by op (each compiled for its
# shapes in about 10 ms, loaded in about 6): the suite keeps every program, so a second run loads them.
__import__("jax").config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

#: Two compiled programs that compute the same floats (the blocked loop and the scan, two chunk
#: sizes) agree to the last bit on the CPU (a constant XLA folds may round one step apart from the
#: same number traced: test_sweep.py allows that one step), where XLA keeps the program's
#: summation order and divides exactly. On a GPU they need not: XLA:GPU picks each reduction's
#: tiling per program (a sum over n cells is reassociated) and its float32 division is within
#: 2 ulp, and PULSE's refits amplify such last-bit differences (one NVIDIA H100 measured 6e-8 to
#: 2.1e-6 on these tests' quantities, all in [0, 1]). Off the CPU the tests allow 1e-5: 5x the
#: largest measured, and still 1,000x below what one cell taken on another path moves an
#: estimate (1 / n with n <= 60). Discrete outcomes (choices, cells, certification) stay exact.
ON_CPU = __import__("jax").default_backend() == "cpu"
SAME_PROGRAM_ATOL = 0.0 if ON_CPU else 1e-5


def same_floats(a, b, atol: float = 0.0) -> None:
    """``a == b`` exactly on the CPU (``atol`` where the test allows more); within
    ``max(atol, SAME_PROGRAM_ATOL)`` elsewhere (see ``SAME_PROGRAM_ATOL``)."""
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=0,
                               atol=max(atol, SAME_PROGRAM_ATOL), equal_nan=True)


def _memory_mappings() -> tuple[int, int]:
    """This process's memory mappings and the most Linux allows it ((0, 1) elsewhere)."""
    try:
        with open("/proc/self/maps") as maps, open("/proc/sys/vm/max_map_count") as limit:
            return sum(1 for _ in maps), int(limit.read())
    except OSError:
        return 0, 1


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Each XLA:CPU program a worker has loaded holds several hundred memory mappings (about 450 for a
    tiny run at the suite's settings), and a worker keeps every program its caches reference; past
    ``vm.max_map_count`` (65,530 by default) LLVM cannot map the next program and the worker dies in
    native code. After a module whose worker holds more than half that many, the caches are emptied
    (the next module's programs come back from the persistent cache)."""
    yield
    used, limit = _memory_mappings()
    if used > limit // 2:
        import gc

        import jax
        from pulse_jax import simulation
        from pulse_jax.live import compiled

        simulation.compiled_runner.cache_clear()
        compiled.compiled.cache_clear()
        compiled.batch_draw.cache_clear()
        compiled.first_draws.cache_clear()
        jax.clear_caches()
        gc.collect()


@pytest.fixture(autouse=True)
def _optimized_programs(request):
    """A test marked ``optimized`` compiles its programs fully optimized (see ``FAST_COMPILE``)."""
    import jax

    before = jax.config.read("jax_disable_most_optimizations")
    if request.node.get_closest_marker("optimized"):
        jax.config.update("jax_disable_most_optimizations", False)
    try:
        yield
    finally:
        jax.config.update("jax_disable_most_optimizations", before)


@pytest.fixture
def shared_data():
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder {SHARED_DATA} is absent (it sits beside the repository in CI)")
    return SHARED_DATA


@pytest.fixture(scope="module")
def small_bench():
    """A 6 x 200 built-in benchmark and its rank-3 embeddings (live-selection tests)."""
    from pulse_jax import synthetic
    from pulse_jax.stats import factorization

    b = synthetic.make_benchmark(seed=0, n_models=6, n_examples=200, n_train=40)
    return b, factorization.fit_example_embeddings(b.train, rank=3)


@pytest.fixture(scope="module")
def journal_bench():
    """A 6 x 200 built-in benchmark (seed 1) and its rank-3 embeddings (the live log's tests)."""
    from pulse_jax import synthetic
    from pulse_jax.stats import factorization

    b = synthetic.make_benchmark(seed=1, n_models=6, n_examples=200, n_train=40)
    return b, factorization.fit_example_embeddings(b.train, rank=3)


def as_simulated(**choices) -> dict:
    """``Selector`` keywords with the simulation's defaults (`BanditConfig`'s rule ``ucbe`` and Bernstein
    sequences, every bound at once) where ``choices`` leave them out: the live defaults differ (Top-Two,
    betting, certification bounds), and a test that compares a selector with ``simulate(config)`` on a
    default config needs the same choices on both sides."""
    choices.setdefault("rule", "ucbe")
    choices.setdefault("cs_grid", 0)
    params = choices.get("params")
    if params is None:
        choices.setdefault("bounds", "all")
    elif isinstance(params, dict) and not any(str(k).endswith("cs_simultaneous") for k in params):
        choices["params"] = {**params, "cs_simultaneous": 1.0}
    return choices


def run_sql(path, *statements) -> None:
    """Run SQL statements on the database at ``path`` in autocommit (tests that edit a log by hand)."""
    import sqlite3

    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for sql in statements:
            conn.execute(sql)
    finally:
        conn.close()


def tiny_problem(seed=0, m=6, n=40, rank=3):
    """A small low-rank logistic problem with a train split, for engine tests."""
    rng = np.random.default_rng(seed)
    v = rng.normal(0, 1, (n, rank))
    def draw(count):
        u = rng.normal(0, 1, (count, rank))
        p = 1 / (1 + np.exp(-(u @ v.T + rng.normal(0, 0.5, (count, 1)))))
        return (rng.random((count, n)) < p).astype(np.float32)
    return draw(m), draw(30), v.astype(np.float32)


def write_slow_scorer(directory, n_models: int = 6, delay: float = 0.02) -> list[str]:
    """A scorer module (``slowscore:score``: the stand-in, ``delay`` seconds per batch, each call appended to
    ``calls.txt``) and ``models.txt`` in ``directory``; returns the ``pulse-jax select`` command
    (UCB-E, 800 cells of batches of 16, no early stop) to run there with ``PYTHONPATH=directory``."""
    import sys

    from pulse_jax import stand_in

    (directory / "slowscore.py").write_text(
        "import time\nfrom pulse_jax import stand_in\n"
        "def score(model, ids):\n"
        f"    time.sleep({delay})\n"
        "    with open('calls.txt', 'a') as f:\n"
        "        f.write(''.join(f'{model},{i}\\n' for i in ids)); f.flush()\n"
        "    return stand_in.score(model, ids)\n")
    (directory / "models.txt").write_text("\n".join(stand_in.models()[:n_models]) + "\n")
    return [sys.executable, "-m", "pulse_jax.cli", "select", "--models", "models.txt", "--examples", "1000",
            "--budget", "800", "--batch-size", "16", "--method", "ucbe", "--evaluate", "slowscore:score",
            "--stop", "budget", "--quiet"]


def log_records(path) -> list:
    """The told and paid batches of the log at ``path`` as they are now (read-only; a running log too)."""
    from pulse_jax.live import journal

    if not Path(path).is_file() or Path(path).stat().st_size == 0:
        return []
    try:
        return journal.snapshot(path)[1]
    except Exception:  # noqa: BLE001 -- the log is being created
        return []


def recovered_records(path) -> list:
    """The batches of a log whose writer was killed: opened for writing, so SQLite first rolls back a
    commit the kill interrupted (a read-only look cannot)."""
    from pulse_jax.live import journal

    j = journal.Journal(path)
    try:
        return [r for _, r in j.open()[1]]
    finally:
        j.close()


def cli_fails(argv, capsys, needle):
    """Run the CLI with ``argv``: exit 2, one stderr line containing ``needle``, no traceback; the line."""
    from pulse_jax import cli

    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


#: Variants of parametrized tests that run in the integration command only (``-m integration``, which CI
#: also runs). Each test keeps, in the default run, variants that cover every rule, estimator, case
#: and claim it is parametrized over; the rest of its cross product -- the same property on more
#: combinations, each a compilation of its own -- runs with the long tests. Measured with
#: ``benchmarks/speed/bench_test_suite.py``: together these are about 28% of a cold default run.
INTEGRATION_VARIANTS = {
    "test_rules.py::test_rule_matches_the_numpy_reference_step_for_step": (
        'exhausts-models-partial-batches-pulse-lucb_top_2', 'exhausts-models-partial-batches-pulse-top_two',
        'exhausts-models-partial-batches-pulse-top_two_interval', 'exhausts-models-partial-batches-ucbe-lucb_top_2',
        'exhausts-models-partial-batches-ucbe-successive_halving', 'exhausts-models-partial-batches-ucbe-top_two',
        'exhausts-models-partial-batches-ucbe-top_two_interval', 'plain-pulse-lucb_top_2',
        'plain-pulse-successive_halving', 'plain-pulse-top_two_interval', 'plain-ucbe-lucb_top_2',
        'plain-ucbe-successive_halving', 'plain-ucbe-top_two', 'seven-models-pulse-lucb_top_2',
        'seven-models-pulse-successive_halving', 'seven-models-pulse-top_two', 'seven-models-pulse-top_two_interval',
        'seven-models-ucbe-successive_halving', 'seven-models-ucbe-top_two', 'seven-models-ucbe-top_two_interval'),
    "test_certificates.py::test_wrong_claims_are_at_most_delta": (
        'epsilon_at_and_above-pulse', 'epsilon_below-pulse', 'tie_group_of_2-pulse', 'top_3_near_tie-pulse'),
    "test_stop_early.py::test_blocked_run_equals_the_scan_on_every_repetition": (
        'pulse-lucb', 'pulse-successive_halving', 'pulse-top_two_interval'),
    "test_engine.py::test_engine_matches_numpy_reference_step_for_step": (
        'naive-budget-not-multiple-of-batch-ucbe-rule', 'naive-exhausts-models-partial-batches-ucbe-rule',
        'pulse-budget-not-multiple-of-batch-ucbe-rule', 'pulse-exhausts-models-partial-batches-ucbe-rule',
        'ucbe-exhausts-models-partial-batches-lucb-stop', 'ucbe-exhausts-models-partial-batches-ucbe-rule',
        'ucbe-plain-ucbe-rule'),
    "test_confidence.py::test_certified_stopping_is_wrong_at_most_delta": (
        'pulse-lucb-1.0-0', 'pulse_adaptive-top_two_interval-0.0-201', 'pulse_hedged-top_two_interval-0.0-201',
        'ucbe-lucb-1.0-0'),
    "test_selector.py::test_ask_tell_replay_makes_the_simulation_engines_choices": ('naive', 'pulse_adaptive'),
    "test_confidence.py::test_certification_levels_keep_their_guarantees": (
        'pulse_adaptive_betting_adversarial', 'pulse_certify_betting_adversarial',
        'pulse_hedged_betting_prior_adversarial', 'pulse_hedged_betting_useless'),
    "test_confidence.py::test_coverage_at_every_look": (
        'pulse_adaptive_good', 'pulse_adaptive_useless', 'pulse_certify_adversarial'),
    "test_stopping.py::test_live_selection_stops_where_the_simulation_stops": ('pulse',),
    "test_stop_early.py::test_summary_only_runs_keep_one_record_and_the_same_results": ('certified',),
    "test_rules.py::test_successive_halving_spends_exactly_its_schedule": ('2', '8'),
    "test_sweep.py::test_each_sweep_point_equals_simulate_with_its_parameters": ('naive', 'ucbe'),
    "test_missing_cells.py::test_engine_matches_numpy_reference_on_a_ragged_matrix": (
        'False-naive', 'False-pulse', 'True-ucbe'),
    "test_selector.py::test_early_stopping_stops_early_and_is_right": ('pulse',),
    "test_concurrency.py::test_the_live_selector_makes_the_simulation_s_choices_with_batches_in_flight": (
        'pulse_hedged-4',),
    "test_sampling.py::test_kth_unobserved_and_unpack": ('100', '64'),
    "test_every_return_kept.py::test_a_money_budget_at_any_concurrency_spends_what_one_batch_at_a_time_spends": (
        '9.0',),
    "test_cost.py::test_equal_costs_make_the_same_choices_as_no_costs": ('lucb',),
    "test_runner.py::test_a_full_disk_pays_no_cell_twice": ('True-1',),
}


@pytest.hookimpl(tryfirst=True)     # before ``-m`` deselects by marker
def pytest_collection_modifyitems(config, items):
    """Mark the `INTEGRATION_VARIANTS` as integration tests; refuse a name there that matches no test
    (a renamed test or variant must not slip back into the default run, or out of both)."""
    wanted = {f"{test}[{variant}]" for test, variants in INTEGRATION_VARIANTS.items() for variant in variants}
    seen = set()
    for item in items:
        name = f"{Path(str(item.fspath)).name}::{item.name}"
        if name in wanted:
            item.add_marker(pytest.mark.integration)
            seen.add(name)
    # A variant is checked where its test function was collected with every variant (not narrowed by -k
    # or by naming one variant): then it must be among them.
    whole = {f"{Path(str(item.fspath)).name}::{item.name.split('[')[0]}" for item in items}
    missing = sorted(n for n in wanted - seen if n.split("[")[0] in whole)
    if missing and not config.option.keyword and not any("[" in arg for arg in config.args):
        raise pytest.UsageError(f"conftest.INTEGRATION_VARIANTS names tests that do not exist: {missing[:3]}")
