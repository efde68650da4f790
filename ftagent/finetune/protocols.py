"""The six pluggable loop components, as ``typing.Protocol``s (satisfied by shape, not inheritance).

Each loop step is a component chosen by a dotted-path setting (``FT_PROPOSER``, ``FT_CODER``,
``FT_VALIDATOR``, ``FT_TRAINER``, ``FT_EVALUATOR``, ``FT_FEEDBACK``) and built once per session as
``Component(scenario, settings, **extra)`` (``runner=`` for those that run commands): the scenario
is given once, at construction, never again per call.

A component that reads the start-up's resolved facts (:class:`ftagent.finetune.resolve.ResolvedRun`: the
benchmark, the base model's folder and inference settings ...) declares it on its class,
``reads_resolved_run = True``, and takes ``run`` as a required keyword; it is then built with ``run=run``
(read with :func:`reads_resolved_run`, never from its signature). One that declares nothing is built
without it: it has nothing resolved to read. Of the built-ins only the evaluator declares it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ftagent.core.errors import StepFailure
from ftagent.core.trace import Experiment, Trace
from ftagent.core.types import (
    CodeResult,
    FeedbackResult,
    Hypothesis,
    SplitResults,
    TrainResult,
    ValidationReport,
)

if TYPE_CHECKING:
    from ftagent.engine.loop import StepContext
    from ftagent.finetune.state import FinetuneSessionState


def reads_resolved_run(component: Any) -> bool:
    """Whether a component class (or instance) declares ``reads_resolved_run = True`` (the module docstring):
    only such a component is built with ``run=``. Anything but the boolean True is taken as not declared."""
    return getattr(component, "reads_resolved_run", False) is True


@runtime_checkable
class Proposer(Protocol):
    """Step 0: the next hypothesis from the trace (the SOTA and its siblings)."""

    def propose(self, trace: Trace, ctx: StepContext[FinetuneSessionState]) -> Hypothesis: ...


@runtime_checkable
class Coder(Protocol):
    """Step 1: write ``process_data.py`` and ``train.yaml`` into the loop workspace.

    ``feedback`` is the failed validation of the previous round of this loop, if any.
    """

    def code(self, hypothesis: Hypothesis, trace: Trace, workspace: Path, feedback: StepFailure | None,
             ctx: StepContext[FinetuneSessionState]) -> CodeResult: ...


@runtime_checkable
class DataStep(Protocol):
    """Runs the data script (debug rows for validate, the full data for train) and checks its rows.

    Returns the number of rows written to ``data.json``.
    """

    def prepare(self, code: CodeResult, hypothesis: Hypothesis, trace: Trace, ctx: StepContext[FinetuneSessionState], *,
                debug: bool) -> int | None: ...

    def scan_config(self, config_path: Path) -> None:
        """Check the approved train.yaml's text that reaches every prompt (``default_system``) against the
        benchmark's items; raise a DATA :class:`~ftagent.core.errors.StepError` when it holds one."""
        ...


@runtime_checkable
class Validator(Protocol):
    """Step 2: fail-fast checks of the config and data (a failure sends the loop back to code)."""

    def validate(self, code: CodeResult, ctx: StepContext[FinetuneSessionState]) -> ValidationReport: ...


@runtime_checkable
class Trainer(Protocol):
    """Step 3: train with the validated config; the model it saved."""

    def train(self, code: CodeResult, report: ValidationReport, ctx: StepContext[FinetuneSessionState]) -> TrainResult: ...


@runtime_checkable
class Evaluator(Protocol):
    """Step 4: the trained model on the benchmark's splits, in one evaluation run.

    Only the validation result reaches the agent; the test result (or its failure, in
    ``SplitResults.failures``) goes to the report, the UI and the events. ``on_progress`` receives
    ``(phase, done, total)`` while it runs.
    """

    def evaluate_splits(self, model: TrainResult, ctx: StepContext[FinetuneSessionState], splits: tuple[str, ...] = ("validation", "test"),
                        *, on_progress: Callable[[str, int | None, int | None], None] | None = None
                        ) -> SplitResults: ...


@runtime_checkable
class Feedback(Protocol):
    """Step 5: explain the loop and advise the next step (the SOTA decision itself is numeric)."""

    def feedback(self, experiment: Experiment, trace: Trace, ctx: StepContext[FinetuneSessionState]) -> FeedbackResult: ...
