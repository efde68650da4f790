"""Tables for the UI and ``ftagent job status``: summary grid, timelines, scores, losses, metrics.

Built from the views of :mod:`ftagent.views.session`; pandas is imported inside the frame functions so the
CLI stays light.
"""

from __future__ import annotations

import json
from typing import Any

from ftagent.core.stats import interval_line
from ftagent.views.console import short_duration
from ftagent.views.job import JobView
from ftagent.views.session_view import LoopView, SessionView

STEP_ORDER = ("propose", "code", "validate", "train", "evaluate", "feedback")


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


def interval_lines(lp: LoopView) -> list[str]:
    """``validation 62 (+3.0 [-4.0, +10.0] vs SOTA, 100 items; ...)`` for each split with recorded differences."""
    parts = lp.parts
    scores = [("validation", lp.val_score), *((p, (parts.get(p) or {}).get("score")) for p in ("selection", "feedback")),
              ("test", lp.test_score)]
    return [interval_line(score, lp.intervals, split) for split, score in scores
            if score is not None and any(d.get("split") == split for d in lp.intervals)]


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

    rows = [{"loop": lp.index, "step": st.name, "status": st.status, "duration": short_duration(st.duration_s),
             "goto": st.goto or "", "failure": st.failure or ""} for lp in session.loops for st in lp.steps]
    return pd.DataFrame(rows)


def steps_frame(lp: LoopView):
    """A loop's steps: name, status, duration (``11.1 s``), goto, failure."""
    import pandas as pd

    cols = ["step", "status", "duration", "goto", "failure"]
    rows = [{"step": st.name, "status": st.status, "duration": short_duration(st.duration_s),
             "goto": st.goto or "", "failure": st.failure or ""} for st in lp.steps]
    return pd.DataFrame(rows, columns=cols)


def session_forecast(session: SessionView) -> dict[int, dict[str, float]] | None:
    """Forecast vs actual: the forecast seconds per loop and step, or ``None`` when the session has none.

    The session's ``forecast`` event (recorded after the baseline, issue #23) is projected into
    :attr:`SessionView.forecast`; :func:`step_times_frame` adds a ``forecast`` row under each loop's
    ``actual`` row (validate includes the data processing; propose/code/feedback are forecast as 0).
    """
    if not session.forecast:
        return None
    from ftagent.core.forecast_arithmetic import Forecast

    return {lp.loop: lp.steps() for lp in Forecast(**session.forecast).loops}


def step_times_frame(session: SessionView, forecast: dict[int, dict[str, float]] | None = None):
    """Wall time per loop and step (summed over goto rounds), as ``11.1 s`` / ``3 min 12 s`` text.

    One ``actual`` row per loop, plus a ``forecast`` row when ``forecast`` (see :func:`session_forecast`)
    has that loop. Columns: loop, row, the steps in workflow order, total.
    """
    import pandas as pd

    names = [n for n in STEP_ORDER if any(st.name == n for lp in session.loops for st in lp.steps)]
    names += sorted({st.name for lp in session.loops for st in lp.steps} - set(names))
    rows = []
    for lp in session.loops:
        spent: dict[str, float] = {}
        for st in lp.steps:
            if st.duration_s is not None:
                spent[st.name] = spent.get(st.name, 0.0) + st.duration_s
        series = [("actual", spent)] + ([("forecast", forecast[lp.index])] if forecast and lp.index in forecast else [])
        for label, secs in series:
            row: dict[str, Any] = {"loop": lp.index, "row": label}
            row.update({n: short_duration(secs.get(n)) for n in names})
            row["total"] = short_duration(sum(secs.values())) if secs else "-"
            rows.append(row)
    return pd.DataFrame(rows, columns=["loop", "row", *names, "total"])


def task_rows(session: SessionView, spec: dict[str, Any] | None = None) -> list[dict[str, str]]:
    """The session's task as ``field``/``value`` rows: benchmark, model, planner, runner, metric, and
    the job's loops and timeout when the session belongs to a job (``spec`` = its tasks.json entry)."""
    spec = spec or {}
    state = "running" if session.running else f"ended: {(session.end or {}).get('status')}"
    rows = [("benchmark", session.benchmark), ("base model", session.base_model), ("planner", session.planner),
            ("runner", session.runner), ("core metric", f"{session.core_metric or '?'} ({session.direction})"),
            ("loops", spec.get("loop_n")), ("timeout", spec.get("timeout")), ("gpus", spec.get("gpus")),
            ("state", state), ("session", session.session_id)]
    return [{"field": k, "value": str(v)} for k, v in rows if v not in (None, "")]


def split_task_text(text: str) -> tuple[str, list[dict[str, str]]]:
    """A hypothesis task such as ``Train with {"learning_rate": 1e-4, ...}`` → (``Train with``, key/value rows).

    Text without a JSON object stays text (no rows).
    """
    start = text.find("{")
    if start < 0:
        return text, []
    try:
        obj, end = json.JSONDecoder().raw_decode(text[start:])
    except ValueError:
        return text, []
    if not isinstance(obj, dict) or not obj:
        return text, []
    rest = (text[:start] + text[start + end:]).strip()
    return rest, [{"key": str(k), "value": v if isinstance(v, str) else json.dumps(v)} for k, v in obj.items()]


def line_spec(x: str, y: str, color: str | None = None, title: str | None = None) -> dict[str, Any]:
    """A Vega-Lite line chart spec (drawn by ``st.vega_lite_chart``; no Altair, which ``st.line_chart``
    imports and builds per chart: it was most of a single-task page's server time). ``x`` is an integer
    axis (loop, step): ticks at whole numbers only."""
    enc: dict[str, Any] = {"x": {"field": x, "type": "quantitative", "axis": {"tickMinStep": 1, "format": "d"}},
                           "y": {"field": y, "type": "quantitative"}}
    if color:
        enc["color"] = {"field": color, "type": "nominal"}
    spec: dict[str, Any] = {"mark": {"type": "line", "point": True}, "encoding": enc}
    if title:
        spec["title"] = title
    return spec


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

    cols = ["loop", "stage", "model", "prompt_tokens", "completion_tokens", "cost_usd", "latency", "error"]
    rows = [{**{c: call.get(c) for c in cols}, "latency": short_duration(call.get("latency_s"))} for call in calls]
    return pd.DataFrame(rows, columns=cols)


def stage_text(lp: LoopView) -> str:
    """``**Stage**: dpo, from loop 0's weights (chain sft → dpo); sampled: 96 answers ...`` (issue 40)."""
    h = lp.hypothesis or {}
    start = f"loop {h['weights_from']}'s weights" if h.get("weights_from") is not None else "the base model"
    text = f"**Stage**: {lp.stage}, from {start}"
    chain = (lp.training or {}).get("chain") or []
    if len(chain) > 1:
        text += f" (chain {' → '.join(chain)})"
    s = lp.sampling
    if s:
        text += (f"; sampled {s.get('samples')} answers of the start weights to {s.get('prompts')} training prompts "
                 f"at temperature {s.get('temperature')}: {s.get('correct')} right, {s.get('prompts_mixed')} prompts "
                 "with right and wrong answers")
    return text
