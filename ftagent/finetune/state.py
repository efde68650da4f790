"""The fine-tuning loop's typed state: what each step reads and writes, stored in every snapshot.

The engine owns the generic part (:class:`~ftagent.engine.session.SessionState`, loop index,
failure, jumps back); this module adds the fine-tuning facts. Each step writes one field of
:class:`FinetuneLoop`, and later steps read it as a typed object, so a decision taken by one step
(the recipe the coder fell back to, the config the validator made) cannot be lost on the way.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from ftagent.core.trace import Trace
from ftagent.core.types import (
    CodeResult,
    FeedbackResult,
    Hypothesis,
    RewardSpec,
    SamplingResult,
    ScenarioInfo,
    Scores,
    StartModel,
    TrainResult,
    ValidationReport,
)
from ftagent.engine.session import LoopState, SessionState


class FinetuneLoop(LoopState):
    """One loop: propose → code → validate → train → evaluate → feedback, one field per step."""

    hypothesis: Hypothesis | None = None
    # issue 40, prepared by the system at the start of the code step (once: a second round reuses them)
    start: StartModel | None = None  # the weights the loop trains from
    samples: SamplingResult | None = None  # the start model's answers to training prompts (preference, GRPO)
    reward: RewardSpec | None = None  # GRPO: the benchmark's scorer
    code: CodeResult | None = None
    report: ValidationReport | None = None  # the latest validation (a failed one sends the loop back to code)
    model: TrainResult | None = None
    scores: Scores = Field(default_factory=Scores)
    feedback: FeedbackResult | None = None


class FinetuneSessionState(SessionState):
    """A fine-tuning session: the scenario (fixed before loop 0), the trace, the current loop."""

    current: FinetuneLoop | None = None
    running: Sequence[FinetuneLoop] = Field(default_factory=list)  # K trials at once: the loops in flight
    scenario: ScenarioInfo | None = None
    trace: Trace = Field(default_factory=Trace)


def finetune_loop(loop: LoopState) -> FinetuneLoop:
    """``loop`` as a fine-tuning loop (the current loop of a :class:`FinetuneSessionState`)."""
    if not isinstance(loop, FinetuneLoop):
        raise TypeError(f"a fine-tuning loop needs a FinetuneLoop, got {type(loop).__name__}")
    return loop
