"""LLMCoder: writes ``process_data.py`` and ``train.yaml`` into the loop workspace.

Round 1 writes both files (the data script is copied from the parent experiment when the hypothesis
says ``skip_data_processing``). A later round gets the validator's (or the debug run's) structured
failure: a data failure regenerates the data script, any other failure regenerates the config; the
failure text goes into the prompt so the LLM can fix it. Running the script is the workflow's job.
"""

from __future__ import annotations

import importlib
import inspect
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftagent.core.errors import ErrorType, StepFailure
from ftagent.core.types import CodeResult, Hypothesis
from ftagent.planners.llm.propose import planner_view, read_artefact, scenario_text
from ftagent.planners.llm.templates import clip, render

if TYPE_CHECKING:
    from ftagent.core.settings import Settings
    from ftagent.core.trace import Trace
    from ftagent.core.types import ScenarioInfo
    from ftagent.engine.loop import StepContext
    from ftagent.planners.llm.client import LLMClient

DATA_SCRIPT = "process_data.py"
TRAIN_YAML = "train.yaml"


def feedback_text(failure: StepFailure) -> str:
    """The failure as prompt text: summary, suggestion and the tail of the log."""
    parts = [failure.summary()]
    if failure.suggestion:
        parts.append(f"Suggestion: {failure.suggestion}")
    if failure.log_tail:
        parts.append("Log tail:\n```\n" + clip(failure.log_tail, 3000) + "\n```")
    return "\n".join(parts)


def is_data_failure(failure: StepFailure) -> bool:
    """True when the failure lies in the data script (its debug run or its output)."""
    return failure.error_type == ErrorType.DATA or "data" in failure.stage.lower()


def converter_sources(datasets: list[str]) -> dict[str, str]:
    """Source of each dataset's default Alpaca converter (``ftagent.datasets.<name>``), where one exists.

    The module may expose ``to_alpaca`` or ``convert``; without either the whole module is shown.
    """
    out: dict[str, str] = {}
    for name in datasets:
        try:
            module = importlib.import_module(f"ftagent.datasets.{name.replace('-', '_')}")
            target = getattr(module, "to_alpaca", None) or getattr(module, "convert", None) or module
            out[name] = inspect.getsource(target)
        except Exception:  # noqa: BLE001 - an example is optional; never fail the step for it
            continue
    return out


def parameter_catalogue(info_dir: str | None) -> str:
    """LLaMA-Factory's parameter catalogue (``parameters.json``) as compact ``name: help`` lines."""
    if not info_dir:
        return ""
    path = Path(info_dir) / "parameters.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    lines: list[str] = []

    def walk(value: Any, prefix: str = "") -> None:
        if isinstance(value, dict) and "help" not in value:
            for key, sub in value.items():
                walk(sub, f"{prefix}{key}" if not isinstance(sub, dict) or "help" in sub else f"## {key}\n")
        elif isinstance(value, dict):
            lines.append(f"{prefix}: {value.get('help', '')} (default {value.get('default')})")
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, dict) and "name" in item:
                    lines.append(f"{item['name']}: {item.get('help', '')}")
        else:
            lines.append(f"{prefix}: {value}")

    walk(data)
    return "\n".join(lines)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def _round(ctx: Any) -> int:
    """1 + the times this loop already jumped back to the code step."""
    try:
        return 1 + int(ctx.loop.gotos.get("code", 0))
    except Exception:  # noqa: BLE001 - a context without a loop (tests, tools)
        return 1


class LLMCoder:
    """Generates the experiment's data script and training config with the LLM."""

    def __init__(self, scenario: ScenarioInfo, settings: Settings, client: LLMClient | None = None) -> None:
        self.scenario = scenario
        self.settings = settings
        self.client = client

    def code(self, hypothesis: Hypothesis, trace: Trace, workspace: Path,
             feedback: StepFailure | None, ctx: StepContext) -> CodeResult:
        """Write ``process_data.py`` and ``train.yaml`` into ``workspace`` (see the module docstring)."""
        scenario = self.scenario
        from ftagent.planners.llm.client import LLMClient

        client = self.client or LLMClient.for_context(self.settings, ctx)
        workspace = Path(workspace)
        workspace.mkdir(parents=True, exist_ok=True)
        parent = planner_view(trace).get(hypothesis.parent)
        script_path, yaml_path = workspace / DATA_SCRIPT, workspace / TRAIN_YAML
        fix = feedback_text(feedback) if feedback is not None else ""
        data_failed = feedback is not None and is_data_failure(feedback)
        notes: list[str] = []

        parent_script = read_artefact(parent, DATA_SCRIPT)
        if data_failed or not script_path.exists():
            if hypothesis.skip_data_processing and parent_script and not data_failed:
                script_path.write_text(parent_script, encoding="utf-8")
                notes.append(f"data script reused from loop {parent.loop}")  # type: ignore[union-attr]
            else:
                previous = _read(script_path) or parent_script
                script_path.write_text(self._data_script(client, hypothesis, scenario, previous,
                                                         fix if data_failed else ""), encoding="utf-8")
                notes.append("data script written")
        if not data_failed or not yaml_path.exists():
            previous = _read(yaml_path) or read_artefact(parent, TRAIN_YAML)
            yaml_path.write_text(self._config(client, hypothesis, scenario, workspace, previous,
                                              "" if data_failed else fix), encoding="utf-8")
            notes.append("config written")
        return CodeResult(workspace=str(workspace), round=_round(ctx), notes="; ".join(notes),
                          files={DATA_SCRIPT: str(script_path), TRAIN_YAML: str(yaml_path)})

    def _data_script(self, client: LLMClient, hypothesis: Hypothesis, scenario: ScenarioInfo,
                     previous: str, fix: str) -> str:
        prompt = render("data_coder", scenario_text=scenario_text(scenario), hypothesis=hypothesis.hypothesis,
                        task=hypothesis.task, datasets=scenario.datasets,
                        converters=converter_sources(scenario.datasets),
                        upper_data_size_limit=scenario.upper_data_size_limit,
                        max_position_embeddings=scenario.model_info.max_position_embeddings or "unknown",
                        force_think_token=self.settings.ft.force_think_token,
                        previous_script=previous, feedback=fix)
        return client.chat_code([{"role": "user", "content": prompt}], "python", stage="data_coder")

    def _config(self, client: LLMClient, hypothesis: Hypothesis, scenario: ScenarioInfo, workspace: Path,
                previous: str, fix: str) -> str:
        stats_text = _read(workspace / "data_stats.json")
        try:
            data_stats = json.loads(stats_text) if stats_text else None
        except ValueError:
            data_stats = None
        prompt = render("config_coder", scenario_text=scenario_text(scenario), hypothesis=hypothesis.hypothesis,
                        task=hypothesis.task, model_path=scenario.base_model_path,
                        template=scenario.model_info.template,
                        max_position_embeddings=scenario.model_info.max_position_embeddings or "unknown",
                        memory_report=scenario.memory_report,
                        parameter_catalogue=parameter_catalogue(scenario.llama_factory_info_dir),
                        data_stats=data_stats, previous_config=previous, feedback=fix)
        return client.chat_code([{"role": "user", "content": prompt}], "yaml", stage="config_coder")
