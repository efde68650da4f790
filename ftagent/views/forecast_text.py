"""Forecast rendering: the ``ftagent plan`` table and forecast vs actual for the report and the UI."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ftagent.core.durations import format_duration
from ftagent.core.forecast_arithmetic import EvalProbe, Forecast, TrainProbe, percent_error, what_would_fit
from ftagent.core.reforecast_arithmetic import Reforecast
from ftagent.views.session_view import SessionView


class VersusRow(BaseModel):
    """One loop (or the total): the first forecast, the last re-forecast before the loop started (issue 43),
    the actual seconds, and the errors in percent."""

    loop: int | None  # None: the total
    forecast_s: float
    actual_s: float | None = None  # None: the loop has not ended
    error_pct: float | None = None
    reforecast_s: float | None = None  # None: no re-forecast was made before it started (loop 0)
    reforecast_error_pct: float | None = None


def _dur(seconds: float | None) -> str:
    return "-" if seconds is None else format_duration(seconds)


def measured_when(f: Forecast, probe: TrainProbe | EvalProbe) -> str:
    """"measured now" or a cached measurement's age, with the load it was made under."""
    age = f.made_at - probe.measured_at if probe.measured_at else None
    when = ("measured now" if age is not None and age < 60 + f.probe_cost_s else
            f"cached, measured {format_duration(age)} ago" if age is not None else "cached, age unknown")
    return when + (f" under {probe.load}" if probe.load else "")


def forecast_lines(f: Forecast) -> list[str]:
    """The forecast as plain lines (the CLI prints them under its table; the brief quotes some)."""
    lines = [f"planner: {f.planner}; memory plan: {f.memory}"]
    if f.train_probe is not None:
        lines.append(f"training speed ({measured_when(f, f.train_probe)}, {f.train_probe.steps} steps): "
                     f"{f.train_probe.s_per_step:.3f} s/step, "
                     f"run start-up {f.train_probe.startup_s:.1f} s; {f.plan.steps} steps in loop 0"
                     + (f"; one epoch of {f.plan.rows} rows = {_dur(f.s_per_epoch)}" if f.s_per_epoch else ""))
    if f.eval_probe is not None and not f.eval_probe.items:
        lines.append(f"evaluation: {f.eval_probe.fixed_s:.1f} s per run ({f.eval_probe.source})")
    elif f.eval_probe is not None:
        lines.append(f"evaluation ({measured_when(f, f.eval_probe)}): {f.eval_probe.items} items x "
                     f"{f.eval_probe.s_per_item * 1000:.1f} ms "
                     f"+ {f.eval_probe.fixed_s:.1f} s fixed (OpenCompass start-up and scoring)")
    cost = "unknown price" if f.llm.cost_usd is None else f"${f.llm.cost_usd:.4f}"
    lines.append(f"LLM: {f.llm.calls} calls, {f.llm.prompt_tokens + f.llm.completion_tokens:,} tokens "
                 f"({f.llm.prompt_tokens:,} prompt + {f.llm.completion_tokens:,} completion), {cost}"
                 + (f" [{f.llm.model}]" if f.llm.model else "")
                 + (f"; {_dur(f.llm.seconds)} of calls ({f.llm.s_per_call:.0f} s each, {f.llm.s_source})"
                    if f.llm.calls else ""))
    fit = f.fits_timeout
    lines.append(f"total: {_dur(f.total_s)}"
                 + ("" if fit is None else f"; --timeout {_dur(f.timeout_s)}: " + ("fits" if fit else "does NOT fit")))
    advice = what_would_fit(f)
    if advice:
        lines.append(f"what would fit: {advice}")
    if f.probe_cost_s:
        lines.append(f"this forecast took {_dur(f.probe_cost_s)} to make (its measurements are cached for the next one)")
    lines += [f"assumption: {a}" for a in f.assumptions]
    return lines


def forecast_table_rows(f: Forecast) -> list[list[str]]:
    """``[part, validate+data, train, evaluate, LLM, total]`` rows: the baseline, each loop, the total."""
    rows = []
    if f.baseline_eval_s is not None:
        rows.append(["baseline", "-", "-", _dur(f.baseline_eval_s), "-", _dur(f.baseline_eval_s)])
    for lp in f.loops:
        rows.append([f"loop {lp.loop}", _dur(lp.other_s), _dur(lp.train_s), _dur(lp.eval_s), _dur(lp.llm_s),
                     _dur(lp.total_s)])
    if f.final_eval_s is not None:  # FT_FINAL_EVAL=full: base + best on every item outside validation
        rows.append([f"final evaluation ({f.final_items} items x 2 models)", "-", "-", _dur(f.final_eval_s), "-",
                     _dur(f.final_eval_s)])
    rows.append(["total", "", "", "", "", _dur(f.total_s)])
    return rows


def print_forecast(f: Forecast, console: Any) -> None:
    """The ``ftagent plan`` output (a rich table and the lines)."""
    from rich.table import Table

    table = Table(title="forecast (no training was run for it beyond the probes)")
    for col in ("", "validate + data", "train", "evaluate", "LLM", "total"):
        table.add_column(col, justify="left" if not col else "right")
    for row in forecast_table_rows(f):
        table.add_row(*row)
    console.print(table)
    for line in forecast_lines(f):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def at_loop_starts(view: SessionView) -> dict[int, float]:
    """Each loop's seconds as the last re-forecast made before it started predicted them (its first step's start;
    with K trials at once other loops run then, so that re-forecast still has some of theirs left)."""
    starts = {lp.index: lp.steps[0].started for lp in view.loops if lp.steps and lp.steps[0].started is not None}
    out: dict[int, float] = {}
    for r in view.reforecasts:  # in the order they were made: the last one before a loop's start wins
        made = r.get("made_at")
        for left in r.get("loops") or []:
            loop = int(left["loop"])
            start = starts.get(loop)
            if made is None or start is None or float(made) <= start:
                out[loop] = float(left["seconds"])
    return out


def versus(view: SessionView) -> list[VersusRow]:
    """Forecast vs actual per loop and in total (the loops that ended), from a session's events."""
    if not view.forecast:
        return []
    f = Forecast(**view.forecast)
    ended = {lp.index: float((lp.end or {}).get("duration_s") or 0.0) for lp in view.loops if lp.end}
    again = at_loop_starts(view)
    rows = []
    for lp in f.loops:
        actual, re_s = ended.get(lp.loop), again.get(lp.loop)
        rows.append(VersusRow(loop=lp.loop, forecast_s=round(lp.total_s, 2), actual_s=actual,
                              error_pct=percent_error(lp.total_s, actual), reforecast_s=re_s,
                              reforecast_error_pct=percent_error(re_s, actual)))
    done = [r for r in rows if r.actual_s is not None]
    if done:
        fs, acts = sum(r.forecast_s for r in done), sum(r.actual_s or 0.0 for r in done)
        rs = sum(r.reforecast_s if r.reforecast_s is not None else r.forecast_s for r in done)
        rows.append(VersusRow(loop=None, forecast_s=round(fs, 2), actual_s=round(acts, 2),
                              error_pct=percent_error(fs, acts),
                              reforecast_s=round(rs, 2) if again else None,
                              reforecast_error_pct=percent_error(rs, acts) if again else None))
    return rows


def versus_note(view: SessionView) -> str:
    """How the session's forecast was made (empty without one)."""
    if not view.forecast:
        return ""
    f = Forecast(**view.forecast)
    again = ("; re-forecast after every step from this session's measured step times and the CPU's load then "
             "(the column: the last re-forecast before the loop started; the total counts the first forecast where "
             "there was none)") if view.reforecasts else ""
    return (f"forecast made after the baseline (measuring cost {_dur(f.probe_cost_s)}, 0 s when cached){again}; "
            + "; ".join(f.assumptions))


def versus_markdown(rows: list[VersusRow], note: str = "") -> list[str]:
    """The report's "Forecast vs actual" section (empty without a forecast)."""
    if not rows:
        return []
    def err(pct: float | None) -> str:
        return "-" if pct is None else f"{pct:+.0f}%"

    lines = ["## Forecast vs actual", "", "| loop | first forecast | re-forecast at its start | actual | error (first) | "
             "error (re-forecast) |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {'total' if r.loop is None else r.loop} | {_dur(r.forecast_s)} | {_dur(r.reforecast_s)} | "
                     f"{_dur(r.actual_s)} | {err(r.error_pct)} | {err(r.reforecast_error_pct)} |")
    return lines + (["", note] if note else []) + [""]


def reforecast_line(r: Reforecast) -> str:
    """The console's line after a step (issue 43): what is left, by part, the load, and what the first forecast
    said of the same steps."""
    parts = []
    several = r.slots > 1 or len(r.running) > 1
    if several and r.running:  # K trials at once: each running one's rest (issue 41)
        parts.append("running: " + ", ".join(f"loop {lp.loop} {_dur(lp.seconds)}" for lp in r.running))
    elif r.current_s:
        parts.append(f"this loop {_dur(r.current_s)}")
    if r.loops:
        span = f"loop {r.loops[0].loop}" if len(r.loops) == 1 else f"loops {r.loops[0].loop}-{r.loops[-1].loop}"
        parts.append(f"{span} {_dur(sum(lp.seconds for lp in r.loops))}"
                     + (f" of work on {r.slots} slots" if several else ""))
    if r.final_s:
        parts.append(f"final evaluation {_dur(r.final_s)}")
    load = f"; CPU {r.slowness:.1f}x as slow as idle (at the forecast {r.forecast_slowness:.1f}x)"
    first = f"; the first forecast said {_dur(r.first_remaining_s)}" if r.first_remaining_s else ""
    return (f"re-forecast: {_dur(r.remaining_s)} left" + (f" ({', '.join(parts)})" if parts else "")
            + load + first)[:300]
