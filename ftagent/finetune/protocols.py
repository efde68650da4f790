"""The six pluggable loop components, as ``typing.Protocol``s (satisfied by shape, not inheritance).

Each loop step is a component chosen by a dotted-path setting (``FT_PROPOSER``, ``FT_CODER``,
``FT_VALIDATOR``, ``FT_TRAINER``, ``FT_EVALUATOR``, ``FT_FEEDBACK``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from ftagent.core.errors import StepFailure
from ftagent.core.trace import Experiment, Trace
from ftagent.core.types import (
    CodeResult,
    EvalResult,
    FeedbackResult,
    Hypothesis,
    ScenarioInfo,
    TrainResult,
    ValidationReport,
)

if TYPE_CHECKING:
    from ftagent.engine.loop import StepContext


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
