"""The code writer's two requests: the data coder's (``process_data.py``) and the config coder's
(``train.yaml``), each a budget-fitted list of sections (:func:`ftagent.planners.llm.prompting.fit`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ftagent.core.types import Hypothesis, ScenarioInfo
from ftagent.integrity.movement import optimizer_rule
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
from ftagent.planners.llm.code_context import (
    converter_sources,
    experiment_part,
    fix_parts,
    without_system_keys,
)
from ftagent.planners.llm.config_catalogue import (
    applicable_catalogue,
    managed_names,
    parameter_catalogue,
    split_catalogue,
    split_managed,
    stage_managed_words,
    without_topic,
)
from ftagent.planners.llm.prompting import (
    brief_part,
    budgets_part,
    debug_data_stats,
    fit,
    loops_part,
    steps_rule,
    text_part,
)
from ftagent.planners.llm.propose import llm_pools_configured
from ftagent.planners.llm.rows import unknown_data_words
from ftagent.planners.llm.templates import render


def data_messages(scenario: ScenarioInfo, settings: Any, hypothesis: Hypothesis, previous: str = "",
                  fix: str = "", ctx: Any = None, latest: Section | None = None, *,
                  workspace: Path | None = None) -> list[dict[str, str]]:
    """The data coder's request: scenario, the full dataset catalogue, the rules, the fix to make; for a
    non-SFT stage (issue 40) the rows it needs and the loop's ``samples.jsonl`` (in ``workspace``)."""
    from ftagent.core.stage_specs import DATA_WORDS, stage_spec
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
        experiment_part(hypothesis),
        *loops_part(ctx),
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
    sections += fix_parts(previous, fix, "python", "the script")
    if latest is not None:
        sections.append(latest)
    sections.append(text_part("reply", "", "Reply with the complete script in one ```python block.", required=True))
    return [{"role": "user", "content": fit(sections, settings).text}]


def config_messages(scenario: ScenarioInfo, settings: Any, hypothesis: Hypothesis, workspace: Path | None = None,
                    previous: str = "", fix: str = "", ctx: Any = None,
                    parent_changes: list[str] | None = None, latest: Section | None = None,
                    extra: list[Section] | None = None, previous_note: str = "") -> list[dict[str, str]]:
    """The config coder's request: model, hardware, memory, data statistics, the parameter catalogue
    (only the entries that can apply to this run: :func:`applicable_catalogue`). ``extra``: a "data"
    section replaces the not-produced-yet note; others (the latest failure) go before the catalogue."""
    from ftagent.core.stage_specs import stage_spec
    from ftagent.planners.llm.stages import grpo_catalogue

    think = getattr(settings.ft, "force_think_token", False) or scenario.force_think_token
    managed, catalogue = split_managed(parameter_catalogue(scenario))
    essential, others = split_catalogue(applicable_catalogue(catalogue, scenario, hypothesis))
    stage = stage_spec(hypothesis.stage)
    managed = stage_managed_words(managed, stage)
    if stage.name == "sft":  # the preference keys are noise for an SFT run (relay critique, issue 35)
        essential = without_topic(essential, "### Preference stages")
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
        experiment_part(hypothesis),
        text_part("fixed", "Fixed values and rules", render(
            "config_coder", template=scenario.model_info.template, managed=managed, optimizer_rule=optimizer_rule(),
            max_position_embeddings=scenario.model_info.max_position_embeddings or "unknown",
            force_think_token=think, cpu_only=scenario.hardware.gpu_count == 0, trl=stage.trainer == "trl"),
            required=True),
    ]
    stats = debug_data_stats(workspace, scenario.base_model_path) if workspace is not None else ""
    rule = f"- {steps_rule(scenario.hardware.gpu_count, generations=stage.trainer == 'trl')}"
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
    sections += fix_parts(without_system_keys(previous, set(managed_names(managed))), fix, "yaml",
                           "the config", previous_note)
    if latest is not None:
        sections.append(latest)
    sections.append(text_part("reply", "", "Reply with the complete config in one ```yaml block.", required=True))
    return [{"role": "user", "content": fit(sections, settings).text}]
