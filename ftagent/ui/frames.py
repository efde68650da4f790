"""Tables for the UI and ``ftagent job status``: summary grid, timelines, scores, losses, metrics.

Built from the views of :mod:`ftagent.views.session`; pandas is imported inside the frame functions so the
CLI stays light.
"""

from __future__ import annotations

from typing import Any

from ftagent.views.session import JobView, LoopView, SessionView


def fmt_score(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def loop_cell(lp: LoopView | None) -> str:
    """A summary-grid cell: ``val / test`` scores, else a status letter (R running, X failed, - none)."""
    if lp is None:
        return "-"
    if lp.val_score is not None or lp.test_score is not None:
        return f"{fmt_score(lp.val_score)} / {fmt_score(lp.test_score)}"
    if lp.failed:
        return "X"
    return "R" if lp.status == "running" else "?"


def loop_colour(lp: LoopView | None) -> str:
    """green = new SOTA, red = failed or rejected, blue = running, '' = no loop."""
    if lp is None:
        return ""
    if lp.decision:
        return "green"
    if lp.failed or lp.decision is False:
        return "red"
    return "blue"


def summary_rows(job: JobView) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Rows of the Job Summary grid and, in parallel, the colour of each loop cell."""
    n_loops = max((len(s.loops) for t in job.tasks for s in t.sessions[-1:]), default=0)
    rows, colours = [], []
    for task in job.tasks:
        s = task.latest
        loops = {lp.index: lp for lp in s.loops} if s else {}
        row: dict[str, Any] = {
            "Task": task.name, "State": task.state,
            "Metric": (s.core_metric or "-") if s else "-",
            "Baseline": f"{fmt_score(s.baseline.get('validation'))} / {fmt_score(s.baseline.get('test'))}"
            if s else "-",
        }
        colour: dict[str, str] = {}
        for i in range(n_loops):
            row[f"L{i}"] = loop_cell(loops.get(i))
            colour[f"L{i}"] = loop_colour(loops.get(i))
        row["Best"] = f"{fmt_score(s.best('validation'))} / {fmt_score(s.best('test'))}" if s else "-"
        row["Loops"] = sum(1 for lp in loops.values() if lp.end) if s else 0
        row["Failures"] = sum(1 for lp in loops.values() if lp.failed) if s else 0
        rows.append(row)
        colours.append(colour)
    return rows, colours


def job_stats(job: JobView) -> dict[str, int]:
    """Counts for the Job Summary header."""
    states = [t.state for t in job.tasks]
    latest = [t.latest for t in job.tasks if t.latest]
    return {
        "tasks": len(job.tasks),
        "running": states.count("running"),
        "finished": states.count("finished"),
        "waiting": states.count("waiting"),
        "loops done": sum(1 for s in latest for lp in s.loops if lp.end),
        "failures": sum(1 for s in latest for lp in s.loops if lp.failed),
        "improved": sum(1 for s in latest if any(lp.decision for lp in s.loops)),
    }


def summary_frame(job: JobView):
    """The Job Summary grid as a pandas DataFrame (index = task name)."""
    import pandas as pd

    rows, _ = summary_rows(job)
    return pd.DataFrame(rows).set_index("Task") if rows else pd.DataFrame()


def timeline_frame(session: SessionView):
    """One row per step run: loop, step, status, duration, failure."""
    import pandas as pd

    rows = [{"loop": lp.index, "step": st.name, "status": st.status,
             "duration_s": None if st.duration_s is None else round(st.duration_s, 2),
             "goto": st.goto or "", "failure": st.failure or ""} for lp in session.loops for st in lp.steps]
    return pd.DataFrame(rows)


def scores_frame(session: SessionView):
    """Validation/test core score by loop (plus the baseline as a flat line), index = loop."""
    import pandas as pd

    rows = [{"loop": lp.index, "validation": lp.val_score, "test": lp.test_score,
             "baseline (val)": session.baseline.get("validation")} for lp in session.loops]
    return pd.DataFrame(rows).set_index("loop") if rows else pd.DataFrame()


def loss_frame(lp: LoopView):
    """The training loss history (index = step) or an empty frame."""
    import pandas as pd

    hist = (lp.training or {}).get("loss_history") or []
    df = pd.DataFrame(hist)
    if df.empty or "loss" not in df:
        return pd.DataFrame()
    x = "step" if "step" in df else ("current_steps" if "current_steps" in df else None)
    df = df.set_index(x) if x else df
    return df[["loss"]]


def metrics_frame(result: dict[str, Any] | None):
    """A benchmark_result's ``metrics`` ({dataset: {metric: value}}) as a table."""
    import pandas as pd

    metrics = (result or {}).get("metrics") or {}
    rows = []
    for dataset, values in metrics.items():
        if isinstance(values, dict):
            rows += [{"dataset": dataset, "metric": k, "value": v} for k, v in values.items()]
        else:
            rows.append({"dataset": "", "metric": dataset, "value": values})
    return pd.DataFrame(rows)


def llm_frame(calls: list[dict[str, Any]]):
    """LLM calls with tokens, cost and latency."""
    import pandas as pd

    cols = ["loop", "stage", "model", "prompt_tokens", "completion_tokens", "cost_usd", "latency_s", "error"]
    return pd.DataFrame([{c: call.get(c) for c in cols} for call in calls], columns=cols)
