"""The scenario brief: one readable Markdown text per session, rendered from typed facts.

:func:`render_brief` turns a :class:`~ftagent.core.types.ScenarioInfo` (and the dataset catalogue)
into ``prompts/scenario_brief.j2``: the objective and the benchmark's output format, the base model
card, the hardware in words, the memory table with honest units, the budgets as durations, the data
rules and a summary of every selected raw dataset. The scenario builder stores the text in
``ScenarioInfo.description_text``; every prompt takes the sections it needs with
:func:`brief_sections` (each section is a ``## `` heading of the brief), so all prompts describe the
scenario with the same words. Only validation facts appear: the baseline's test score is not in
``ScenarioInfo`` at all.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ftagent.core.durations import format_duration
from ftagent.planners.llm.brief_benchmark import (
    answer_length_limit,
    constant_baseline_words,
    decoding_words,
    prompt_per_item,
    says_more,
    space_warning,
    validation_example,
    validation_items,
)
from ftagent.planners.llm.brief_machine import MemoryRow, hardware_words, memory_table
from ftagent.planners.llm.numbers import format_bytes, format_count, format_score, metric_scale
from ftagent.planners.llm.rules import (
    _rule_example,
    contamination_rule_words,
    feedback_example,
    holdout_words,
)
from ftagent.planners.llm.templates import render

if TYPE_CHECKING:
    from ftagent.core.types import ScenarioInfo

# the brief's sections, in order (the ``## `` headings of scenario_brief.j2). Each prompt quotes the sections whose
# facts it uses, so each fact is said once, where it is used (issue 43: the ~2.3k-character contamination rule was
# in every prompt): the judging rules (trivial baseline, validation's parts) go to the proposal and the feedback;
# the warning about the benchmark's item space to the proposal and the data coder; the contamination check's exact
# rule to the data coder only, and CONTAMINATION_SUMMARY, what planning the data needs of it, to the proposal.
OBJECTIVE, JUDGING, ITEM_SPACE, MODEL, HARDWARE, MEMORY, BUDGETS, DATA_RULES, CONTAMINATION, DATASETS = (
    "Objective", "Judging results", "Benchmark items and generated data", "Base model", "Hardware",
    "Memory estimate", "Budgets", "Training data rules", "Contamination check", "Raw datasets")
SECTIONS = (OBJECTIVE, JUDGING, ITEM_SPACE, MODEL, HARDWARE, MEMORY, BUDGETS, DATA_RULES, CONTAMINATION, DATASETS)
#: what the proposal is told of the contamination check (the data coder gets the whole rule, CONTAMINATION)
CONTAMINATION_SUMMARY = ("- Contamination check: a training row that asks a validation or test item again, in any "
                         "wording (the same question with the same numbers, names or facts), fails the data step; the "
                         "data script's author is given the check's exact rule. Plan data whose questions lie outside "
                         "the benchmark's items; raw rows a dataset's notes say ask no item stay clean rewritten in "
                         "the benchmark's wording.")


def model_origin(name: str) -> str:
    """Whether the base model is pretrained: built-in models are randomly initialised."""
    from ftagent.models.builtin import BUILTIN_MODELS, BUILTIN_PREFIX

    if name.startswith(BUILTIN_PREFIX):
        spec = BUILTIN_MODELS.get(name[len(BUILTIN_PREFIX):])
        what = f" ({spec.description})" if spec is not None else ""
        return ("randomly initialised, built offline by ftagent: it knows nothing before training (no language, "
                f"no arithmetic); everything must be learnt from the training data{what}")
    return "pretrained (a released checkpoint, as its config/README describe it)"


def dir_size(path: str | Path) -> int | None:
    """Bytes of the files under ``path`` (None when it is not a folder)."""
    root = Path(path)
    if not root.is_dir():
        return None
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


class BriefFacts(BaseModel):
    """Everything the brief shows, already formatted."""

    benchmark: str
    description: str = ""
    prompt_format: str = ""
    prompt_example: str = ""  # one validation item's prompt, as the model sees it
    answer_example: str = ""
    example_tokens: str = ""  # the example's prompt and answer in the model's tokens
    space_warning: str = ""  # the benchmark's items fill most of their templated input space
    contamination_rule: str = ""  # what the contamination scan compares (ftagent.datasets.contamination)
    holdout_rule: str = ""  # validation's feedback and selection parts (ftagent.core.holdout, issue 39 item 5)
    answer_rule: str = ""
    max_out_len: int | None = None
    decoding: str = ""  # how evaluation generates, in words
    core_metric: str
    direction: str
    user_target: str | None = None
    baseline: str
    constant_baseline: str = ""  # what one constant answer scores (ftagent.benchmarks.baselines)
    metric_scale: str = ""
    validation_items: int | None = None
    model_name: str
    origin: str = ""
    template_overhead: str = ""
    model_path: str
    parameters: str
    size_note: str = ""  # a very small model barely transfers between wordings (SMALL_MODEL_PARAMS)
    architecture: str = ""
    layers: str = ""
    context_window: str
    template: str
    think: str
    disk_size: str
    dtype: str = ""
    hardware: str
    cpu_only: bool = False
    memory_rows: list[MemoryRow] = []
    memory_device: str = ""
    memory_text: str = ""  # a pre-rendered memory report (scenarios without the typed estimate)
    budgets: list[str] = []
    data_cap: int
    force_think_token: bool = False
    datasets: list[str] = []
    dataset_texts: list[str] = []


def _dataset_texts(scenario: ScenarioInfo, catalogue: dict[str, Any] | None) -> list[str]:
    from ftagent.datasets.catalogue import read_catalogue, render_entry

    if catalogue is None:
        catalogue = read_catalogue(Path(scenario.dataset_root)) if scenario.dataset_root else {}
    # the proposal plans the data: it gets what the data coder gets (token percentiles, value counts, two
    # whole samples), not a summary; the budget drops the section when several datasets do not fit
    return [render_entry(name, catalogue[name], "full", level=3) for name in scenario.datasets if name in catalogue]


def brief_facts(scenario: ScenarioInfo, *, benchmark: Any, catalogue: dict[str, Any] | None = None,
                force_think_token: bool | None = None) -> BriefFacts:
    """The formatted facts of the brief (see :func:`render_brief`)."""
    model = scenario.model_info
    bench = benchmark
    spec = getattr(bench, "spec", None)
    context = model.max_position_embeddings
    baseline = scenario.baseline
    metric = scenario.core_metric
    if baseline is not None and baseline.score is not None:
        base = f"{format_score(baseline.score, metric)} {metric} on the validation split"
    else:
        base = "not yet measured"
    limits = scenario.time_limits
    budgets = []
    if limits is not None:  # the evaluation limit is the system's concern, not the plan's
        budgets = [f"one training run: at most {format_duration(limits.full_timeout)}",
                   f"one full data-processing run: at most {format_duration(limits.data_processing_timeout)}"]
    from ftagent.planners.llm.chat_overhead import example_tokens, template_overhead

    overhead = template_overhead(scenario.base_model_path)
    params = (f"{format_count(model.num_parameters)} ({model.num_parameters:,}, from {model.parameter_source})"
              if model.num_parameters else "unknown")
    think = getattr(scenario, "force_think_token", False) if force_think_token is None else force_think_token
    memory = scenario.memory or {}
    per_item = prompt_per_item(bench)
    items = scenario.items_root() if scenario.file_path else None  # the session's own copy (issue 39 item 6)
    holdout = getattr(scenario, "holdout", None)
    columns = (spec.input_columns[0], spec.output_column) if spec and spec.input_columns else ()
    example = validation_example(scenario.file_path, scenario.benchmark, *columns, root=items,
                                 at=feedback_example(holdout))
    return BriefFacts(
        benchmark=scenario.benchmark, description=scenario.benchmark_description or (spec.description if spec else ""),
        prompt_format=("" if per_item or not spec or not says_more(spec.prompt) else spec.prompt),
        prompt_example=example[0], answer_example=example[1],
        example_tokens=example_tokens(scenario.base_model_path, *example), answer_rule=(spec.answer_rule if spec else ""),
        space_warning=space_warning(scenario.file_path, scenario.benchmark,
                                    spec.input_columns[0] if spec and spec.input_columns else "prompt", root=items),
        contamination_rule=contamination_rule_words(_rule_example(example[0], items, scenario.benchmark,
                                                                  list(spec.input_columns) if spec else []),
                                                    example[0]),
        holdout_rule=holdout_words(holdout),
        max_out_len=answer_length_limit(scenario, spec), decoding=decoding_words(scenario.eval_decoding),
        core_metric=scenario.core_metric,
        direction="higher is better" if scenario.direction == "max" else "lower is better",
        user_target=scenario.user_target_scenario, baseline=base, metric_scale=metric_scale(metric),
        constant_baseline=constant_baseline_words(scenario.file_path, bench, root=items, holdout=holdout),
        validation_items=validation_items(scenario.file_path, scenario.benchmark, root=items),
        model_name=scenario.base_model, model_path=scenario.base_model_path, parameters=params,
        size_note=size_note(model.num_parameters),
        origin=model_origin(scenario.base_model), template_overhead=overhead.line() if overhead else "",
        architecture=" ".join(x for x in (model.architecture, f"({model.model_type})" if model.model_type else "") if x),
        layers=(f"{model.num_hidden_layers} layers, hidden size {model.hidden_size}, vocabulary {model.vocab_size:,}"
                if model.num_hidden_layers and model.hidden_size and model.vocab_size else ""),
        context_window=f"{context:,} tokens" if context else "unknown",
        template=model.template or "unknown (use the LLaMA-Factory template of the model family)",
        think=("yes: the tokenizer has a `<think>` token" if model.has_think_token
               else "no `<think>` token in the tokenizer"),
        disk_size=format_bytes(dir_size(scenario.base_model_path)), dtype=model.torch_dtype or "",
        hardware=hardware_words(scenario.hardware), cpu_only=scenario.hardware.gpu_count == 0,
        memory_rows=memory_table(memory, context), memory_device=str(memory.get("device") or ""),
        memory_text=re.sub(r"^#+ .*\n?", "", scenario.memory_report or "", flags=re.MULTILINE).strip(),
        budgets=budgets, data_cap=scenario.upper_data_size_limit, force_think_token=bool(think),
        datasets=list(scenario.datasets), dataset_texts=_dataset_texts(scenario, catalogue),
    )


#: Below this many parameters the brief says that the model learns surface forms (issue 35: a played planner
#: expected a 558K-parameter model trained from scratch to carry one wording over to another).
SMALL_MODEL_PARAMS = 10_000_000


def size_note(num_parameters: int | None) -> str:
    """One factual line for a very small model ("" for a larger or unknown one)."""
    if not num_parameters or num_parameters >= SMALL_MODEL_PARAMS:
        return ""
    return (f"A model this small (under {format_count(SMALL_MODEL_PARAMS)} parameters) learns the exact surface "
            "form of its training rows: expect little transfer between wordings.")


def render_brief(scenario: ScenarioInfo, *, benchmark: Any, catalogue: dict[str, Any] | None = None,
                 force_think_token: bool | None = None) -> str:
    """The scenario brief as Markdown (``prompts/scenario_brief.j2``).

    Args:
        scenario: the session's scenario (validation facts only).
        benchmark: the resolved benchmark (:attr:`ftagent.finetune.resolve.ResolvedRun.adapter`: its
            spec, YAML config); None: a benchmark without a spec (the brief then says less).
        catalogue: dataset catalogue entries (default: read ``dataset_info.json`` under
            ``scenario.dataset_root``).
        force_think_token: training outputs must be ``<think>…</think>answer``; default
            ``scenario.force_think_token`` when the field exists.
    """
    return render("scenario_brief", f=brief_facts(scenario, benchmark=benchmark, catalogue=catalogue,
                                                  force_think_token=force_think_token))


_HEADING = re.compile(r"^## (.+)$", re.MULTILINE)


def brief_sections(text: str) -> dict[str, str]:
    """The brief split at its ``## `` headings: heading → body (without the heading line)."""
    matches = list(_HEADING.finditer(text))
    out: dict[str, str] = {}
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        out[match.group(1).strip()] = text[match.end():end].strip()
    return out


def scenario_brief(scenario: ScenarioInfo) -> str:
    """The stored brief (the scenario builder renders it with the resolved benchmark); a scenario without
    one (made by hand) gets the brief of its facts alone."""
    return scenario.description_text or render_brief(scenario, benchmark=None)
