"""On a CPU a vmapped run refits its repetitions one at a time (`factorization.one_repetition_at_a_time`):
the same numbers as the batched refit, gathers whose size does not grow with the repetitions, and the
kernel's run really taking that path."""
import jax
import jax.numpy as jnp
import numpy as np
from test_engine import _blocks_problem

from pulse_jax import engine
from pulse_jax.engine.drivers import make_run
from pulse_jax.stats import factorization

M, N, R_, L, K = 6, 40, 3, 4, 12


def _refit(U, V, first, log, used, lr):
    settings = engine.adam_refit(15, lr, 0.01)
    return factorization.refit_rows_on_blocks(U, V, (first, log), N, settings,
                                              filled=factorization.FilledPrefix(used, 4))


def _batched_problem(reps):
    """``reps`` repetitions of `_blocks_problem` sharing ``V`` (as a simulation's repetitions do)."""
    problems = [_blocks_problem(20 + k, M, N, R_, L, K) for k in range(reps)]
    V = problems[0][1]
    stack = lambda *xs: jax.tree_util.tree_map(lambda *a: jnp.stack(a), *xs)   # noqa: E731
    return V, stack(*(p[2] for p in problems)), stack(*(p[3] for p in problems)), stack(*(p[4] for p in problems))


def test_one_at_a_time_equals_the_batched_refit_at_several_repetition_counts():
    """Per repetition the arithmetic is the batched refit's: 15 Adam steps in float32 agree to 2e-5
    (summation order only; a wrong member, a shared argument copied wrongly or a mixed-up ``used``
    would differ by the size of an Adam step, 0.1). Covers 1 and 3 repetitions, a ``used`` that
    varies across the batch and one that does not, and a nested vmap (2 points x 3 repetitions) with
    a learning rate that varies across points, as a sweep has."""
    sequential = factorization.one_repetition_at_a_time(_refit)
    for reps in (1, 3):
        V, U, first, log = _batched_problem(reps)
        for used, axis in ((jnp.int32(9), None), (jnp.arange(reps, dtype=jnp.int32) + 7, 0)):
            axes = (0, None, 0, 0, axis, None)
            want = jax.jit(jax.vmap(_refit, axes))(U, V, first, log, used, 0.1)
            got = jax.jit(jax.vmap(sequential, axes))(U, V, first, log, used, 0.1)
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-5)
    V, U, first, log = _batched_problem(3)
    rates = jnp.asarray([0.05, 0.2], jnp.float32)
    inner = (0, None, 0, 0, None, None)
    nest = lambda f: jax.jit(jax.vmap(jax.vmap(f, inner), (None, None, None, None, None, 0)))  # noqa: E731
    want = nest(_refit)(U, V, first, log, jnp.int32(9), rates)
    got = nest(sequential)(U, V, first, log, jnp.int32(9), rates)
    assert got.shape == (2, 3, M, R_)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-5)
    assert float(jnp.max(jnp.abs(got[0] - got[1]))) > 1e-3      # the rate reached each point


def _jaxprs(jaxpr):
    """``jaxpr`` and every jaxpr nested in its equations (loop bodies, branches, calls)."""
    yield jaxpr
    for eqn in jaxpr.eqns:
        for value in eqn.params.values():
            for inner in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(inner, "jaxpr", inner)
                if isinstance(inner, jax.extend.core.Jaxpr):
                    yield from _jaxprs(inner)


def _v_row_gathers(reps):
    """Output sizes of the gathers from ``V`` (``(n, r)``) inside a loop of ``reps`` iterations in the
    jaxpr of ``reps`` vmapped PULSE runs on the small problem."""
    from pulse_jax.engine import op_count

    bandit, _, params, scores, V = op_count._problem("pulse", {})
    run = jax.vmap(make_run(bandit, "pulse"), (0, None, None, None))
    closed = jax.make_jaxpr(run)(jax.random.split(jax.random.PRNGKey(0), reps), scores, V, params)
    in_loops = []
    for jaxpr in _jaxprs(closed.jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "scan" and eqn.params["length"] == reps:
                in_loops += [e.outvars[0].aval.size for j in _jaxprs(eqn.params["jaxpr"].jaxpr) for e in j.eqns
                             if e.primitive.name == "gather" and e.invars[0].aval.shape == V.shape]
    return in_loops


def test_the_refits_gathers_do_not_grow_with_the_repetitions():
    """In a vmapped run on a CPU the refit's ``V``-row gathers sit in a loop over the repetitions, each
    the size of one repetition's chunk: the same sizes at 2 and at 8 repetitions. Batched, they would
    hold R chunks at once (R x 128 KiB per chunk at R = 100: out of the core's cache before the
    second contraction reads it back)."""
    two, eight = _v_row_gathers(2), _v_row_gathers(8)
    assert two and sorted(set(two)) == sorted(set(eight))


def _by_model_problem(seed):
    """Six models, initial blocks two log blocks wide (each is split in two), a log of 12 blocks (one
    model three times, one once, the others twice: 5, 3 and 4 blocks per model in all), then 4 empty
    slots holding out-of-range scores."""
    rng, V, U0, _, log = _blocks_problem(seed, M, N, R_, L, 16)
    first = factorization.CellBlocks(jnp.arange(M, dtype=jnp.int32), jnp.asarray(rng.integers(0, N, (M, 2 * L)), jnp.int32),
                                     jnp.asarray(rng.random((M, 2 * L)), jnp.float32), jnp.ones((M, 2 * L), bool))
    second = rng.permutation(M)
    rows = jnp.asarray(np.r_[rng.permutation(M), second[:5], second[0], np.zeros(4, int)], jnp.int32)
    valid = log.valid.at[12:].set(False)
    log = log._replace(rows=rows, valid=valid, scores=jnp.where(valid, log.scores, 5.0))
    return V, U0, (first, log)


def test_the_refit_by_model_equals_the_full_batch_refit(monkeypatch):
    """Every epoch done a few whole models at a time, and the models with more blocks than a chunk
    holds (or blocks for a large share of the examples) stepped on dense rows, ends where the
    full-batch refit does: 15 Adam steps agree to 2e-5 in float32 (summation order only; a row
    stepped with another's cells, a model split across chunks or groups, a block scattered twice or
    missed, a duplicate cell counted once or an empty slot's score would move rows by about an Adam
    step, 0.1). The problem's cells repeat examples, as only a sampler without replacement avoids.
    Chunks of 3 blocks (all but one model, with 4 or 5, dense: 21 blocks), 4 (one model dense), 9
    and 40; dense groups of 1, 2 (the last one part empty) and 8 models (one group); scatter pieces
    2 or 3 blocks long (a last piece part empty), and as the module sizes them (every block at once
    here: no longer than the sorted blocks' padding); every model dense by its share. With a `RowPrior`
    (which pulls each row on its own), and with a prior towards the rows' own mean (which couples
    them: one step per pass, Adam's moments carried across passes and across chunks and groups)."""
    from pulse_jax.stats import refit_by_model

    V, U0, blocks = _by_model_problem(3)
    prior = factorization.RowPrior(jnp.full(R_, 0.3), jnp.eye(R_) * 2.0)
    piece = refit_by_model.piece
    cases = ((3, 2, 1, 0.5), (3, 3, 2, 0.5), (4, 2, 8, 0.5), (9, 3, 2, 0.5), (40, 2, 1, 0.5), (40, 3, 2, 0.0),
             (3, None, 2, 0.5), (40, None, 8, 0.0))          # None: the module's own pieces
    for settings in (engine.adam_refit(15, 0.1, 0.01), engine.adam_refit(15, 0.1, 0.01, 4.0, prior),
                     engine.adam_refit(15, 0.1, 0.01, 40.0)):
        want = factorization.refit_rows_on_blocks(U0, V, blocks, N, settings)
        for cap, size, group, share in cases:
            monkeypatch.setattr(refit_by_model, "capacity", lambda *a, cap=cap: cap)
            monkeypatch.setattr(refit_by_model, "piece", piece if size is None else lambda *a, size=size: size)
            monkeypatch.setattr(refit_by_model, "group_size", lambda *a, group=group: group)
            monkeypatch.setattr(refit_by_model, "DENSE_SHARE", share)
            got = jax.jit(lambda u: refit_by_model.refit_rows_by_model(u, V, blocks, N, settings))(U0)
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-5,
                                       err_msg=f"cap {cap}, piece {size}, group {group}, share {share}")


def _primitives(fn, *args):
    closed = jax.make_jaxpr(fn)(*args)
    return [e.primitive.name for j in _jaxprs(closed.jaxpr) for e in j.eqns]


def test_the_first_look_refit_equals_the_full_batch_refit(monkeypatch):
    """The first look (one block per model) refit by `refit_first_look` ends where the full-batch refit
    does (15 Adam steps to 2e-5, summation order only, as above) with the models in chunks of 1, 4
    (the last one part padding: 6 models) and all 6, with no prior, a `RowPrior`, and a prior towards
    the rows' own mean (one step per pass); its program has no sort and no conditional, and under a
    third of the general refit's equations."""
    from pulse_jax.stats import refit_by_model

    V, U0, (first, _) = _by_model_problem(4)
    prior = factorization.RowPrior(jnp.full(R_, 0.3), jnp.eye(R_) * 2.0)
    width = first.cols.shape[1]
    for settings in (engine.adam_refit(15, 0.1, 0.01), engine.adam_refit(15, 0.1, 0.01, 4.0, prior),
                     engine.adam_refit(15, 0.1, 0.01, 40.0)):
        want = factorization.refit_rows_on_blocks(U0, V, (first,), N, settings)
        for models in (1, 4, M):
            monkeypatch.setattr(refit_by_model, "CACHE_BYTES", models * width * R_ * 4)
            got = jax.jit(lambda u: refit_by_model.refit_first_look(u, V, first, N, settings))(U0)
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-5, err_msg=f"{models} a chunk")
    small = _primitives(lambda u: refit_by_model.refit_first_look(u, V, first, N, settings), U0)
    general = _primitives(lambda u: refit_by_model.refit_rows_by_model(u, V, (first,), N, settings), U0)
    assert "sort" not in small and "cond" not in small and "sort" in general and "cond" in general
    assert 3 * len(small) < len(general)


def test_coupled_rows_take_one_step_per_pass(monkeypatch):
    """A prior towards the rows' own mean couples every row. Stepped all epochs in one pass (each chunk
    with ``ubar`` frozen at the refit's start), the rows end elsewhere than the full-batch refit, by
    more than 1e-3, in both refits by model, where the one-step passes match it to 2e-5 (above): the
    schedule is what keeps them exact."""
    from pulse_jax.stats import refit_by_model

    V, U0, blocks = _by_model_problem(4)
    coupled = engine.adam_refit(15, 0.1, 0.01, 40.0)
    whole = factorization.refit_rows_on_blocks(U0, V, blocks, N, coupled)
    first = factorization.refit_rows_on_blocks(U0, V, blocks[:1], N, coupled)
    monkeypatch.setattr(refit_by_model, "_schedule", lambda settings: (1, jnp.int32(settings.epochs)))
    frozen = jax.jit(lambda u: refit_by_model.refit_rows_by_model(u, V, blocks, N, coupled))(U0)
    frozen_first = jax.jit(lambda u: refit_by_model.refit_first_look(u, V, blocks[0], N, coupled))(U0)
    assert float(jnp.max(jnp.abs(frozen - whole))) > 1e-3
    assert float(jnp.max(jnp.abs(frozen_first - first))) > 1e-3


def test_a_dense_group_holds_what_its_bytes_allow():
    """At most `GROUP_MODELS` models share dense rows, fewer where their rows would pass `DENSE_BYTES`,
    and never fewer than one or more than the models."""
    from pulse_jax.stats import refit_by_model as rbm

    assert rbm.group_size(3008, 250) == rbm.GROUP_MODELS
    assert rbm.group_size(3008, 3) == 3
    assert rbm.group_size(100_000, 250) == rbm.DENSE_BYTES // (12 * 100_000)
    assert rbm.group_size(10**8, 250) == 1
