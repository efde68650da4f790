"""A session's state for scripts and agents: ``ftagent status SESSION --json`` and the MCP server's ``status`` tool
return this one object, built from the one projection (:func:`ftagent.views.session.load_session`).

What it says: whether a process still works in the session (its lock holder), the current loop, step and the
running command's progress, the baseline, every loop's scores with their 95 % paired intervals and the SOTA
rule's verdict, the SOTA, the forecast, and the re-forecast and GPU busy fraction when the session's events
carry them (``null`` otherwise).
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from ftagent.core.stats import Difference
from ftagent.engine.session import LockHolder, SessionLock
from ftagent.views.session import load_session
from ftagent.views.session_view import LoopView, SessionView
from ftagent.views.trials import busy_fraction

State = Literal["running", "stopped", "completed", "timeout", "step_limit", "budget", "env_error", "interrupted",
                "no_progress", "no_model", "saturated", "failed"]


class Current(BaseModel):
    """Where a running session is: its loop and step (or the preparation stage before loop 0) and the running
    command's last progress (``phase``: train | infer:<split> | eval:<split> ...; ``done``/``total``: steps or
    items; ``detail``: loss, eta_s ...)."""

    loop: int | None = None
    step: str | None = None
    stage: str | None = None  # the scenario stage before loop 0 (datasets, model, baseline, forecast)
    since: float | None = None  # when that step or stage began (epoch seconds)
    progress: dict[str, Any] | None = None


class LoopStatus(BaseModel):
    """One loop: its state, scores (core metric, validation and test), the intervals the SOTA rule read and its
    verdict."""

    loop: int
    status: str  # running | succeeded | failed | how the session ended while it ran
    steps_done: list[str] = Field(default_factory=list)
    validation: float | None = None
    test: float | None = None
    intervals: list[Difference] = Field(default_factory=list)  # paired 95 % intervals vs baseline / SOTA
    became_sota: bool | None = None  # None: not judged (yet)
    verdict: str = ""
    failure: str | None = None
    duration_s: float | None = None


class Sota(BaseModel):
    """The best loop as the SOTA rule decided (not the highest score), with its intervals and model folder."""

    loop: int
    validation: float | None = None
    test: float | None = None
    intervals: list[Difference] = Field(default_factory=list)
    model: str | None = None


class SessionStatus(BaseModel):
    """One session's machine-readable state (docs/agents.md, "status")."""

    session_id: str
    dir: str
    state: State  # running (a process works in it), stopped (no process, no end: killed; resumable) or its end
    alive: bool | None = None  # a process holds the session now (None: its holder is on another host)
    holder: LockHolder | None = None
    end_message: str = ""
    benchmark: str | None = None
    base_model: str | None = None
    planner: str | None = None
    runner: str | None = None
    core_metric: str | None = None
    direction: str = "max"
    loop_n: int | None = None  # the loops planned (from the forecast; None before it)
    loops_done: int = 0
    current: Current = Field(default_factory=Current)
    baseline: dict[str, float | None] = Field(default_factory=dict)  # split -> score
    loops: list[LoopStatus] = Field(default_factory=list)
    sota: Sota | None = None  # None: no loop beat the baseline (yet)
    forecast: dict[str, Any] | None = None
    reforecast: dict[str, Any] | None = None  # the latest re-forecast event, when the session records one
    gpu_busy_fraction: float | None = None  # share of the run's time the GPUs were busy, when recorded
    run_time_s: float = 0.0
    updated_at: float | None = None  # the last event's time
    n_events: int = 0
    warnings: list[str] = Field(default_factory=list)


def session_status(session_dir: Path) -> SessionStatus:
    """The status of the session in ``session_dir`` (events.jsonl and its latest snapshot, read only)."""
    view = load_session(Path(session_dir))
    alive, holder = _liveness(Path(session_dir))
    return status_of(view, alive=alive, holder=holder)


def status_of(view: SessionView, *, alive: bool | None, holder: LockHolder | None) -> SessionStatus:
    """:class:`SessionStatus` of a loaded view (``alive``/``holder``: :func:`session_status` reads them)."""
    loops = [_loop(lp) for lp in view.loops]
    sota = next((x for x in loops if x.loop == view.sota_loop), None)
    state: State = view.end["status"] if view.end else ("stopped" if alive is False else "running")
    return SessionStatus(
        session_id=view.session_id, dir=view.dir, state=state, alive=alive, holder=holder,
        end_message=(view.end or {}).get("message") or "", benchmark=view.benchmark, base_model=view.base_model,
        planner=view.planner, runner=view.runner, core_metric=view.core_metric, direction=view.direction,
        loop_n=len(view.forecast.get("loops") or []) or None if view.forecast else None,
        loops_done=sum(1 for lp in view.loops if lp.end is not None),
        current=_current(view) if view.end is None else Current(), baseline=dict(view.baseline), loops=loops,
        sota=Sota(loop=sota.loop, validation=sota.validation, test=sota.test, intervals=sota.intervals,
                  model=view.sota_model) if sota is not None else None,
        forecast=view.forecast, reforecast=view.reforecast,
        gpu_busy_fraction=view.gpu_busy_fraction if view.gpu_busy_fraction is not None else busy_fraction(view).fraction,
        run_time_s=view.run_time_s, updated_at=view.last_ts, n_events=view.n_events, warnings=list(view.warnings))


def _loop(lp: LoopView) -> LoopStatus:
    failed = next((s for s in lp.steps if s.status == "failed" and s.failure), None)
    return LoopStatus(loop=lp.index, status=lp.status, steps_done=[s.name for s in lp.steps if s.status != "running"],
                      validation=lp.val_score, test=lp.test_score, intervals=[Difference.model_validate(d) for d in
                                                                             lp.intervals],
                      became_sota=lp.decision, verdict=(lp.feedback or {}).get("verdict") or "",
                      failure=failed.failure if failed else None, duration_s=(lp.end or {}).get("duration_s"))


def _current(view: SessionView) -> Current:
    progress = view.progress
    running = next((s for lp in reversed(view.loops) for s in reversed(lp.steps) if s.status == "running"), None)
    if running is not None:
        loop = next(lp.index for lp in reversed(view.loops) if running in lp.steps)
        mine = progress if progress is not None and progress.get("loop") == loop and (
            running.started is None or progress["ts"] >= running.started) else None
        return Current(loop=loop, step=running.name, since=running.started, progress=_progress(mine))
    started = [s for s in view.stages if s.get("status") == "start"]
    finished = {s.get("stage") for s in view.stages if s.get("status") != "start"}
    open_stage = next((s for s in reversed(started) if s.get("stage") not in finished), None)
    if open_stage is not None:
        return Current(stage=open_stage.get("stage"), since=open_stage.get("ts"),
                       progress=_progress(progress if progress is not None and progress.get("loop") is None else None))
    return Current(loop=view.loops[-1].index if view.loops else None)


def _progress(event: dict[str, Any] | None) -> dict[str, Any] | None:
    if event is None:
        return None
    return {k: event.get(k) for k in ("phase", "done", "total", "detail", "ts")}


def _liveness(session_dir: Path) -> tuple[bool | None, LockHolder | None]:
    """Whether the session's lock holder is still running (on this host): the holder record stays after the
    lock is released, so the process must exist and be no younger than the record."""
    holder = SessionLock(session_dir).holder()
    if holder is None:
        return False, None
    if holder.host != socket.gethostname():
        return None, holder
    import psutil

    try:
        proc = psutil.Process(holder.pid)
        running = proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
        return running and proc.create_time() <= holder.started_at + 1.0, holder
    except psutil.Error:
        return False, holder


def _score(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def status_lines(s: SessionStatus) -> list[str]:
    """The status as a few lines for a terminal (``ftagent status SESSION``)."""
    who = f" (pid {s.holder.pid})" if s.alive and s.holder else ""
    lines = [f"session {s.session_id} ({s.dir}): {s.state}{who}" + (f" — {s.end_message}" if s.end_message else ""),
             f"benchmark {s.benchmark or '-'} ({s.core_metric or 'score'}), base model {s.base_model or '-'}, "
             f"planner {s.planner or '-'}; loops {s.loops_done}/{s.loop_n or '?'}"]
    cur = s.current
    if cur.step or cur.stage:
        where = f"loop {cur.loop}, step {cur.step}" if cur.step else f"preparing: {cur.stage}"
        p = cur.progress or {}
        done = f" ({p.get('phase')} {p.get('done')}/{p.get('total')})" if p.get("done") is not None else ""
        lines.append(f"now: {where}{done}")
    lines.append(f"baseline: validation {_score(s.baseline.get('validation'))}, test {_score(s.baseline.get('test'))}")
    for lp in s.loops:
        vs = next((d for d in lp.intervals if d.split == "validation" and d.against == "baseline"), None)
        gain = f" ({vs.text()} vs baseline)" if vs else ""
        lines.append(f"loop {lp.loop}: {lp.status}; validation {_score(lp.validation)}{gain}, test {_score(lp.test)}"
                     + (f"; {lp.verdict}" if lp.verdict else "") + (f"; {lp.failure}" if lp.failure else ""))
    lines.append(f"SOTA: loop {s.sota.loop}, validation {_score(s.sota.validation)}, test {_score(s.sota.test)}"
                 if s.sota else "SOTA: none (no loop beat the baseline yet)")
    return lines
