"""Verdicts a loaded machine may have decided: answers whose scoring still timed out after its wider retry.

Two scorers time out per answer and retry once with a wider limit: math-verify
(:class:`ftagent.tools.opencompass.oc_math.MathVerifyEvaluator`, ``verify_unresolved``) and TableBench's chart
programs (:func:`ftagent.benchmarks.domain.tablebench.run_chart`, ``chart_unresolved``). A result with such an
answer is warned about and never cached (``run_job.run_groups``): its verdict is the time limit's, not the
answer's, and a rerun on a quieter machine may differ.
"""

from __future__ import annotations

from ftagent.tools.opencompass import parse

#: the metric counting a scorer's unresolved answers -> what the warning says of them
UNRESOLVED = {"verify_unresolved": "math-verify did not finish on {n:g} answer(s) even with a wider time limit",
              "chart_unresolved": "{n:g} chart program(s) timed out twice (the limit, then four times it)"}


def unresolved_timeouts(metrics: dict[str, dict[str, float]]) -> dict[str, float]:
    """Unresolved answers per kind (:data:`UNRESOLVED`) in a result's ``{dataset: {metric: value}}``, summed
    over the datasets (a runs average counts as its value); kinds with none are left out."""
    out: dict[str, float] = {}
    for values in metrics.values():
        for name, value in values.items():
            metric = parse.metric_runs(name)[0]
            if metric in UNRESOLVED and value:
                out[metric] = out.get(metric, 0.0) + value
    return out


def unresolved_warnings(where: str, unresolved: dict[str, float]) -> list[str]:
    """One warning line per kind of :func:`unresolved_timeouts` (``where``: ``benchmark/split``)."""
    return [f"{where}: {UNRESOLVED[metric].format(n=count)}: they score as wrong (details: "
            f"{metric.replace('_unresolved', '_timed_out')}), and this result is not cached"
            for metric, count in unresolved.items()]
