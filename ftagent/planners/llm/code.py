"""LLMCoder: writes ``process_data.py`` and ``train.yaml`` into the loop workspace.

Round 1 writes both files (the data script is copied from the parent experiment when the hypothesis
says ``skip_data_processing``). A later round gets the validator's (or the debug run's) structured
failure: a data failure regenerates the data script, any other failure regenerates the config; the
failure text goes into the prompt so the LLM can fix it. Running the script is the workflow's job.

The two requests are :mod:`.code_messages`'s, what they say of the trace :mod:`.code_context`'s, the
parameter catalogue they show :mod:`.config_catalogue`'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftagent.core.errors import StepFailure
from ftagent.core.types import CodeResult, Hypothesis
from ftagent.llm.budget import Section
from ftagent.planners.llm.code_context import (
    DATA_SCRIPT,
    TRAIN_YAML,
    config_extra,
    feedback_text,
    is_data_failure,
    latest_other,
    latest_part,
)
from ftagent.planners.llm.code_messages import config_messages, data_messages
from ftagent.planners.llm.config_catalogue import managed_key_names
from ftagent.planners.llm.propose import read_artefact
from ftagent.planners.llm.view import planner_view

if TYPE_CHECKING:
    from ftagent.core.settings import Settings
    from ftagent.core.trace import Trace
    from ftagent.core.types import ScenarioInfo
    from ftagent.engine.loop import StepContext
    from ftagent.engine.session import SessionState
    from ftagent.llm.client import LLMClient


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
             feedback: StepFailure | None, ctx: StepContext[SessionState]) -> CodeResult:
        """Write ``process_data.py`` and ``train.yaml`` into ``workspace`` (see the module docstring)."""
        scenario = self.scenario
        from ftagent.llm.client import LLMClient

        client = self.client or LLMClient.for_context(self.settings, ctx)
        workspace = Path(workspace)
        workspace.mkdir(parents=True, exist_ok=True)
        parent = planner_view(trace).get(hypothesis.parent)
        script_path, yaml_path = workspace / DATA_SCRIPT, workspace / TRAIN_YAML
        fix = feedback_text(feedback) if feedback is not None else ""
        data_failed = feedback is not None and is_data_failure(feedback)
        notes: list[str] = []

        parent_script = read_artefact(parent, DATA_SCRIPT)
        latest = latest_other(planner_view(trace), parent)
        if data_failed or not script_path.exists():
            if hypothesis.skip_data_processing and parent_script and not data_failed:
                script_path.write_text(parent_script, encoding="utf-8")
                notes.append(f"data script reused from loop {parent.loop}")  # type: ignore[union-attr]
            else:
                # relay round r3: a DPO script's request showed loop 0's SFT script as its "Previous version"; a
                # parent whose rows are of another kind (Alpaca vs pairs) has no script to build on
                previous = _read(script_path) or (parent_script if _same_rows(parent, hypothesis) else "")
                script_path.write_text(self._data_script(client, hypothesis, scenario, previous,
                                                         fix if data_failed else "", ctx,
                                                         latest_part(latest, DATA_SCRIPT, "python"), workspace),
                                       encoding="utf-8")
                notes.append("data script written")
        if not data_failed or not yaml_path.exists():
            previous = _read(yaml_path) or read_artefact(parent, TRAIN_YAML)
            changes = parent.system_changes if parent is not None and not _read(yaml_path) else []
            view = planner_view(trace)
            note = "" if _read(yaml_path) else _other_stage_note(parent, hypothesis)
            yaml_path.write_text(self._config(client, hypothesis, scenario, workspace, previous,
                                              "" if data_failed else fix, ctx, changes,
                                              latest_part(latest, TRAIN_YAML, "yaml", managed_key_names(scenario)),
                                              extra=config_extra(workspace, view, scenario, hypothesis),
                                              previous_note=note),
                                 encoding="utf-8")
            notes.append("config written")
        return CodeResult(workspace=str(workspace), round=_round(ctx), notes="; ".join(notes),
                          files={DATA_SCRIPT: str(script_path), TRAIN_YAML: str(yaml_path)})

    def _data_script(self, client: LLMClient, hypothesis: Hypothesis, scenario: ScenarioInfo,
                     previous: str, fix: str, ctx: Any = None, latest: Section | None = None,
                     workspace: Path | None = None) -> str:
        messages = data_messages(scenario, self.settings, hypothesis, previous, fix, ctx, latest, workspace=workspace)
        return client.chat_code(messages, "python", stage="data_coder")

    def _config(self, client: LLMClient, hypothesis: Hypothesis, scenario: ScenarioInfo, workspace: Path,
                previous: str, fix: str, ctx: Any = None, parent_changes: list[str] | None = None,
                latest: Section | None = None, extra: list[Section] | None = None, previous_note: str = "") -> str:
        messages = config_messages(scenario, self.settings, hypothesis, workspace, previous, fix, ctx,
                                   parent_changes or [], latest, extra=extra, previous_note=previous_note)
        return client.chat_code(messages, "yaml", stage="config_coder")


def _same_rows(parent: Any, hypothesis: Hypothesis) -> bool:
    """Whether the parent's data script wrote the kind of rows this hypothesis's stage trains on."""
    from ftagent.core.stage_specs import stage_spec

    theirs = getattr(getattr(parent, "hypothesis", None), "stage", None) or "sft"
    return stage_spec(theirs).data == stage_spec(hypothesis.stage).data


def _other_stage_note(parent: Any, hypothesis: Hypothesis) -> str:
    """`` (loop 0's, stage sft: ...)`` when the parent's config trained another stage (relay round r3: a DPO
    config's request showed loop 0's SFT config, lr 1e-3 for 30 epochs, as its "Previous version")."""
    theirs = getattr(getattr(parent, "hypothesis", None), "stage", None) or "sft"
    if parent is None or theirs == hypothesis.stage:
        return ""
    return (f" (loop {parent.loop}'s, stage {theirs}: its learning rate, epochs and batch were chosen for that stage "
            f"and do not carry over to {hypothesis.stage})")
