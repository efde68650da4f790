"""Contracts between the loop steps: typed results (pydantic) and component protocols.

Each loop step is a pluggable component chosen by a dotted-path setting (``FT_PROPOSER``,
``FT_CODER``, ``FT_VALIDATOR``, ``FT_TRAINER``, ``FT_EVALUATOR``, ``FT_FEEDBACK``). Components are
plain classes built with ``Component(scenario, settings)``; they satisfy these protocols by shape,
not by inheritance. Everything they return is a pydantic model, so it can be snapshotted as JSON.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from ftagent.errors import StepFailure

if TYPE_CHECKING:
    from ftagent.loop.engine import StepContext
    from ftagent.loop.trace import Experiment, Trace
    from ftagent.scenario import ScenarioInfo


class Hypothesis(BaseModel):
    """What a loop will try, and why (output of the propose step)."""

    reason: str = ""
    hypothesis: str
    task: str = ""
    skip_data_processing: bool = False
    parent: int | None = None  # loop index of the experiment this one builds on (the SOTA)
    planner: str = ""
    plan: dict[str, Any] = Field(default_factory=dict)  # machine-readable plan (heuristic planner)


class CodeResult(BaseModel):
    """Files written into the loop workspace by the code step."""

    workspace: str
    files: dict[str, str] = Field(default_factory=dict)  # logical name -> path
    round: int = 1
    notes: str = ""


class ValidationReport(BaseModel):
    """Outcome of the validate step (data checks, key filtering, micro-batch run)."""

    passed: bool
    data_stats: dict[str, Any] = Field(default_factory=dict)
    dropped_keys: list[str] = Field(default_factory=list)
    injected_keys: list[str] = Field(default_factory=list)
    config_path: str | None = None  # the filtered, system-managed train.yaml
    micro_batch: dict[str, Any] = Field(default_factory=dict)
    failure: StepFailure | None = None


class TrainResult(BaseModel):
    """Outcome of the train step."""

    output_dir: str
    model_path: str  # what evaluation loads: full model dir, or adapter dir (see adapter_of)
    adapter_of: str | None = None  # base model path when model_path is a LoRA adapter
    finetuning_type: str = "full"
    template: str | None = None  # chat template used for training (evaluation must use the same)
    enable_thinking: bool | None = None
    loss_history: list[dict[str, Any]] = Field(default_factory=list)
    train_runtime_s: float | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    duration_s: float = 0.0


class EvalResult(BaseModel):
    """Scores of one model on one split of the target benchmark."""

    benchmark: str
    split: Literal["validation", "test"]
    core_metric: str
    direction: Literal["max", "min"] = "max"
    score: float | None
    metrics: dict[str, Any] = Field(default_factory=dict)  # {dataset: {metric: value}}
    error_samples: list[dict[str, Any]] = Field(default_factory=list)
    cached: bool = False
    run_dir: str | None = None
    duration_s: float = 0.0


class FeedbackResult(BaseModel):
    """Decision and advice after a loop."""

    decision: bool
    reason: str = ""
    error_type: str | None = None
    next_step: str = ""


@runtime_checkable
class Proposer(Protocol):
    def propose(self, scenario: ScenarioInfo, trace: Trace, ctx: StepContext) -> Hypothesis: ...


@runtime_checkable
class Coder(Protocol):
    def code(self, hypothesis: Hypothesis, scenario: ScenarioInfo, trace: Trace, workspace: Path,
             feedback: StepFailure | None, ctx: StepContext) -> CodeResult: ...


@runtime_checkable
class Validator(Protocol):
    def validate(self, code: CodeResult, scenario: ScenarioInfo, ctx: StepContext) -> ValidationReport: ...


@runtime_checkable
class Trainer(Protocol):
    def train(self, code: CodeResult, report: ValidationReport, scenario: ScenarioInfo,
              ctx: StepContext) -> TrainResult: ...


@runtime_checkable
class Evaluator(Protocol):
    def evaluate(self, model: TrainResult, scenario: ScenarioInfo, split: Literal["validation", "test"],
                 ctx: StepContext) -> EvalResult: ...


@runtime_checkable
class Feedback(Protocol):
    def feedback(self, experiment: Experiment, trace: Trace, scenario: ScenarioInfo,
                 ctx: StepContext) -> FeedbackResult: ...
