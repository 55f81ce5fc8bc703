"""Sampling without replacement (pulse_jax.stats.without_replacement): exact, by enumeration and against literal swaps."""
import itertools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pulse_jax.stats import without_replacement as sampling


def _literal_fisher_yates(choices, r):
    values = list(range(max(r, len(choices))))
    for k in range(min(len(choices), r)):
        j = k + int(choices[k])
        values[k], values[j] = values[j], values[k]
    return values[:min(len(choices), r)]


def _pack(mask):
    n = mask.shape[-1]
    words = np.array(sampling.empty_mask(1, n))[0]
    for j in np.flatnonzero(mask):
        words[j // 32] |= np.uint32(1 << (j % 32))
    return words


@pytest.mark.integration   # 14-17 s: the second test command keeps the default run within its time
def test_loop_free_resolution_equals_literal_swaps():
    rng = np.random.default_rng(0)
    resolve = jax.jit(sampling.fisher_yates_prefix)
    for _ in range(3000):
        B, r = int(rng.integers(1, 70)), int(rng.integers(1, 200))
        choices = np.array([rng.integers(0, max(r - k, 1)) for k in range(B)], np.int32)
        # Stress repeated targets (long chains), which random choices rarely produce.
        if rng.random() < 0.3:
            choices = np.minimum(choices, rng.integers(0, 3))
        got = np.asarray(resolve(jnp.asarray(choices)))[:min(B, r)]
        assert list(got) == _literal_fisher_yates(choices, r), (choices, r)


@pytest.mark.parametrize("r,B", [(5, 3), (6, 6), (7, 2), (4, 1), (9, 4)])
def test_the_in_order_resolution_equals_the_loop_free_one_on_every_choice_sequence(r, B):
    """Exact enumeration: on every choice sequence the slot-by-slot resolution the initial draws use
    gives the very ranks of the pointer doubling (so the initial batches, and every run, are unchanged)."""
    sequences = jnp.asarray(list(itertools.product(*[range(max(r - k, 1)) for k in range(B)])), jnp.int32)
    np.testing.assert_array_equal(np.asarray(jax.vmap(sampling.fisher_yates_prefix_in_order)(sequences)),
                                  np.asarray(jax.vmap(sampling.fisher_yates_prefix)(sequences)))


def test_the_in_order_resolution_equals_the_literal_swaps_at_the_engines_batch_size():
    rng = np.random.default_rng(1)
    choices = np.stack([[rng.integers(0, max(500 - k, 1)) for k in range(64)] for _ in range(200)]).astype(np.int32)
    choices[::3] = np.minimum(choices[::3], rng.integers(0, 3, (1, 64)))     # long chains of repeated targets
    got = np.asarray(jax.jit(jax.vmap(sampling.fisher_yates_prefix_in_order))(jnp.asarray(choices)))
    for row, c in zip(got, choices):
        assert list(row) == _literal_fisher_yates(c, 500)


def test_the_initial_draws_build_no_models_x_batch_x_batch_intermediate():
    """The initial draws of every model at once (the engine's ``initial_draws`` under ``vmap``) hold no
    array of ``m x B x B`` elements: at 100 repetitions x 250 models x B = 64 such arrays were 410 MB each."""
    from pulse_jax.engine.config import BanditConfig
    from pulse_jax.engine.state import initial_draws

    m, n, B = 40, 300, 16
    config = BanditConfig(n_models=m, n_examples=n, budget=m * B * 2, batch_size=B)
    text = jax.jit(lambda key: initial_draws(key, config)).lower(jax.random.PRNGKey(0)).compile().as_text()
    shapes = {tuple(int(d) for d in dims.split(",")) for dims in re.findall(r"\[(\d+(?:,\d+)+)\]", text)}
    assert not {s for s in shapes if len(s) >= 3 and s[-2:] == (B, B)}, shapes


@pytest.mark.parametrize("r,B", [(5, 3), (6, 6), (7, 2), (4, 1)])
def test_every_ordered_subset_exactly_once(r, B):
    """Exact enumeration: the choice sequences map one-to-one onto ordered B-subsets of [0, r),
    and every prefix of length B' is a uniform ordered B'-subset (each reached equally often)."""
    sequences = list(itertools.product(*[range(r - k) for k in range(B)]))
    out = np.asarray(jax.vmap(sampling.fisher_yates_prefix)(jnp.asarray(sequences, jnp.int32)))
    tuples = {tuple(row) for row in out}
    assert len(tuples) == len(sequences) == len(list(itertools.permutations(range(r), B)))
    assert all(len(set(t)) == B and max(t) < r for t in tuples)
    for prefix in range(1, B):
        counts = {}
        for row in out:
            counts[tuple(row[:prefix])] = counts.get(tuple(row[:prefix]), 0) + 1
        assert len(set(counts.values())) == 1 and len(counts) == len(list(itertools.permutations(range(r), prefix)))


@pytest.mark.parametrize("n", [1, 31, 32, 33, 64, 100, 257])
def test_kth_unobserved_and_unpack(n):
    rng = np.random.default_rng(n)
    for density in (0.0, 0.3, 0.9):
        mask = rng.random(n) < density
        words = _pack(mask)
        np.testing.assert_array_equal(np.asarray(sampling.unpack(jnp.asarray(words), n)), mask)
        free = np.flatnonzero(~mask)
        if len(free):
            got = np.asarray(sampling.kth_unobserved(jnp.asarray(words), jnp.arange(len(free), dtype=jnp.int32)))
            np.testing.assert_array_equal(got, free)


def test_mark_sets_exactly_the_valid_bits():
    n = 70
    row = sampling.empty_mask(1, n)[0]
    examples = jnp.array([0, 31, 32, 69, 5, 6], jnp.int32)
    valid = jnp.array([True, True, True, True, False, False])
    mask = np.asarray(sampling.unpack(sampling.mark(row, examples, valid), n))
    assert set(np.flatnonzero(mask)) == {0, 31, 32, 69}


def test_drawing_until_exhausted_visits_every_example_once():
    n, B = 77, 8
    row, seen = sampling.empty_mask(1, n)[0], []
    key = jax.random.PRNGKey(3)
    while len(seen) < n:
        size = min(B, n - len(seen))
        ex = np.asarray(sampling.draw(sampling.draw_key(key, 0, len(seen)), row, len(seen), n, B))[:size]
        row = sampling.mark(row, jnp.asarray(ex), jnp.ones(size, bool))
        seen.extend(ex.tolist())
    assert sorted(seen) == list(range(n))
    assert np.all(np.asarray(sampling.unpack(row, n)))


def test_batches_are_uniform_subsets_of_the_unobserved():
    """Monte Carlo over keys: 4 of 10 examples observed, batches of 3 from the other 6.

    All 20 subsets are equally likely. 40,000 draws give a chi-square with 19
    degrees of freedom; the bound 43.8 is its 0.999 quantile, so a correct
    sampler fails with probability 0.001 (and this fixed seed passes), while a
    subset 10% too likely moves the statistic by about 20.
    """
    n, B, draws = 10, 3, 40_000
    observed = np.zeros(n, bool)
    observed[[1, 4, 5, 9]] = True
    row = jnp.asarray(_pack(observed))
    keys = jax.random.split(jax.random.PRNGKey(11), draws)
    batches = np.asarray(jax.vmap(lambda k: sampling.draw(k, row, 4, n, B))(keys))
    subsets = [tuple(sorted(b)) for b in batches]
    free = np.flatnonzero(~observed)
    expected = list(itertools.combinations(free, B))
    assert set(subsets) == set(expected)
    counts = np.array([subsets.count(s) for s in expected])
    chi2 = ((counts - draws / len(expected)) ** 2 / (draws / len(expected))).sum()
    assert chi2 < 43.8, chi2
