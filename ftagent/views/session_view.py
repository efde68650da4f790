"""What a session looks like to its readers: :class:`SessionView`, its loops (:class:`LoopView`) and their
steps (:class:`StepView`), as :func:`ftagent.views.session.load_session` folds them from the events and the
latest snapshot. Plain pydantic models: the report, the UI, ``ftagent status`` and the export read these.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


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
    forecast: dict[str, Any] | None = None  # the ``forecast`` event's Forecast (core.forecast_arithmetic) as JSON
    settings: dict[str, Any] = Field(default_factory=dict)  # the latest session_start's (redacted) settings
    progress: dict[str, Any] | None = None  # the last ``progress`` event (the running command's steps or items)
    reforecast: dict[str, Any] | None = None  # the latest re-forecast (core.reforecast_arithmetic.Reforecast as JSON; issue 43)
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
