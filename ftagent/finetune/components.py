"""A loop's pluggable parts: :class:`Components` (the six component protocols and the data step) and
:func:`build_components`, which builds each from its dotted-path setting once, with the scenario."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ftagent.core.types import ScenarioInfo
from ftagent.finetune.protocols import (
    Coder,
    DataStep,
    Evaluator,
    Feedback,
    Proposer,
    Trainer,
    Validator,
    reads_resolved_run,
)
from ftagent.finetune.stage_prepare import StagePreparer

if TYPE_CHECKING:
    from ftagent.finetune.resolve import ResolvedRun


@dataclass
class Components:
    """The six pluggable parts of a loop, plus the data step that validate and train share."""

    proposer: Proposer
    coder: Coder
    validator: Validator
    trainer: Trainer
    evaluator: Evaluator
    feedback: Feedback
    data: DataStep
    stages: StagePreparer | None = None  # issue 40: start weights, samples, reward (None: SFT from the base only)


def build_components(scenario: ScenarioInfo, settings: Any, runner: Any, planner: str, *,
                     run: ResolvedRun, llm_gateway_url: str | None = None,
                     llm_gateway_token: str | None = None) -> Components:
    """Instantiate the six components (and the data step) from their dotted-path settings.

    Every component is built ``Component(scenario, settings, [runner=runner,] [run=run])`` (no signature
    is inspected): the scenario is given once, here; the runner goes to the components that run commands
    (validator, trainer, evaluator); ``run`` (the start-up's :class:`~ftagent.finetune.resolve.ResolvedRun`)
    only to a component whose class declares ``reads_resolved_run = True``
    (:func:`ftagent.finetune.protocols.reads_resolved_run`): the built-in evaluator takes the resolved
    benchmark and the model's models.yaml settings from it and looks nothing up again. A plug-in component
    (``FT_PROPOSER`` ... ``FT_EVALUATOR``) declares it the same way when it needs the resolved facts.
    The data step gets the session's LLM gateway (URL and token), never the real key, and the benchmark's
    input columns for its contamination scan.
    """
    from ftagent.core.registry import load_object
    from ftagent.tools.llamafactory.data_script import DataProcessor

    ft = settings.ft
    from ftagent.planners.registry import planner_spec

    spec = planner_spec(planner)  # the planner registry names each planner's three components
    defaults = (spec.proposer, spec.coder, spec.feedback)

    def make(path: str, default: str, **kw: Any) -> Any:  # a dotted-path class: its slot in Components names its protocol
        cls = load_object(default if path == "auto" else path)
        if reads_resolved_run(cls):  # its declared capability, not its signature
            kw["run"] = run
        return cls(scenario, settings, **kw)

    data = DataProcessor(scenario, settings, runner, llm_gateway_url=llm_gateway_url,
                         llm_gateway_token=llm_gateway_token, input_columns=list(run.spec.input_columns),
                         answer_column=run.spec.output_column)
    return Components(
        proposer=make(ft.proposer, defaults[0]),
        coder=make(ft.coder, defaults[1]),
        validator=make(ft.validator, ft.validator, runner=runner),
        trainer=make(ft.trainer, ft.trainer, runner=runner),
        evaluator=make(ft.evaluator, ft.evaluator, runner=runner),
        feedback=make(ft.feedback, defaults[2]),
        data=data,
        stages=StagePreparer(scenario, settings, runner, run=run, data=data),
    )
