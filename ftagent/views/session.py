"""The one projection of a session: events.jsonl (+ the latest snapshot) → :class:`SessionView`.

The report (:mod:`ftagent.views.report`), the UI and ``ftagent job status`` all read sessions and jobs
through this module, from events.jsonl and snapshots only.

A log directory is one of (see :func:`detect_layout`):

* a session: it holds ``events.jsonl`` or ``__session__/``;
* a folder of sessions (``LOG_PATH``);
* a job: a folder of task folders, each holding session folders (``job/run_ft_job.sh`` layout);
* a folder of jobs.

Everything here is plain Python + pandas (no Streamlit), so it is unit-tested directly. Readers never
raise on half-written files: a truncated last line or a missing snapshot becomes a warning.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from ftagent.core.trace import Trace
from ftagent.engine.events import EVENT_ADAPTER
from ftagent.engine.session import EVENTS_FILE, SESSION_DIR, list_snapshots
from ftagent.jobs.tasks import JobPlan, load_job_plan

LayoutKind = Literal["missing", "empty", "session", "sessions", "job", "jobs"]


class StepView(BaseModel):
    name: str
    status: str = "running"  # running | ok | failed | goto
    started: float | None = None
    duration_s: float | None = None
    failure: str | None = None
    goto: str | None = None


class LoopView(BaseModel):
    """Everything the events say about one loop."""

    index: int
    steps: list[StepView] = Field(default_factory=list)
    hypothesis: dict[str, Any] | None = None
    code_rounds: list[dict[str, Any]] = Field(default_factory=list)
    validations: list[dict[str, Any]] = Field(default_factory=list)
    runs: list[dict[str, Any]] = Field(default_factory=list)
    training: dict[str, Any] | None = None
    sampling: dict[str, Any] | None = None  # issue 40: the start model's answers to training prompts
    results: dict[str, dict[str, Any]] = Field(default_factory=dict)  # split -> benchmark_result
    feedback: dict[str, Any] | None = None
    llm_calls: list[dict[str, Any]] = Field(default_factory=list)
    end: dict[str, Any] | None = None
    messages: list[dict[str, Any]] = Field(default_factory=list)
    contamination: list[dict[str, Any]] = Field(default_factory=list)  # one scan per data set, passing or not
    integrity: dict[str, Any] | None = None  # the integrity guard's verdict on this candidate (issue 31.5)
    forgetting: dict[str, Any] | None = None  # the forgetting guard's verdict (issue 31.6; only a would-be SOTA)
    stopped: str | None = None  # the session ended while this loop ran: that end's status (interrupted, env_error ...)
    slot: str | None = None  # K trials at once: the slot it ran on (its last trial_start's label)

    @property
    def status(self) -> str:
        """running | succeeded | failed, or how the session ended while it ran (issue 34.12: was "running")."""
        return self.end["status"] if self.end else (self.stopped or "running")

    @property
    def stage(self) -> str:
        """The loop's training stage (issue 40; "sft" for sessions before stages existed)."""
        return str((self.hypothesis or {}).get("stage") or "sft")

    @property
    def val_score(self) -> float | None:
        return (self.results.get("validation") or {}).get("score")

    @property
    def test_score(self) -> float | None:
        return (self.results.get("test") or {}).get("score")

    @property
    def decision(self) -> bool | None:
        return None if self.feedback is None else bool(self.feedback.get("decision"))

    @property
    def intervals(self) -> list[dict[str, Any]]:
        """The paired differences the feedback recorded (vs baseline / SOTA, validation and test)."""
        return list((self.feedback or {}).get("intervals") or [])

    @property
    def parts(self) -> dict[str, dict[str, Any]]:
        """Validation's feedback and selection part scores the feedback recorded (issue 39 item 5; {} before)."""
        return dict((self.feedback or {}).get("parts") or {})

    @property
    def failed(self) -> bool:
        return self.status == "failed" or any(s.status == "failed" for s in self.steps)


class SessionView(BaseModel):
    """A session as the UI shows it."""

    dir: str
    session_id: str
    benchmark: str | None = None
    base_model: str | None = None
    planner: str | None = None
    runner: str | None = None
    started: float | None = None
    end: dict[str, Any] | None = None
    core_metric: str | None = None
    direction: str = "max"
    baseline: dict[str, float | None] = Field(default_factory=dict)  # split -> score
    baseline_results: dict[str, dict[str, Any]] = Field(default_factory=dict)
    loops: list[LoopView] = Field(default_factory=list)
    stages: list[dict[str, Any]] = Field(default_factory=list)
    llm_calls: list[dict[str, Any]] = Field(default_factory=list)
    messages: list[dict[str, Any]] = Field(default_factory=list)
    runs: list[dict[str, Any]] = Field(default_factory=list)  # subprocesses outside any loop (scenario, baseline)
    sota_loop: int | None = None
    sota_model: str | None = None  # the SOTA's model folder (from the snapshot's trace)
    last_ts: float | None = None
    # seconds ftagent ran on this session: each run (a session_start to its last event) summed, so the time
    # between a finished or stopped run and its resume is not counted (last_ts - started counts it)
    run_time_s: float = 0.0
    snapshot: str | None = None
    n_events: int = 0
    warnings: list[str] = Field(default_factory=list)
    forecast: dict[str, Any] | None = None  # the ``forecast`` event's Forecast (core.forecast) as JSON
    settings: dict[str, Any] = Field(default_factory=dict)  # the latest session_start's (redacted) settings
    progress: dict[str, Any] | None = None  # the last ``progress`` event (the running command's steps or items)
    reforecast: dict[str, Any] | None = None  # the latest re-forecast (core.reforecast.Reforecast as JSON; issue 43)
    reforecasts: list[dict[str, Any]] = Field(default_factory=list)  # every re-forecast, in order
    gpu_busy_fraction: float | None = None  # GPU busy share, for an event that records it (views/status.py)
    slot_count: int = 1  # K trials at once: the most slots a run of this session had (the "slots" stage)
    run_bounds: list[tuple[float, float]] = Field(default_factory=list)  # each run: its session_start to last event
    gpus: int = 0  # GPUs the scenario found (the snapshot's): the busy fraction is the GPUs' or the CPU slots'

    @property
    def running(self) -> bool:
        return self.end is None

    def best(self, split: str) -> float | None:
        """The best loop's score on a split: the SOTA's, as the rule decided (None while no loop beat the
        baseline). Not the highest score: a gain within the noise or a candidate the integrity guard
        flagged is not the best, however high (issue 31 follow-up)."""
        lp = next((x for x in self.loops if x.index == self.sota_loop), None)
        return None if lp is None else (lp.results.get(split) or {}).get("score")

    def sota_scores(self) -> tuple[float | None, float | None]:
        """(val, test) of the SOTA loop, else of the baseline."""
        lp = next((x for x in self.loops if x.index == self.sota_loop), None)
        if lp is None:
            return self.baseline.get("validation"), self.baseline.get("test")
        return lp.val_score, lp.test_score


class TaskView(BaseModel):
    name: str
    dir: str
    sessions: list[SessionView] = Field(default_factory=list)
    spec: dict[str, Any] = Field(default_factory=dict)
    exit_code: int | None = None

    @property
    def latest(self) -> SessionView | None:
        return self.sessions[-1] if self.sessions else None

    @property
    def state(self) -> str:
        """waiting | running | finished | exited (process ended without a session_end)."""
        s = self.latest
        if s is None:
            return "waiting" if self.exit_code is None else "exited"
        if s.end is not None:
            return "finished"
        return "running" if self.exit_code is None else "exited"


class JobView(BaseModel):
    dir: str
    kind: LayoutKind
    tasks: list[TaskView] = Field(default_factory=list)
    plan: JobPlan | None = None


class Layout(BaseModel):
    kind: LayoutKind
    path: str
    children: list[str] = Field(default_factory=list)  # sessions, tasks or jobs (by kind)


# --------------------------------------------------------------------------------------- layout

def is_session_dir(path: Path) -> bool:
    return (path / EVENTS_FILE).is_file() or (path / SESSION_DIR).is_dir()


def _subdirs(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return []


def _is_task_dir(path: Path) -> bool:
    return any(is_session_dir(c) for c in _subdirs(path))


def detect_layout(path: Path) -> Layout:
    """Tell what kind of log directory ``path`` is."""
    path = Path(path)
    if not path.is_dir():
        return Layout(kind="missing", path=str(path))
    if is_session_dir(path):
        return Layout(kind="session", path=str(path))
    subs = _subdirs(path)
    sessions = [s for s in subs if is_session_dir(s)]
    if sessions:
        return Layout(kind="sessions", path=str(path), children=[str(s) for s in sessions])
    plan = load_job_plan(path)
    tasks = [s for s in subs if _is_task_dir(s)]
    if plan is not None or tasks:
        names = [t.name for t in plan.tasks] if plan else []
        names += [t.name for t in tasks if t.name not in names]
        return Layout(kind="job", path=str(path), children=[str(path / n) for n in names])
    jobs = [s for s in subs if load_job_plan(s) is not None or any(_is_task_dir(t) for t in _subdirs(s))]
    if jobs:
        return Layout(kind="jobs", path=str(path), children=[str(j) for j in reversed(jobs)])
    return Layout(kind="empty", path=str(path))


# --------------------------------------------------------------------------------------- events

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


def list_sessions(folder: Path) -> list[Path]:
    """Session directories directly under ``folder`` (oldest first: ids sort by time)."""
    return [p for p in _subdirs(Path(folder)) if is_session_dir(p)]


def _exit_code(job_dir: Path, name: str) -> int | None:
    try:
        return int((job_dir / ".run" / f"{name}.exit").read_text().strip())
    except (OSError, ValueError):
        return None


def load_job(path: Path) -> JobView:
    """Load a job, a folder of sessions or a single session as tasks (one row each in the summary).

    Sessions come from :func:`load_session_cached`: only those whose files changed are parsed again.
    """
    layout = detect_layout(Path(path))
    job = JobView(dir=str(path), kind=layout.kind)
    if layout.kind == "session":
        job.tasks = [TaskView(name=Path(path).name, dir=str(path), sessions=[load_session_cached(Path(path))])]
    elif layout.kind == "sessions":
        job.tasks = [TaskView(name=Path(s).name, dir=s, sessions=[load_session_cached(Path(s))])
                     for s in layout.children]
    elif layout.kind == "job":
        job.plan = load_job_plan(Path(path))
        specs = {t.name: t.spec.model_dump() for t in job.plan.tasks} if job.plan else {}
        for child in map(Path, layout.children):
            job.tasks.append(TaskView(name=child.name, dir=str(child), spec=specs.get(child.name, {}),
                                      sessions=[load_session_cached(s) for s in list_sessions(child)],
                                      exit_code=_exit_code(Path(path), child.name)))
    return job


def signature(path: Path) -> tuple:
    """A cheap change marker of all events files under ``path`` (for caching and auto-refresh)."""
    path = Path(path)
    out = []
    for f in sorted(path.glob(f"**/{EVENTS_FILE}")) if path.is_dir() else []:
        try:
            st = f.stat()
            out.append((str(f), st.st_size, st.st_mtime_ns))
        except OSError:
            continue
    return tuple(out)
