"""What the code prompts say of the trace: the failure to fix, the default converters, the data the loop builds
on, the latest experiment's failure and files, the previous config as the planner may write it."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any

from ftagent.core.errors import ErrorType, StepFailure
from ftagent.core.types import Hypothesis, ScenarioInfo
from ftagent.llm.budget import Section
from ftagent.planners.llm.history import clip_text, is_internal_error, planner_config
from ftagent.planners.llm.prompting import debug_data_stats, text_part
from ftagent.planners.llm.propose import read_artefact
from ftagent.planners.llm.templates import clip

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
    from ftagent.datasets.base import converter_source
    from ftagent.datasets.registry import get_source, is_user_dataset

    out: dict[str, str] = {}
    for name in datasets:
        if is_user_dataset(name):  # a user's own file (--dataset FILE): the converter it was registered with
            out[name] = converter_source(get_source(name))
            continue
        try:
            module = importlib.import_module(f"ftagent.datasets.{name.replace('-', '_')}")
            target = getattr(module, "to_alpaca", None) or getattr(module, "convert", None) or module
            out[name] = inspect.getsource(target)
        except Exception:  # noqa: BLE001 - an example is optional; never fail the step for it
            continue
    return out


def config_extra(workspace: Path | None, view: Any, scenario: ScenarioInfo, hypothesis: Hypothesis) -> list[Section]:
    """The config prompt's sections from the trace: the data built on (before this loop's exists) and the
    latest experiment's failure (the coder and ``ftagent prompts`` show the same)."""
    parent = view.get(hypothesis.parent)
    data = _parent_data_part(workspace, parent, scenario, hypothesis) if workspace is not None or parent else []
    return [*data, *_last_failure_part(view.experiments[-1] if view.experiments else None)]


def _parent_data_part(workspace: Path | None, parent: Any, scenario: ScenarioInfo,
                      hypothesis: Hypothesis) -> list[Section]:
    """Before this loop's data exists, the statistics of the data built on (issue 35: loop 1's config
    prompt said "not produced yet" while loop 0's data was known)."""
    if parent is None or (workspace is not None and (Path(workspace) / "data.json").is_file()):
        return []
    # the data the parent trained on (its full data run's folder), else its workspace (a loop from before the freeze)
    source = str(Path(parent.artefacts["data"]).parent) if parent.artefacts.get("data") else \
        parent.artefacts.get("workspace")
    stats = debug_data_stats(Path(source), scenario.base_model_path, written_by=f"loop {parent.loop}'s data "
                             "script") if source else ""
    if not stats:
        return []
    # relay round r2: "the data of loop 0 … (this loop's data script may change it)" was read as this loop's data
    # (plain outputs of 7 tokens where this loop's script wrote reversed sums of up to 11)
    if hypothesis.skip_data_processing:
        title = f"Training data (loop {parent.loop}'s: this loop runs its data script again)"
        lead = (f"This loop runs loop {parent.loop}'s data script unchanged, so expect its data again; loop "
                f"{parent.loop}'s data:")
    else:
        title = f"Training data (loop {parent.loop}'s, not this loop's)"
        planned = f" (the proposal plans {hypothesis.rows:,} rows)" if hypothesis.rows is not None else ""
        lead = (f"These figures are loop {parent.loop}'s data (the experiment built on), not this loop's: this loop's "
                f"data script writes new data{planned}, and it runs after this config is written. Where the task "
                "changes the rows (their number, format or length), size the run by the task's figures. Loop "
                f"{parent.loop}'s data:")
    return [text_part("data", title, f"{lead}\n{stats}", 80)]


def _last_failure_part(exp: Any) -> list[Section]:
    """The latest experiment's failure, when it failed (issue 35: the config coder was not told that the
    previous config diverged)."""
    if exp is None or exp.failure is None or is_internal_error(exp.failure):
        return []
    f = exp.failure
    lines = [f"- [{f.stage}/{f.error_type.value}] {clip_text(f.message, 500)}"]
    if f.suggestion:
        lines.append(f"- Suggestion: {clip_text(f.suggestion, 400)}")
    return [text_part("last_failure", f"Loop {exp.loop} (the latest experiment) failed: do not repeat its cause",
                      "\n".join(lines), 78)]


def latest_other(view: Any, parent: Any) -> Any:
    """The most recent experiment when it is not the one built on (its files may hold the idea the
    task refers to, e.g. a sibling's parser): None otherwise."""
    latest = view.experiments[-1] if view.experiments else None
    return latest if latest is not None and (parent is None or latest.loop != parent.loop) else None


def latest_part(exp: Any, name: str, lang: str, managed: set[str] | None = None) -> Section | None:
    """``name`` of the latest other experiment as a low-priority section (None when it has none)."""
    text = read_artefact(exp, name) if exp is not None else ""
    if not text:
        return None
    if name == TRAIN_YAML:
        text = without_system_keys(text, managed or set())
    score = f"validation {exp.val_score:g}" if exp.val_score is not None else "no validation score"
    return text_part(f"latest:{name}", f"`{name}` of loop {exp.loop} (the latest experiment, {score}; not the "
                     "one you build on: reuse what the task asks for)", f"```{lang}\n{text.rstrip()}\n```", 40)


def without_system_keys(config_text: str, managed: set[str] | frozenset[str] = frozenset()) -> str:
    """A config as the planner may write it: without the keys (and host paths) the system sets, which the
    validated ``train.yaml`` carries, and without ``managed``, the keys the same prompt lists as set by the
    system (relay round r1: the previous config showed `bf16: false`, `disable_gradient_checkpointing: true`
    ... which the prompt's fixed values told the planner to leave out); text that is not a YAML mapping is
    kept as is."""
    import yaml

    try:
        config = yaml.safe_load(config_text) if config_text else None
    except yaml.YAMLError:
        return config_text
    if not isinstance(config, dict):
        return config_text
    kept = planner_config({k: v for k, v in config.items() if k not in managed})
    return f"{kept}\n" if kept else ""


def experiment_part(hypothesis: Hypothesis) -> Section:
    return text_part("experiment", "Experiment", f"Hypothesis: {hypothesis.hypothesis}\nTask: {hypothesis.task}",
                     required=True)


def fix_parts(previous: str, fix: str, lang: str, name: str, whose: str = "") -> list[Section]:
    """The previous version (``whose``: a note on where it comes from) and what to fix in it."""
    out = []
    if previous:
        out.append(text_part("previous", f"Previous version of {name}{whose}", f"```{lang}\n{previous.rstrip()}\n```",
                             60, required=bool(fix)))
    if fix:
        out.append(text_part("fix", "It failed; fix this first", fix, required=True))
    return out
