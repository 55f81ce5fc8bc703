"""The built-ins as declared (`pulse_jax.registry.BUILT_INS`, read before JAX is imported) are the
plug-ins their factories build, and a mistaken command is refused before JAX is imported."""
import math
import subprocess
import sys
import textwrap

import pytest

from pulse_jax import registry, rules, stopping

#: The fields a declaration mirrors, by kind (the plug-in classes' own field names).
CAPABILITIES = {"estimator": ("name", "uses_predictions", "has_interval"),
                "sampling rule": ("name", "needs_interval"),
                "stopping rule": ("name", "needs_interval", "upper_models", "uses_cost")}
TABLES = {"estimator": registry.ESTIMATORS, "sampling rule": registry.SAMPLING_RULES,
          "stopping rule": registry.STOPPING_RULES}


def _same_numbers(a, b) -> bool:
    """Two params values: the same class and the same numbers (NaN equal to NaN)."""
    if type(a) is not type(b):
        return False
    return all(x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y)) for x, y in zip(a, b))


@pytest.mark.parametrize("kind", list(TABLES))
def test_every_declared_built_in_is_what_its_factory_builds(kind):
    declared = registry.BUILT_INS[kind]
    assert list(declared) == list(TABLES[kind])          # the same names, in the order messages list them
    for name, builtin in declared.items():
        plugin = TABLES[kind][name]()                    # as the plug-in package's table builds it
        assert registry.build(builtin) is plugin, name  # the same (cached) factory call
        for field in CAPABILITIES[kind]:
            assert getattr(builtin, field) == getattr(plugin, field), (name, field)
        assert _same_numbers(builtin.params, plugin.params), (name, builtin.params, plugin.params)
        assert builtin.kind == kind


@pytest.mark.parametrize("k", [2, 3, 5])
def test_the_certificates_declarations_follow_their_size(k):
    stop, rule = registry.builtin_top_k(k), registry.builtin_lucb_top_k(k)
    assert registry.build(stop) is stopping.top_k(k) and stop.upper_models == stopping.top_k(k).upper_models == k
    assert registry.build(rule) is rules.lucb_top_k(k)
    assert (rule.name, rule.needs_interval) == (rules.lucb_top_k(k).name, rules.lucb_top_k(k).needs_interval)


def test_names_and_aliases_resolve_through_the_declarations():
    for alias, name in registry.ALIASES.items():
        kinds = [kind for kind in registry.BUILT_INS if name in registry.BUILT_INS[kind]]
        assert kinds, alias
        for kind in kinds:
            assert registry.resolve(kind, alias) is registry.resolve(kind, name)
    with pytest.raises(registry.PulseInputError, match="unknown method .estimator. 'pulsar'; choose one of ucbe, pulse"):
        registry.resolve("estimator", "pulsar")
    # a declaration given where a plug-in is taken is built
    assert registry.resolve("estimator", registry.BUILT_INS["estimator"]["pulse"]) is registry.estimator("pulse")


#: Commands refused by their checks; after all of them ``jax`` must still not be imported.
REFUSED = [
    ["simulate", "--scores", "cand.csv", "--out", "o", "--method", "pulsar"],
    ["simulate", "--scores", "nofile.csv", "--out", "o"],
    ["simulate", "--scores", "cand.csv", "--out", "o", "--method", "pulse"],
    ["simulate", "--scores", "cand.csv", "--out", "o", "--method", "ucbe", "--param", "nosuch=1"],
    ["simulate", "--scores", "cand.csv", "--out", "o", "--method", "ucbe", "--param", "rule.exploration=-1"],
    ["simulate", "--scores", "cand.csv", "--out", "o", "--method", "ucbe", "--top-k", "4"],
    ["sweep", "--scores", "cand.csv", "--out", "o", "--method", "ucbe", "--grid", "delta=0.1,2"],
    ["tune", "--train", "cand.csv", "--ranks", "0", "--out", "t.json"],
    ["demo", "--budget", "1"],
    ["select", "--models", "models.txt", "--evaluate", "scorer:score", "--examples", "20", "--log", "run.db",
     "--budget", "400", "--method", "naive", "--train", "cand.csv", "--stop", "certified"],
    ["select", "--models", "models.txt", "--evaluate", "scorer:score", "--examples", "20", "--log", "run.db",
     "--budget", "400", "--param", "stop.nosuch=1"],
    ["log", "show", "models.txt"],
]


def test_mistaken_commands_are_refused_before_jax_is_imported(tmp_path):
    rows = ["model," + ",".join(f"q{j}" for j in range(20))]
    rows += [f"m{i}," + ",".join(str((i + j) % 2) for j in range(20)) for i in range(4)]
    (tmp_path / "cand.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "models.txt").write_text("m0\nm1\nm2\nm3\n")
    (tmp_path / "scorer.py").write_text("def score(model, ids):\n    return [0.5 for _ in ids]\n")
    script = textwrap.dedent(f"""
        import sys
        from pulse_jax.cli.app import main
        for command in {REFUSED!r}:
            try:
                code = main(command)
            except SystemExit as stop:
                code = stop.code
            assert code not in (0, None), command
            assert "jax" not in sys.modules, ("jax imported by", command)
        print("refused", len({REFUSED!r}))
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin", "PULSE_JAX_CACHE": "off"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"refused {len(REFUSED)}" in proc.stdout
    errors = [line for line in proc.stderr.splitlines() if line.startswith("pulse-jax: error:")]
    assert len(errors) == len(REFUSED), proc.stderr[-3000:]     # each refused in one line
    assert "Traceback" not in proc.stderr
