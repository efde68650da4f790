"""Typed, append-only event log (``events.jsonl``), one JSON object a line.

The UI, the report and ``ftagent job status`` read only this file and the snapshots. Every event has a
``type`` discriminator; readers skip a half-written last line (a killed writer) instead of failing. This
module says what an event is and reads them (:func:`read_events`); the session's one writer is
:class:`ftagent.engine.event_log.EventLog`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from ftagent.core.errors import StepFailure
from ftagent.core.forecast_arithmetic import Forecast
from ftagent.core.forgetting_rule import GuardResult
from ftagent.core.holdout import PartResult
from ftagent.core.reforecast_arithmetic import Reforecast, StepTime
from ftagent.core.sota_family import Judgment
from ftagent.core.stats import Difference


class _Event(BaseModel):
    ts: float = Field(default_factory=time.time)
    loop: int | None = None


class SessionStart(_Event):
    type: Literal["session_start"] = "session_start"
    session_id: str
    benchmark: str | None = None
    base_model: str | None = None
    planner: str | None = None
    runner: str | None = None
    resumed_from: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict)


class SessionEnd(_Event):
    type: Literal["session_end"] = "session_end"
    status: Literal["completed", "timeout", "step_limit", "budget", "env_error", "interrupted", "no_progress",
                    "no_model", "saturated", "failed"]  # failed: a crash after the session existed (finetune.app writes it)
    message: str = ""


class ScenarioStage(_Event):
    type: Literal["scenario_stage"] = "scenario_stage"
    stage: str
    status: Literal["start", "done", "cached", "skipped", "failed"] = "done"
    detail: dict[str, Any] = Field(default_factory=dict)


class StepStart(_Event):
    type: Literal["step_start"] = "step_start"
    step: str


class StepEnd(_Event):
    type: Literal["step_end"] = "step_end"
    step: str
    status: Literal["ok", "failed", "goto"]
    duration_s: float
    failure: StepFailure | None = None
    goto: str | None = None


class LLMCall(_Event):
    type: Literal["llm_call"] = "llm_call"
    stage: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0  # None: the model's price is unknown
    latency_s: float = 0.0
    record: str | None = None  # path of the llm/<n>.json file with messages and reply
    error: str | None = None


class HypothesisEvent(_Event):
    type: Literal["hypothesis"] = "hypothesis"
    reason: str = ""
    hypothesis: str
    task: str = ""
    skip_data_processing: bool = False
    parent: int | None = None
    planner: str = ""
    stage: str = "sft"  # issue 40: the training stage, and the loop whose weights it starts from
    weights_from: int | None = None


class CodeRound(_Event):
    type: Literal["code_round"] = "code_round"
    round: int
    files: dict[str, str] = Field(default_factory=dict)  # name -> path
    accepted: bool = False
    failure: StepFailure | None = None


class ValidationEvent(_Event):
    type: Literal["validation"] = "validation"
    passed: bool
    data_stats: dict[str, Any] = Field(default_factory=dict)
    dropped_keys: list[str] = Field(default_factory=list)
    injected_keys: list[str] = Field(default_factory=list)
    failure: StepFailure | None = None
    # the optimizer steps the validated train.yaml plans (max_steps, or epochs x ceil(rows / global batch) with rows
    # at most the data cap: the full data run has not run yet); the re-forecast prices its training by it (issue 43)
    planned_steps: int | None = None


class RunEvent(_Event):
    type: Literal["run"] = "run"
    purpose: str
    command: str
    exit_code: int | None
    duration_s: float
    timed_out: bool = False
    log_file: str | None = None
    runner: str = ""


class EarlyStopFacts(BaseModel):
    """A full training run stopped because its loss diverged (``ftagent.tools.llamafactory.early_stop``)."""

    reason: Literal["nan", "rise"]
    step: int
    total_steps: int | None = None
    loss: float
    lr: float | None = None
    best_loss: float | None = None
    best_step: int | None = None
    since_step: int | None = None
    elapsed_s: float | None = None
    saved_s: float | None = None  # training time the stop saved: steps left ÷ steps/s so far
    stopped: bool = True  # False: the runner could not stop it, it ran to its end


class TrainingEvent(_Event):
    type: Literal["training"] = "training"
    output_dir: str
    finetuning_type: str | None = None
    loss_history: list[dict[str, Any]] = Field(default_factory=list)
    train_runtime_s: float | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    early_stop: EarlyStopFacts | None = None  # set when the run diverged (the step then failed)
    stage: str = "sft"  # issue 40: the stage trained, and the stages that made the weights (this one last)
    chain: list[str] = Field(default_factory=list)


class SamplingEvent(_Event):
    """The sampling step of a preference or GRPO loop (issue 40): the start model on training prompts."""

    type: Literal["sampling"] = "sampling"
    stage: str
    model: str
    source: str  # where the training prompts came from
    prompts: int
    samples: int
    correct: int
    prompts_mixed: int  # prompts with at least one right and one wrong answer
    prompts_all_right: int = 0
    temperature: float
    samples_per_prompt: int
    start_loop: int | None = None  # the loop whose weights were sampled (None: the base model)
    duration_s: float = 0.0


class ConstantAnswer(BaseModel):
    """What the best constant answer scores on one split (``ftagent.benchmarks.baselines``): a base model's
    score near it is no sign of skill (issue 31 item 7). Recorded on the base model's results."""

    score: float
    metric: str
    method: str = ""  # how the constants were scored (the benchmark's own scorer, or the most frequent gold)
    answers: dict[str, str] = Field(default_factory=dict)  # sub-dataset -> its best constant (the top three)
    line: str = ""  # the baseline's one line, as the brief and the card show it


class BenchmarkResult(_Event):
    type: Literal["benchmark_result"] = "benchmark_result"
    split: Literal["validation", "test"]
    benchmark: str
    core_metric: str
    score: float | None
    metrics: dict[str, Any] = Field(default_factory=dict)
    error_samples: list[dict[str, Any]] = Field(default_factory=list)
    baseline: bool = False
    cached: bool = False
    constant_baseline: ConstantAnswer | None = None  # the base model's results only (None: not computable)


class FeedbackEvent(_Event):
    type: Literal["feedback"] = "feedback"
    decision: bool
    reason: str = ""
    error_type: str | None = None
    next_step: str = ""
    score: float | None = None
    sota_score: float | None = None
    rule: str | None = None  # the SOTA rule that decided: interval | delta | failed (ftagent.core.sota)
    verdict: str = ""  # the rule's one line ("+3.0 [-4.0, +10.0] on 100 items: not a significant gain")
    intervals: list[Difference] = Field(default_factory=list)  # vs baseline / SOTA, validation and test
    judgment: Judgment | None = None  # against whom, in which round of K (Holm: ftagent.core.sota_family)
    # validation's parts (issue 39 item 5): part -> its score and items (the selection part decides)
    parts: dict[str, PartResult] = Field(default_factory=dict)


class LoopEnd(_Event):
    type: Literal["loop_end"] = "loop_end"
    status: Literal["succeeded", "failed"]
    duration_s: float = 0.0
    is_sota: bool = False


class TrialStart(_Event):
    """A trial (loop) takes a slot: K trials at once (ftagent.engine.parallel); ``resumed``: from its snapshot."""

    type: Literal["trial_start"] = "trial_start"
    slot: int | None = None
    slot_label: str = ""
    step: str = ""  # the step it starts (or resumes) at
    resumed: bool = False


class Progress(_Event):
    """A running command's progress: training steps, evaluation items (throttled by the emitter)."""

    type: Literal["progress"] = "progress"
    phase: str  # train | infer:<split> | eval:<split> | start | merge | done ...
    done: int | None = None
    total: int | None = None
    detail: dict[str, Any] = Field(default_factory=dict)  # loss, lr, eta_s ...


class LeftoversReaped(_Event):
    """Before work started: what a killed predecessor left running (on this ``FT_FILE_PATH``) was ended."""

    type: Literal["leftovers_reaped"] = "leftovers_reaped"
    processes: list[dict[str, Any]] = Field(default_factory=list)  # {pid, command, session}
    containers: list[str] = Field(default_factory=list)
    message: str = ""


class ForecastEvent(_Event):
    """What the session is expected to cost, recorded once after the baseline (before loop 0)."""

    type: Literal["forecast"] = "forecast"
    forecast: Forecast


class ReforecastEvent(_Event):
    """After every step (issue 43): the step's measured time and CPU slowness, and what is left of the session
    re-forecast from this session's step times and the load now (:mod:`ftagent.core.reforecast_arithmetic`); also while a
    command runs, on its progress (at most every 30 s: then ``step_time`` is None)."""

    type: Literal["reforecast"] = "reforecast"
    step_time: StepTime | None = None
    reforecast: Reforecast


class ContaminationScan(_Event):
    """The contamination scan of one data set, passing or not (``ftagent.datasets.contamination``):
    each data.json the data step produced. Flagged rows are named by row index and benchmark item id
    only, never by text (the test split stays hidden)."""

    type: Literal["contamination"] = "contamination"
    dataset: str  # "data.json (debug)" / "data.json"
    rows_checked: int
    items_checked: int
    flagged_rows: int = 0
    passed: bool = True
    examples: list[dict[str, Any]] = Field(default_factory=list)  # row_index, item_id, coverage
    input_spaces: list[str] = Field(default_factory=list)  # templated spaces the rows answer most of (no item)


class CheckVerdict(BaseModel):
    """One named check's verdict on one candidate: ``passed`` True (clean), False (flagged) or None (the check
    cannot apply here; ``detail`` says why)."""

    name: str  # the check's key (the integrity guard's: ftagent.integrity.verdict.CHECK_KINDS)
    passed: bool | None = None
    detail: str = ""

    @property
    def flagged(self) -> bool:
        return self.passed is False


class IntegrityEvent(_Event):
    """The integrity guard's verdict on one candidate (:mod:`ftagent.integrity`): every check, passed
    (True), flagged (False) or not applicable (None). A flagged candidate cannot become SOTA."""

    type: Literal["integrity"] = "integrity"
    checks: list[CheckVerdict] = Field(default_factory=list)
    flags: int = 0  # how many checks flagged the candidate
    duration_s: float = 0.0  # what the guard took (its cost per loop, tests/bench/demo_bench.py)


class ForgettingEvent(_Event):
    """The forgetting guard's verdict on a candidate that would become SOTA (``ftagent.finetune.forgetting_guard``):
    each guard benchmark's paired difference against the base model; a blocked one keeps it from SOTA."""

    type: Literal["forgetting"] = "forgetting"
    results: list[GuardResult] = Field(default_factory=list)
    blocked: int = 0  # how many guard benchmarks show a drop beyond FT_GUARD_MAX_DROP


class Message(_Event):
    type: Literal["message"] = "message"
    level: Literal["info", "warning", "error"] = "info"
    text: str


Event = Annotated[
    SessionStart
    | SessionEnd
    | ScenarioStage
    | StepStart
    | StepEnd
    | LLMCall
    | HypothesisEvent
    | CodeRound
    | ValidationEvent
    | RunEvent
    | TrainingEvent
    | SamplingEvent
    | BenchmarkResult
    | FeedbackEvent
    | LoopEnd
    | TrialStart
    | Progress
    | LeftoversReaped
    | ForecastEvent
    | ReforecastEvent
    | ContaminationScan
    | IntegrityEvent
    | ForgettingEvent
    | Message,
    Field(discriminator="type"),
]
EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


def read_events(path: Path) -> Iterator[Event]:
    """Yield the events of a log, skipping lines that do not parse (e.g. a half-written last line)."""
    if not path.exists():
        return
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                yield EVENT_ADAPTER.validate_python(json.loads(line))
            except (json.JSONDecodeError, ValidationError):
                continue
