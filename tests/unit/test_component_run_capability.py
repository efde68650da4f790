"""Issue 33 item 1: a component gets the start-up's ResolvedRun only when its class declares it reads one
(``reads_resolved_run = True``, :mod:`ftagent.finetune.protocols`); no signature is inspected and no
component carries an optional, unused ``run`` parameter."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ftagent.core.settings import load_settings
from ftagent.core.types import ScenarioInfo
from ftagent.finetune.components import build_components
from ftagent.finetune.protocols import reads_resolved_run
from tests.helpers.resolved_run import resolved_run

HERE = __name__


class StrictTrainer:
    """A plug-in trainer that reads nothing resolved: its constructor has no ``run`` (nor ``**kwargs``)."""

    def __init__(self, scenario: ScenarioInfo, settings: Any, runner: Any) -> None:
        self.runner = runner


class RunReadingEvaluator:
    """A plug-in evaluator that reads the resolved benchmark: it declares so, and takes ``run`` required."""

    reads_resolved_run = True

    def __init__(self, scenario: ScenarioInfo, settings: Any, runner: Any, *, run: Any) -> None:
        self.benchmark = run.benchmark


class SaysSoAsText:
    """Anything but the boolean True is no declaration (a string would be true for a truthiness test)."""

    reads_resolved_run = "yes"


def test_the_declared_capability_decides_who_gets_run(tmp_path: Path) -> None:
    settings = load_settings(target_benchmark="demo_add", base_model="builtin/tiny-qwen2", planner="heuristic",
                             file_path=tmp_path / "ft", trainer=f"{HERE}:StrictTrainer",
                             evaluator=f"{HERE}:RunReadingEvaluator")
    info = ScenarioInfo(benchmark="demo_add", base_model="builtin/tiny-qwen2", base_model_path=str(tmp_path),
                        file_path=str(tmp_path / "ft"), workspace_root=str(tmp_path / "ws"))
    # before: every component was built with run=run, so this trainer failed with a TypeError
    components = build_components(info, settings, "the-runner", "heuristic", run=resolved_run("demo_add"))
    assert isinstance(components.trainer, StrictTrainer) and components.trainer.runner == "the-runner"
    assert isinstance(components.evaluator, RunReadingEvaluator) and components.evaluator.benchmark == "demo_add"


def test_only_the_builtin_evaluator_reads_the_resolved_run() -> None:
    from ftagent.planners.heuristic.planner import HeuristicCoder, HeuristicFeedback, HeuristicProposer
    from ftagent.planners.llm.code import LLMCoder
    from ftagent.planners.llm.feedback import LLMFeedback
    from ftagent.planners.llm.propose import LLMProposer
    from ftagent.tools.llamafactory.trainer import LlamaFactoryTrainer
    from ftagent.tools.llamafactory.validator import LlamaFactoryValidator
    from ftagent.tools.opencompass.evaluator import OpenCompassEvaluator

    assert reads_resolved_run(OpenCompassEvaluator)
    for cls in (HeuristicProposer, HeuristicCoder, HeuristicFeedback, LLMProposer, LLMCoder, LLMFeedback,
                LlamaFactoryTrainer, LlamaFactoryValidator, SaysSoAsText, StrictTrainer):
        assert not reads_resolved_run(cls), cls
    # the evaluator's run is required: no fallback to a lookup of the scenario's benchmark
    with pytest.raises(TypeError, match="run"):
        OpenCompassEvaluator(None, None, None)  # type: ignore[call-arg,arg-type]


def test_the_session_path_takes_its_resolved_values_as_required_parameters() -> None:
    """No "None means look it up" default is left where the session passes a resolved value (issue 33 item 1):
    a new optional parameter of this kind fails here. Tools called with a key (``benchmarks show``, the
    evaluation functions of tools/opencompass/runs.py used by benches) may still look it up."""
    import inspect

    from ftagent.datasets.registry import datasets_for_benchmark, resolve_dataset_choice
    from ftagent.finetune.forgetting_guard import ForgettingGuard
    from ftagent.finetune.hardware_plan import make_plan, session_plan
    from ftagent.finetune.scenario import FinetuneScenario, render_brief
    from ftagent.integrity.guard import IntegrityGuard
    from ftagent.planners.llm import brief
    from ftagent.planners.llm.select import select_datasets
    from ftagent.tools.llamafactory.data_script import DataProcessor
    from ftagent.tools.opencompass.evaluator import OpenCompassEvaluator, evaluate_baseline

    required = {
        build_components: ["run"], FinetuneScenario.__init__: ["run"], OpenCompassEvaluator.__init__: ["run"],
        render_brief: ["run"], brief.render_brief: ["benchmark"], brief.brief_facts: ["benchmark"],
        evaluate_baseline: ["benchmark", "inference"], ForgettingGuard.__init__: ["inference"],
        session_plan: ["inference", "cpu_ram_gb", "settings"], make_plan: ["inference", "cpu_ram_gb", "settings"],
        DataProcessor.__init__: ["input_columns"],
        IntegrityGuard.__init__: ["input_columns"], IntegrityGuard.for_spec: ["spec"],
        datasets_for_benchmark: ["related"], resolve_dataset_choice: ["related"], select_datasets: ["related"],
    }
    for func, names in required.items():
        params = inspect.signature(func).parameters
        for name in names:
            assert params[name].default is inspect.Parameter.empty, f"{func.__qualname__}({name}=...) has a default"
