"""The one projection of a session: events.jsonl (+ the latest snapshot) → :class:`SessionView`.

The report (:mod:`ftagent.views.report`), the UI and ``ftagent job status`` all read sessions and jobs
through this module (the view models: :mod:`.session_view`; what a log folder is: :mod:`.layout`; a job's
tasks: :mod:`.job`), from events.jsonl and snapshots only.

Everything here is plain Python + pandas (no Streamlit), so it is unit-tested directly. Readers never
raise on half-written files: a truncated last line or a missing snapshot becomes a warning.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from ftagent.core.trace import Trace
from ftagent.engine.events import EVENT_ADAPTER
from ftagent.engine.session import EVENTS_FILE, list_snapshots
from ftagent.views.session_view import LoopView, SessionView, StepView


def read_event_dicts(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Validated events of ``events.jsonl`` as dicts, plus warnings for lines that were skipped."""
    events: list[dict[str, Any]] = []
    warnings: list[str] = []
    try:
        raw = Path(path).read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return [], [f"{path}: no events yet"]
    lines = raw.split("\n")
    bad = 0
    for n, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            events.append(EVENT_ADAPTER.validate_python(json.loads(line)).model_dump(mode="json"))
        except (json.JSONDecodeError, ValidationError):
            if n == len(lines) - 1:
                warnings.append("the last line of events.jsonl is incomplete (still being written?); skipped")
            else:
                bad += 1
    if bad:
        warnings.append(f"{bad} unreadable line(s) in events.jsonl skipped")
    return events, warnings


def _loop(loops: dict[int, LoopView], index: int | None) -> LoopView | None:
    if index is None:
        return None
    return loops.setdefault(index, LoopView(index=index))


def _apply(view: SessionView, loops: dict[int, LoopView], ev: dict[str, Any]) -> None:
    kind, lp = ev["type"], _loop(loops, ev.get("loop"))
    if kind == "session_start":
        view.session_id = ev["session_id"] or view.session_id
        for key in ("benchmark", "base_model", "planner", "runner"):
            setattr(view, key, ev.get(key) or getattr(view, key))
        view.started = view.started or ev["ts"]
        view.settings = ev.get("settings") or view.settings
        for other in loops.values():  # a resume: a step the previous run left without its end never ends
            for step in other.steps:
                step.status = "interrupted" if step.status == "running" else step.status
        view.end = None  # a resume: the previous run's end is superseded
    elif kind == "session_end":
        view.end = ev
    elif kind == "scenario_stage":
        view.stages.append(ev)
        if ev.get("stage") == "slots":
            view.slot_count = max(view.slot_count, int((ev.get("detail") or {}).get("k") or 1))
    elif kind == "benchmark_result" and (ev.get("baseline") or lp is None):
        view.baseline[ev["split"]] = ev.get("score")
        view.baseline_results[ev["split"]] = ev
        view.core_metric = view.core_metric or ev.get("core_metric")
    elif kind == "llm_call":
        view.llm_calls.append(ev)
        if lp is not None:
            lp.llm_calls.append(ev)
    elif kind == "message":
        (lp.messages if lp else view.messages).append(ev)
    elif kind == "leftovers_reaped":  # shown like a warning message: what a killed predecessor left was ended
        view.messages.append({**ev, "level": "warning", "text": ev.get("message", "")})
    elif kind == "run" and lp is None:
        view.runs.append(ev)
    elif kind == "forecast":
        view.forecast = ev.get("forecast")
    elif kind == "reforecast":  # after every step (issue 43): the latest, and each one by when it was made
        view.reforecast = ev.get("reforecast")
        view.reforecasts.append(ev.get("reforecast") or {})
    elif kind == "progress":
        view.progress = ev
    elif lp is not None:
        _apply_loop(view, lp, ev)


def _apply_loop(view: SessionView, lp: LoopView, ev: dict[str, Any]) -> None:
    kind = ev["type"]
    if kind == "step_start":
        lp.steps.append(StepView(name=ev["step"], started=ev["ts"]))
    elif kind == "step_end":
        step = next((s for s in reversed(lp.steps) if s.name == ev["step"] and s.status == "running"), None)
        if step is None:
            step = StepView(name=ev["step"])
            lp.steps.append(step)
        failure = ev.get("failure")
        step.status, step.duration_s, step.goto = ev["status"], ev["duration_s"], ev.get("goto")
        step.failure = f"[{failure['stage']}/{failure['error_type']}] {failure['message']}" if failure else None
    elif kind == "hypothesis":
        lp.hypothesis = ev
    elif kind == "code_round":
        lp.code_rounds.append(ev)
    elif kind == "validation":
        lp.validations.append(ev)
    elif kind == "run":
        lp.runs.append(ev)
    elif kind == "training":
        lp.training = ev
    elif kind == "sampling":
        lp.sampling = ev
    elif kind == "contamination":
        lp.contamination.append(ev)
    elif kind == "integrity":
        lp.integrity = ev
    elif kind == "forgetting":
        lp.forgetting = ev
    elif kind == "benchmark_result":
        lp.results[ev["split"]] = ev
        view.core_metric = view.core_metric or ev.get("core_metric")
    elif kind == "feedback":
        lp.feedback = ev
    elif kind == "trial_start":
        lp.slot = ev.get("slot_label") or (f"slot {ev['slot']}" if ev.get("slot") is not None else None)
    elif kind == "loop_end":
        lp.end = ev
        if ev.get("is_sota"):
            view.sota_loop = lp.index


class SnapshotFacts(BaseModel):
    """What a view reads from a snapshot: the trace and the scenario's names (other fields ignored)."""

    trace: Trace = Field(default_factory=Trace)
    scenario: dict[str, Any] | None = None


def _latest_state(session_dir: Path) -> tuple[SnapshotFacts | None, str | None, list[str]]:
    snaps = list_snapshots(session_dir)
    for snap in reversed(snaps):
        try:
            return SnapshotFacts.model_validate_json(snap.read_text(encoding="utf-8")), str(snap), []
        except (OSError, ValueError):
            continue
    return None, None, ([] if not snaps else ["no readable snapshot"])


def load_session(session_dir: Path) -> SessionView:
    """Build a :class:`SessionView` from a session's events and its latest snapshot."""
    session_dir = Path(session_dir)
    view = SessionView(dir=str(session_dir), session_id=session_dir.name)
    events, view.warnings = read_event_dicts(session_dir / EVENTS_FILE)
    view.n_events = len(events)
    loops: dict[int, LoopView] = {}
    run_start = None
    for ev in events:
        if ev["type"] == "session_start":  # a resume ends the previous run at its last event
            if run_start is not None and view.last_ts is not None:
                view.run_time_s += max(0.0, view.last_ts - run_start)
                view.run_bounds.append((run_start, view.last_ts))
            run_start = ev["ts"]
        elif ev["type"] == "run" and run_start is not None:
            # a command run before the session existed (data preparation, model build) is written after its
            # session_start; its start belongs to this process run's time (issue 32: "all subprocesses"
            # 14 min 30 s beside a wall time of 14 min 24 s, the 16 s of data preparation missing)
            run_start = min(run_start, ev["ts"] - float(ev.get("duration_s") or 0.0))
        _apply(view, loops, ev)
        view.last_ts = ev["ts"]
    if run_start is not None and view.last_ts is not None:
        view.run_time_s += max(0.0, view.last_ts - run_start)
        view.run_bounds.append((run_start, view.last_ts))
    view.loops = [loops[i] for i in sorted(loops)]
    if view.end:
        for lp in view.loops:
            if lp.end is None:
                lp.stopped = view.end["status"]
    state, view.snapshot, warn = _latest_state(session_dir)
    view.warnings += warn
    if state is None:
        view.warnings.append("no snapshot yet: baseline and SOTA come from the events only")
        return view
    trace = state.trace
    view.core_metric = trace.core_metric if trace.core_metric != "score" or not view.core_metric else view.core_metric
    view.direction = trace.direction
    view.baseline.setdefault("validation", trace.baseline_val)
    view.baseline.setdefault("test", trace.baseline_test)
    view.sota_loop = trace.sota_loop if trace.sota_loop is not None else view.sota_loop
    sota = trace.sota()
    view.sota_model = sota.artefacts.get("model") if sota is not None else None
    scenario = state.scenario or {}
    view.benchmark = view.benchmark or scenario.get("benchmark")
    view.base_model = view.base_model or scenario.get("base_model")
    view.gpus = len((scenario.get("hardware") or {}).get("gpus") or [])
    return view


_SESSION_CACHE: OrderedDict[str, tuple[tuple, SessionView]] = OrderedDict()
_SESSION_CACHE_MAX = 64


def session_key(session_dir: Path) -> tuple:
    """What a session view depends on: ``events.jsonl``'s size and mtime and the latest snapshot's name and mtime."""
    key: list[Any] = []
    snaps = list_snapshots(Path(session_dir))
    for f in [Path(session_dir) / EVENTS_FILE, *snaps[-1:]]:
        try:
            st = f.stat()
            key.append((f.name, st.st_size, st.st_mtime_ns))
        except OSError:
            key.append((f.name, None, None))
    return tuple(key)


def load_session_cached(session_dir: Path) -> SessionView:
    """:func:`load_session`, parsed once per change of the session's files (see :func:`session_key`).

    A UI rerun (every widget click, every auto-refresh tick) then only ``stat``s a finished session
    instead of re-reading its events. The view returned is shared between callers: treat it as read-only.
    """
    path = str(Path(session_dir).resolve())
    key = session_key(Path(session_dir))
    hit = _SESSION_CACHE.get(path)
    if hit is not None and hit[0] == key:
        _SESSION_CACHE.move_to_end(path)
        return hit[1]
    view = load_session(Path(session_dir))
    _SESSION_CACHE[path] = (key, view)
    while len(_SESSION_CACHE) > _SESSION_CACHE_MAX:
        _SESSION_CACHE.popitem(last=False)
    return view
