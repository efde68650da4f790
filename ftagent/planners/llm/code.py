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
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftagent.core.errors import ErrorType, StepFailure
from ftagent.core.types import CodeResult, Hypothesis
from ftagent.llm.budget import Section
from ftagent.planners.llm.brief import (
    CONTAMINATION,
    DATA_RULES,
    HARDWARE,
    ITEM_SPACE,
    MEMORY,
    MODEL,
    OBJECTIVE,
)
from ftagent.planners.llm.history import clip_text, is_internal_error, planner_config
from ftagent.planners.llm.prompting import (
    brief_part,
    budgets_part,
    debug_data_stats,
    fit,
    steps_rule,
    text_part,
)
from ftagent.planners.llm.propose import llm_pools_configured, read_artefact
from ftagent.planners.llm.rows import unknown_data_words
from ftagent.planners.llm.templates import clip, render
from ftagent.planners.llm.view import planner_view

if TYPE_CHECKING:
    from ftagent.core.settings import Settings
    from ftagent.core.trace import Trace
    from ftagent.core.types import ScenarioInfo
    from ftagent.engine.loop import StepContext
    from ftagent.llm.client import LLMClient

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


def parameter_catalogue(scenario: ScenarioInfo) -> str:
    """LLaMA-Factory's arguments for the config prompt.

    The scenario builder renders them once (grouped, essential arguments first, token-bounded:
    ``LFCatalogue.format_for_prompt``). A scenario from an older snapshot has only the cached
    ``parameters.json``: then the valid names are listed by section.
    """
    if scenario.parameter_catalogue:
        return scenario.parameter_catalogue
    if not scenario.llama_factory_info_dir:
        return ""
    try:
        data = json.loads((Path(scenario.llama_factory_info_dir) / "parameters.json").read_text(encoding="utf-8"))
        params = [p for p in data.get("parameters", []) if isinstance(p, dict) and "name" in p]
    except (OSError, ValueError, AttributeError):
        return ""
    sections: dict[str, list[str]] = {}
    for param in params:
        sections.setdefault(str(param.get("section") or "other"), []).append(str(param["name"]))
    return "\n".join(f"## {sec}\n{', '.join(names)}" for sec, names in sections.items())


# arguments of other stages (RLHF: PPO/DPO/KTO/reward model) and profiler/back-end switches: noise for SFT
_NOT_SFT = re.compile(r"^- (\w*(ppo|dpo|kto|orpo|simpo|pref|reward|ref_model|rlhf|profil|hyper_parallel|"
                      r"ray_|swanlab|wandb|mlflow|trackio)\w*) \(", re.IGNORECASE)


# catalogue entries that cannot apply without a GPU: quantisation (bitsandbytes needs CUDA), mixed precision
# and its back-ends (the system trains CPU runs in float32), GPU kernels (FlashAttention, Liger, Unsloth)
_GPU_ONLY = re.compile(r"^- ((\w*quantiz\w*|bf16|fp16|pure_bf16|fp16_backend|half_precision_backend|fp8\w*|"
                       r"flash_attn|use_liger_kernel|enable_liger_kernel|use_unsloth\w*|torch_empty_cache_steps|"
                       r"double_quantization)) \(")
# the arguments of each method: shown only when the method can be chosen
_METHOD_ARGS = {"lora": re.compile(r"^- ((lora|pissa|loraplus)\w*|use_rslora|use_dora|additional_target|"
                                   r"create_new_adapter) \("),
                "oft": re.compile(r"^- (oft\w*|module_dropout) \("),
                "freeze": re.compile(r"^- (freeze\w*|train_mm_proj_only) \(")}
# a method the experiment names: LoRA/QLoRA/OFT as words; full and freeze only as a method ("full
# fine-tuning", "full-parameter", "freeze tuning", "finetuning_type: full"), not "the full data"
_METHOD_WORD = re.compile(r"\b(q?lora|oft)\b|\b(full|freeze)[ -]?(?:fine[ -]?tun\w*|tun\w*|parameter|ft)\b|"
                          r"finetuning_type\W+(full|freeze|lora|oft)\b", re.IGNORECASE)


def applicable_catalogue(text: str, scenario: ScenarioInfo, hypothesis: Hypothesis | None = None) -> str:
    """The catalogue without the entries that cannot apply to this run (issue 35: ~16k characters, mostly
    quantisation, OFT and Liger entries on a CPU run with full fine-tuning): without a GPU the GPU-only
    arguments; when the experiment names exactly one method (LoRA, full, freeze, OFT), the other methods'
    arguments. Section headings are kept."""
    gpu = bool(getattr(scenario.hardware, "gpus", None))
    text_of = f"{hypothesis.hypothesis} {hypothesis.task}" if hypothesis is not None else ""
    named = {next(g for g in m.groups() if g).lower().replace("qlora", "lora")
             for m in _METHOD_WORD.finditer(text_of)}
    drop = [_GPU_ONLY] if not gpu else []
    if len(named) == 1:
        drop += [rx for method, rx in _METHOD_ARGS.items() if method not in named]
    if not drop:
        return text
    return _without_empty_topics([line for line in text.splitlines() if not any(rx.match(line) for rx in drop)])


_MANAGED = re.compile(r"^## Set by the system[^\n]*\n(?P<body>[^\n]*)\n?", re.MULTILINE)
_MANAGED_KEY = re.compile(r"`(\w+)")


def split_managed(text: str) -> tuple[str, str]:
    """(the system-managed keys line, the catalogue without it and without the entries of those keys).

    The scenario's catalogue carries the keys the system sets in every run
    (:func:`ftagent.tools.llamafactory.config.managed_keys`, rendered by the scenario builder); the config
    prompt shows them up front (issue 35). An older snapshot's catalogue has none: ("", text)."""
    found = _MANAGED.search(text)
    if found is None:
        return "", text
    body = found.group("body").strip()
    keys = set(_MANAGED_KEY.findall(body))
    rest = text[:found.start()] + text[found.end():]
    kept = [line for line in rest.splitlines() if not (line.startswith("- ") and line[2:].split(" ", 1)[0] in keys)]
    return body, _without_empty_topics(kept)


def _without_topic(text: str, heading: str) -> str:
    """``text`` without the topic whose heading starts with ``heading`` (its ``- key`` lines included)."""
    out, skipping = [], False
    for line in text.splitlines():
        if line.startswith("#"):
            skipping = line.startswith(heading)
        if not skipping:
            out.append(line)
    return "\n".join(out)


def _without_empty_topics(lines: list[str]) -> str:
    """The lines without a topic heading (``### ``) whose every entry was left out (CPU: "Precision and
    memory": its entries are GPU-only or managed)."""
    return "\n".join(line for i, line in enumerate(lines)
                     if not (line.startswith("### ") and (i + 1 == len(lines) or lines[i + 1].startswith("#"))))


def split_catalogue(text: str) -> tuple[str, str]:
    """(the arguments the planner tunes, the other SFT-relevant arguments) of a rendered catalogue.

    The essential part is kept whole; from the rest, RLHF-only, profiler and tracker arguments are left out.
    """
    marker = "\n## Other "
    if marker not in text:
        return text, ""
    head, rest = text.split(marker, 1)
    kept = [line for line in ("## Other " + rest).splitlines() if not _NOT_SFT.match(line)]
    return head, "\n".join(kept)


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
        latest = _latest_other(planner_view(trace), parent)
        if data_failed or not script_path.exists():
            if hypothesis.skip_data_processing and parent_script and not data_failed:
                script_path.write_text(parent_script, encoding="utf-8")
                notes.append(f"data script reused from loop {parent.loop}")  # type: ignore[union-attr]
            else:
                previous = _read(script_path) or parent_script
                script_path.write_text(self._data_script(client, hypothesis, scenario, previous,
                                                         fix if data_failed else "", ctx,
                                                         _latest_part(latest, DATA_SCRIPT, "python"), workspace),
                                       encoding="utf-8")
                notes.append("data script written")
        if not data_failed or not yaml_path.exists():
            previous = _read(yaml_path) or read_artefact(parent, TRAIN_YAML)
            changes = parent.system_changes if parent is not None and not _read(yaml_path) else []
            view = planner_view(trace)
            yaml_path.write_text(self._config(client, hypothesis, scenario, workspace, previous,
                                              "" if data_failed else fix, ctx, changes,
                                              _latest_part(latest, TRAIN_YAML, "yaml", managed_key_names(scenario)),
                                              extra=config_extra(workspace, view, scenario, hypothesis)),
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
                latest: Section | None = None, extra: list[Section] | None = None) -> str:
        messages = config_messages(scenario, self.settings, hypothesis, workspace, previous, fix, ctx,
                                   parent_changes or [], latest, extra=extra)
        return client.chat_code(messages, "yaml", stage="config_coder")


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
    how = ("this loop reuses its data script, so expect the same data" if hypothesis.skip_data_processing
           else "this loop's data script may change it")
    return [text_part("data", "Training data",
                      f"This loop's data is not produced yet; the data of loop {parent.loop}, the experiment built "
                      f"on ({how}):\n{stats}", 80)]


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


def _latest_other(view: Any, parent: Any) -> Any:
    """The most recent experiment when it is not the one built on (its files may hold the idea the
    task refers to, e.g. a sibling's parser): None otherwise."""
    latest = view.experiments[-1] if view.experiments else None
    return latest if latest is not None and (parent is None or latest.loop != parent.loop) else None


def _latest_part(exp: Any, name: str, lang: str, managed: set[str] | None = None) -> Section | None:
    """``name`` of the latest other experiment as a low-priority section (None when it has none)."""
    text = read_artefact(exp, name) if exp is not None else ""
    if not text:
        return None
    if name == TRAIN_YAML:
        text = without_system_keys(text, managed or set())
    score = f"validation {exp.val_score:g}" if exp.val_score is not None else "no validation score"
    return text_part(f"latest:{name}", f"`{name}` of loop {exp.loop} (the latest experiment, {score}; not the "
                     "one you build on: reuse what the task asks for)", f"```{lang}\n{text.rstrip()}\n```", 40)


def managed_key_names(scenario: ScenarioInfo) -> set[str]:
    """The keys the config prompt lists as set by the system on this run's hardware (its managed line)."""
    return set(_MANAGED_KEY.findall(split_managed(parameter_catalogue(scenario))[0]))


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


def _experiment_part(hypothesis: Hypothesis) -> Section:
    return text_part("experiment", "Experiment", f"Hypothesis: {hypothesis.hypothesis}\nTask: {hypothesis.task}",
                     required=True)


def _fix_parts(previous: str, fix: str, lang: str, name: str) -> list[Section]:
    out = []
    if previous:
        out.append(text_part("previous", f"Previous version of {name}", f"```{lang}\n{previous.rstrip()}\n```",
                             60, required=bool(fix)))
    if fix:
        out.append(text_part("fix", "It failed; fix this first", fix, required=True))
    return out


def data_messages(scenario: ScenarioInfo, settings: Any, hypothesis: Hypothesis, previous: str = "",
                  fix: str = "", ctx: Any = None, latest: Section | None = None, *,
                  workspace: Path | None = None) -> list[dict[str, str]]:
    """The data coder's request: scenario, the full dataset catalogue, the rules, the fix to make; for a
    non-SFT stage (issue 40) the rows it needs and the loop's ``samples.jsonl`` (in ``workspace``)."""
    from ftagent.core.stages import DATA_WORDS, stage_spec
    from ftagent.datasets.catalogue import read_catalogue, render_entry
    from ftagent.planners.llm.stages import data_stage_part

    catalogue = read_catalogue(Path(scenario.dataset_root)) if scenario.dataset_root else {}
    sections = [
        text_part("intro", "", "You write `process_data.py`, a Python script that builds the training set for "
                               "one experiment.", required=True),
        brief_part(scenario, OBJECTIVE, required=True),
        brief_part(scenario, ITEM_SPACE, required=True),
        brief_part(scenario, MODEL, required=True),  # the context window the rules below drop long samples by
        brief_part(scenario, DATA_RULES, required=True),
        brief_part(scenario, CONTAMINATION, required=True),
        _experiment_part(hypothesis),
        text_part("raw", "Raw data", f"Datasets chosen for this benchmark: "
                                     f"{', '.join(scenario.datasets) if scenario.datasets else '(none)'}",
                  required=True),
    ]
    for i, name in enumerate(scenario.datasets):
        if name in catalogue:
            full, short = render_entry(name, catalogue[name], "full"), render_entry(name, catalogue[name], "summary")
            sections.append(text_part(f"dataset:{name}", "", full, 85 - i).model_copy(update={"fallback": short}))
    for name, source in converter_sources(scenario.datasets).items():
        sections.append(text_part(f"converter:{name}", f"Default converter of `{name}`",
                                  "An example of reading it; improve on it as the task asks.\n"
                                  f"```python\n{source.rstrip()}\n```", 45, level=2))
    context = scenario.model_info.max_position_embeddings or "unknown"
    think = getattr(settings.ft, "force_think_token", False) or scenario.force_think_token
    stage_part = data_stage_part(hypothesis.stage, workspace)
    if stage_part is not None:
        sections.append(stage_part)
    shape = "" if hypothesis.stage == "sft" else f"a JSON list of {DATA_WORDS[stage_spec(hypothesis.stage).data]}"
    sections.append(text_part("rules", "Rules for the script", render(
        "data_coder", upper_data_size_limit=scenario.upper_data_size_limit, max_position_embeddings=context,
        force_think_token=think, llm_pools=llm_pools_configured(settings), data_shape=shape), required=True))
    sections += _fix_parts(previous, fix, "python", "the script")
    if latest is not None:
        sections.append(latest)
    sections.append(text_part("reply", "", "Reply with the complete script in one ```python block.", required=True))
    return [{"role": "user", "content": fit(sections, settings).text}]


def config_messages(scenario: ScenarioInfo, settings: Any, hypothesis: Hypothesis, workspace: Path | None = None,
                    previous: str = "", fix: str = "", ctx: Any = None,
                    parent_changes: list[str] | None = None, latest: Section | None = None,
                    extra: list[Section] | None = None) -> list[dict[str, str]]:
    """The config coder's request: model, hardware, memory, data statistics, the parameter catalogue
    (only the entries that can apply to this run: :func:`applicable_catalogue`). ``extra``: a "data"
    section replaces the not-produced-yet note; others (the latest failure) go before the catalogue."""
    from ftagent.core.stages import stage_spec
    from ftagent.planners.llm.stages import grpo_catalogue

    think = getattr(settings.ft, "force_think_token", False) or scenario.force_think_token
    managed, catalogue = split_managed(parameter_catalogue(scenario))
    essential, others = split_catalogue(applicable_catalogue(catalogue, scenario, hypothesis))
    stage = stage_spec(hypothesis.stage)
    if stage.name == "sft":  # the preference keys are noise for an SFT run (relay critique, issue 35)
        essential = _without_topic(essential, "### Preference stages")
    if stage.trainer == "trl":  # GRPO: TRL's GRPOConfig, not LLaMA-Factory's arguments (issue 40)
        essential, others = grpo_catalogue(scenario.llama_factory_info_dir), ""
        managed = ("`stage: grpo`; `model_name_or_path` (the start weights), `output_dir`, `dataset_dir`, "
                   "`dataset_file`; `report_to`, `save_only_model`, `overwrite_output_dir`, `remove_unused_columns`, "
                   "`log_completions`, `push_to_hub`; without a GPU `use_cpu: true`, `bf16`/`fp16: false`, "
                   "`gradient_checkpointing: false`, `use_vllm: false`; on GPUs the precision and vLLM colocate "
                   "generation when the tool env has the vLLM TRL supports")
    what = {"sft": "a LLaMA-Factory SFT config", "trl": "the config of a GRPO run (TRL's GRPOTrainer)"}.get(
        stage.name if stage.name == "sft" else stage.trainer,
        f"a LLaMA-Factory `stage: {stage.lf_stage}` config for stage {stage.name}")
    extra = list(extra or [])
    data_part = next((x for x in extra if x.key == "data"), None)
    sections = [
        text_part("intro", "", f"You write `train.yaml`, {what}, for one experiment.", required=True),
        brief_part(scenario, OBJECTIVE, 50),
        brief_part(scenario, MODEL, required=True),
        brief_part(scenario, HARDWARE, required=True),
        brief_part(scenario, MEMORY, required=True),
        budgets_part(scenario, ctx, 55),
        _experiment_part(hypothesis),
        text_part("fixed", "Fixed values and rules", render(
            "config_coder", template=scenario.model_info.template, managed=managed,
            max_position_embeddings=scenario.model_info.max_position_embeddings or "unknown",
            force_think_token=think), required=True),
    ]
    stats = debug_data_stats(workspace, scenario.base_model_path) if workspace is not None else ""
    rule = f"- {steps_rule(scenario.hardware.gpu_count)}"
    if stats:
        sections.append(text_part("data", "Training data", f"{stats}\n{rule}"))
    elif data_part is not None:
        sections.append(data_part.model_copy(update={"body": f"{data_part.body}\n{rule}"}))
    else:
        sections.append(text_part("data", "Training data", unknown_data_words(scenario, hypothesis) + f"\n{rule}",
                                  80))
    sections += [x for x in extra if x.key != "data"]
    sections.append(text_part("catalogue", "Parameter catalogue", essential or "(not available)", required=True))
    if others:
        sections.append(text_part("catalogue_more", "", others, 30))
    if parent_changes:
        sections.append(text_part("changes", "What the system changed in the parent's train.yaml",
                                  "\n".join(f"- {c}" for c in parent_changes), 75))
    # the previous config as the planner may write it (the coder and `ftagent prompts` alike)
    sections += _fix_parts(without_system_keys(previous, set(_MANAGED_KEY.findall(managed))), fix, "yaml",
                           "the config")
    if latest is not None:
        sections.append(latest)
    sections.append(text_part("reply", "", "Reply with the complete config in one ```yaml block.", required=True))
    return [{"role": "user", "content": fit(sections, settings).text}]
