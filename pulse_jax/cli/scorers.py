"""How ``select`` scores a batch: a Python function (``--evaluate``), lm-evaluation-harness
(``--lm-eval-task``) or Inspect (``--inspect-task``), and which examples it evaluates."""
from __future__ import annotations

from pulse_jax.cli.inputs import read_lines
from pulse_jax.errors import PulseInputError, require


def load_evaluate(spec: str):
    from pulse_jax import registry

    module_name, _, attr = spec.partition(":")
    require(module_name and attr, f"--evaluate must look like package.module:function, got {spec!r}")
    function = registry.load_attribute(spec, "--evaluate")
    require(callable(function), f"--evaluate: {module_name!r} has no function {attr!r}")
    return function


def examples_option(text: str):
    """``--examples``: a positive count, or a file of example ids (one per line)."""
    try:
        count = int(text)
    except ValueError:
        return read_lines(text, "--examples")
    require(count >= 1, f"--examples {text}: give a positive number of examples or a file of example ids")
    require(count < 2**31, f"--examples {text}: more examples than a run can index (at most {2**31 - 1:,})")
    return count


def _lm_eval_scorer(args, models):
    """``(scorer, examples)`` for ``select --lm-eval-task``: the models are lm-eval specs, the examples the
    task's documents (all of them, or the first ``--examples`` / those listed)."""
    from pulse_jax.harnesses import lm_evaluation

    scorer = lm_evaluation.LmEvalScorer(args.lm_eval_task, models, metric=args.lm_eval_metric,
                                  filter=args.lm_eval_filter, include_path=args.lm_eval_include,
                                  cache_dir=str(args.log) + ".lm-eval-cache", plugins=args.lm_eval_plugin,
                                  device=args.lm_eval_device)
    return scorer, task_examples(args.examples, scorer.doc_ids, args.lm_eval_task, "document", document_id)


def document_id(text):
    """An lm-eval document id as ``--examples`` lists it (an integer)."""
    try:
        return int(text)
    except ValueError:
        raise PulseInputError(f"--examples: lm-eval examples are document ids (integers), got {text!r}") from None


def task_examples(option, ids, task, noun, parse):
    """What ``select`` evaluates of a harness task's ``ids``: all of them, the first ``--examples N``, or
    those the ``--examples`` file lists (``parse`` reads one listed id; each must be one of ``ids``)."""
    if option is None:
        return ids
    chosen = examples_option(option)
    if isinstance(chosen, int):
        require(chosen <= len(ids), f"--examples {chosen}: the task {task!r} has {len(ids)} {noun}s")
        return ids[:chosen]
    known = set(ids)
    listed = [parse(x) for x in chosen]
    bad = [x for x in listed if x not in known]
    if bad:
        raise PulseInputError(f"--examples {option}: no {noun} {bad[0]!r} in {task!r} ({len(ids)} {noun}s)")
    return listed


def scorer_of(args, models):
    """``(evaluate, examples)`` from --evaluate, --lm-eval-task or --inspect-task (exactly one)."""
    require([args.evaluate, args.lm_eval_task, args.inspect_task].count(None) == 2,
            "give one way to score: --evaluate package.module:function, --lm-eval-task TASK or --inspect-task "
            "FILE.py@TASK")
    if args.lm_eval_task:
        return _lm_eval_scorer(args, models)
    if args.inspect_task:
        return _inspect_scorer(args, models)
    require(args.examples is not None, "--examples: give the number of examples or a file of example ids")
    return load_evaluate(args.evaluate), examples_option(args.examples)


def _inspect_scorer(args, models):
    """``(scorer, examples)`` for ``select --inspect-task``: the models are Inspect model names, the
    examples the task's sample ids (all of them, or the first ``--examples`` / those listed)."""
    from pulse_jax.harnesses import inspect_logs

    scorer = inspect_logs.InspectScorer(args.inspect_task, models,
                                           log_dir=args.inspect_log_dir or str(args.log) + ".inspect",
                                           scorer=args.inspect_scorer, metric=args.inspect_metric,
                                           value_map=inspect_logs.parse_value_map(args.value_map))
    by_text = {str(i): i for i in scorer.sample_ids}
    return scorer, task_examples(args.examples, scorer.sample_ids, args.inspect_task, "sample",
                                  lambda text: by_text.get(text, text))
