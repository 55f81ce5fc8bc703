"""A live selection's report folder: checked before anything is paid for, then written from its
`pulse_jax.live.Report` (``report.md``, ``report.json`` recording the plan, the figures and the
provenance), as ``pulse-jax select`` and Inspect's ``select_best`` write it. The folder is the
plan's (`pulse_jax.live.Plan.report_folder`)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

import numpy as np

from pulse_jax.errors import require


def check_report_folder(plan) -> None:
    """``plan``'s report folder is new, empty, or holds this same log's report (a resumed run writes it
    again); another run's results need ``force``."""
    from pulse_jax.fileio import files

    out, spell = plan.report_folder, plan.spell
    require(not (out.is_symlink() and not out.exists()),
            f"{spell('report')} {out}: a symbolic link to nothing; remove it or give another folder")
    require(not out.exists() or out.is_dir(), f"{spell('report')} {out}: exists and is not a directory")
    if not out.is_dir() or plan.force or not any(out.iterdir()):
        files.check_out_dir(out, plan.force, spell("report"), spell("force"))
        return
    try:
        previous = json.loads(files.read_record(out / "report.json") or "{}").get("log")
    except (ValueError, AttributeError):
        previous = None
    if previous != str(Path(plan.log).resolve()):
        files.check_out_dir(out, False, spell("report"), spell("force"))


def cost_title(report, selector) -> str:
    """``cost_accuracy.png``'s title: the question the stopping rule answers, its epsilon and the spend."""
    question = {"cheapest_within": "the cheapest model within {eps} of the best",
                "cost_front": "the cost-accuracy front (within {eps})"}.get(report.stop, "cost and accuracy")
    epsilon = getattr(selector.params.stop, "epsilon", None)
    spend = report.spend or {}
    paid = f"${spend['usd']:,.2f}" if "usd" in spend else ""
    return (question.format(eps=f"epsilon {float(epsilon):g}" if epsilon is not None else "epsilon")
            + f": {report.spent:,} cells" + (f", {paid} spent" if paid else "")
            + (f"; claimed: {', '.join(report.claimed[:3])}"
               + (f" and {len(report.claimed) - 3} more" if len(report.claimed) > 3 else "")
               if report.claimed else ""))


def write_report(plan, report, selector, *, extra: Mapping | None = None, inputs=None, figure: bool = True,
                 preface: str = "") -> Path:
    """``report.md`` (after a ``preface`` paragraph), ``report.json`` (naming its log, recording ``plan``,
    with ``extra``) and, with ``figure``, ``estimates.png`` and ``provenance.json`` in the plan's report
    folder; returns the folder."""
    from pulse_jax.fileio import files, provenance

    out = plan.report_folder
    out.mkdir(parents=True, exist_ok=True)
    files.remove_previous_outputs(out)
    log = str(Path(plan.log).resolve())
    files.write_atomically(out / "report.md", (f"{preface}\n\n" if preface else "") + report.to_markdown())
    files.write_atomically(out / "report.json", json.dumps(provenance.clean_json(
        {**report.to_dict(), "log": log, "plan": plan.to_dict(), **dict(extra or {})}), indent=2))
    if figure:
        report.plot(out / "estimates.png")
        if selector.cost is not None:
            from pulse_jax.analysis import plotting

            plotting.cost_accuracy(out / "cost_accuracy.png", selector.cost, report.estimates, report.models,
                                   low=report.low, high=report.high, claimed=np.isin(report.models, report.claimed),
                                   title=cost_title(report, selector), unit="$")
        provenance.write(out, provenance.collect(config=selector.config, plugins=selector.plugins, params=selector.params, seed=plan.seed,
                                                 inputs=inputs or (), method=selector.method, extra={"log": log}),
                         files=["report.md", "report.json", "estimates.png"]
                         + (["cost_accuracy.png"] if selector.cost is not None else []))
    return out
