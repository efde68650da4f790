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

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ftagent.core.durations import format_duration
from ftagent.core.paths import benchmark_data_dir
from ftagent.planners.llm.rules import (
    _rule_example,
    contamination_rule_words,
    feedback_example,
    holdout_words,
)
from ftagent.planners.llm.templates import render

if TYPE_CHECKING:
    from ftagent.core.types import EvalDecoding, ScenarioInfo

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


# --- formatting helpers (pure, tested directly) ------------------------------------------------------
def format_count(n: int | float | None) -> str:
    """``494,032,768`` → ``494M``; ``7_615_616_512`` → ``7.6B``; ``125_184`` → ``125K``."""
    if n is None:
        return "unknown"
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            value = n / size
            return f"{value:.1f}{unit}" if value < 10 else f"{value:.0f}{unit}"
    return f"{int(n)}"


def format_bytes(n: float | None) -> str:
    """Bytes in a readable unit (``1.5 GB``, ``3.2 MB``, ``512 B``; decimal units)."""
    if n is None:
        return "unknown"
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def format_gb(gb: float) -> str:
    """A size given in GB, in a unit that does not round small values to zero."""
    return format_bytes(gb * 1e9) if gb > 0 else "0"


# metrics that are not percentages (every OpenCompass rate and the domain metrics are 0-100)
_NOT_PERCENT = re.compile(r"(loss|tau|brier|perplexity|ppl|bleu_raw|rmse|mae|corr)", re.IGNORECASE)


def is_percent(metric: str) -> bool:
    """True when ``metric`` is reported as a percentage (0-100): OpenCompass rates and F-scores."""
    return not _NOT_PERCENT.search(metric or "")


def metric_scale(metric: str) -> str:
    """``a percentage, 0-100`` for rates; else the scale as the evaluator reports it."""
    scale = "a percentage, 0–100" if is_percent(metric) else "on the evaluator's own scale"
    if metric == "mean_core":
        scale += ", the plain mean of the sub-tasks' core metrics"
    return scale


def format_score(value: float | None, metric: str) -> str:
    """``62.0 %`` for a percentage metric, ``0.713`` otherwise; ``not yet measured`` for None."""
    if value is None:
        return "not yet measured"
    if not is_percent(metric):
        return f"{value:.4g}"
    return f"{value:.1f} %" if abs(value * 10 - round(value * 10)) < 1e-9 else f"{value:.2f} %"


def metric_maximum(metric: str, direction: str) -> float | None:
    """The best value the metric can reach (100 for a percentage to maximise), else None."""
    return 100.0 if direction == "max" and is_percent(metric) else None


def _folder(file_path: str | None, benchmark: str, root: Path | None) -> Path | None:
    """The benchmark's prepared folder: ``root/<key>`` (the session's frozen copy), else under ``file_path``."""
    if root is not None:
        return Path(root) / benchmark
    return benchmark_data_dir(file_path, benchmark) if file_path else None


def validation_items(file_path: str | None, benchmark: str, *, root: Path | None = None) -> int | None:
    """Number of validation items of ``benchmark`` under ``FT_FILE_PATH/benchmarks/<key>`` (never the test)."""
    root = _folder(file_path, benchmark, root)
    if root is None:
        return None
    files = sorted(root.glob("validation.jsonl")) + sorted(root.glob("*/validation.jsonl"))
    if not files:
        return None
    try:
        return sum(sum(1 for line in f.open(encoding="utf-8") if line.strip()) for f in files)
    except OSError:
        return None


EXAMPLE_CHARS = 1500


def validation_example(file_path: str | None, benchmark: str, input_column: str = "prompt",
                       output_column: str = "answer", *, root: Path | None = None,
                       at: tuple[str, int] | None = None) -> tuple[str, str]:
    """A validation item's prompt and reference answer (never the test), each clipped at a line: the first
    one, or the one ``at`` names (file, row: the feedback part's, :func:`feedback_example`).

    Returns ``("", "")`` when the validation file or the columns are missing.
    """
    folder = _folder(file_path, benchmark, root)
    if folder is None or (at is not None and at[1] < 0):
        return "", ""
    path = folder / (at[0] if at is not None else "validation.jsonl")
    row_index = at[1] if at is not None else 0
    try:
        with path.open(encoding="utf-8") as fh:
            lines = [line for line in fh if line.strip()]
        row = json.loads(lines[row_index]) if row_index < len(lines) else {}
    except (OSError, ValueError):
        return "", ""
    prompt, answer = str(row.get(input_column) or ""), str(row.get(output_column) or "")
    return _clip_lines(prompt, EXAMPLE_CHARS), _clip_lines(answer, 300)


def space_warning(file_path: str | None, benchmark: str, input_column: str, *, root: Path | None = None) -> str:
    """A warning when the benchmark's items (validation and test, counted, never shown) fill most of a
    templated question space (:func:`ftagent.datasets.makeup.input_space_coverage`), else ""."""
    from ftagent.datasets.makeup import input_space_coverage
    from ftagent.datasets.numeric_scan import COVERAGE_FLAG, MAX_ENUMERABLE

    folder = _folder(file_path, benchmark, root)
    if folder is None:
        return ""
    questions = []
    for path in sorted(folder.glob("**/*.jsonl")):
        if path.stem not in ("validation", "test"):
            continue
        try:
            questions += [str(json.loads(line).get(input_column) or "") for line in path.open(encoding="utf-8")
                          if line.strip()]
        except (OSError, ValueError, AttributeError):
            return ""
    found = input_space_coverage(questions)
    if not found:
        return ""
    top = found[0]
    return (f"The benchmark's own items (validation and test) fill about {top.share:.0%} of the questions of the "
            f"form `{top.template}` ({top.items} of about {top.space} possible; {top.ranges_text()}): "
            "generated training questions of that form would mostly be benchmark items, and one such row "
            "fails the data step (the contamination check), in this wording or any other: the check reads "
            "the template and the numbers, not the words (its checks 4 and 5)"
            + (f"; and data whose texts, worked answers included, answer {COVERAGE_FLAG:.0%} or more of this form's "
               "items fails it as a whole (the input-space check)" if top.space <= MAX_ENUMERABLE else "")
            + ". Train the skill on numbers outside "
            f"those ranges ({top.ranges_text()} are the items' own) or on related tasks, instead of enumerating "
            "this template.")


def _clip_lines(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit("\n", 1)[0]
    return f"{cut}\n[... {len(text) - len(cut):,} more characters]"


def model_origin(name: str) -> str:
    """Whether the base model is pretrained: built-in models are randomly initialised."""
    from ftagent.models.builtin import BUILTIN_MODELS, BUILTIN_PREFIX

    if name.startswith(BUILTIN_PREFIX):
        spec = BUILTIN_MODELS.get(name[len(BUILTIN_PREFIX):])
        what = f" ({spec.description})" if spec is not None else ""
        return ("randomly initialised, built offline by ftagent: it knows nothing before training (no language, "
                f"no arithmetic); everything must be learnt from the training data{what}")
    return "pretrained (a released checkpoint, as its config/README describe it)"




def hardware_words(hardware: Any) -> str:
    """``1 × NVIDIA H200 (140 GiB each)`` or ``CPU only: 2 cores, 24 GiB RAM``."""
    gpus = list(getattr(hardware, "gpus", []) or [])
    if gpus:
        names: dict[str, list[Any]] = {}
        for gpu in gpus:
            names.setdefault(gpu.name, []).append(gpu)
        parts = [f"{len(v)} × {name} ({min(g.memory_total_gb for g in v):.0f} GiB each)" for name, v in names.items()]
        extra = f"; driver {hardware.driver_version}, CUDA {hardware.cuda_version}" if hardware.driver_version else ""
        return " + ".join(parts) + extra
    cores, ram_gib = cpu_facts()
    ram = f", {ram_gib:.0f} GiB RAM" if ram_gib else ""
    return f"CPU only: {cores} cores{ram} (no GPU: training is slow, keep models and data small)"


def cpu_facts() -> tuple[int, float | None]:
    """(usable CPU cores, RAM in GiB) of this machine."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        import psutil

        return cores, psutil.virtual_memory().total / 1024**3
    except ImportError:  # pragma: no cover - psutil is a dependency
        return cores, None


def dir_size(path: str | Path) -> int | None:
    """Bytes of the files under ``path`` (None when it is not a folder)."""
    root = Path(path)
    if not root.is_dir():
        return None
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


# --- facts ------------------------------------------------------------------------------------------
# the memory estimator's methods as LLaMA-Factory configs
METHOD_LABELS = {"full": "`full` + `disable_gradient_checkpointing: true`",
                 "full_gc": "`full` (gradient checkpointing, the default)",
                 "lora": "`lora`", "qlora": "`lora` + `quantization_bit: 4`"}


class MemoryRow(BaseModel):
    method: str
    fits: bool
    launch: str
    static: str
    max_seq: str


_ZERO = {"ds_z2_config.json": "ZeRO-2", "ds_z3_config.json": "ZeRO-3", "ds_z3_offload_config.json": "ZeRO-3 + CPU offload"}


def _launch(m: dict[str, Any], memory: dict[str, Any]) -> str:
    """How the system launches a method (the memory plan's DeepSpeed config, DDP, one GPU, CPU)."""
    ds = m.get("deepspeed")
    if ds:
        return f"{_ZERO.get(ds, 'DeepSpeed')} (`{ds}`)"
    if memory.get("device") == "cpu":
        return "CPU"
    n = int(memory.get("num_gpus") or 1)
    return f"DDP × {n}" if n > 1 else "1 GPU"


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


def _memory_rows(memory: dict[str, Any], context: int | None) -> list[MemoryRow]:
    rows = []
    cpu = memory.get("device") == "cpu"
    for m in memory.get("methods") or []:
        if cpu and m.get("method") == "qlora":
            continue  # bitsandbytes 4-bit needs CUDA: not an option without a GPU
        seq = int(m.get("max_seq_len") or 0)
        if not m.get("fits"):
            max_seq = "does not fit"
        elif context and seq >= context:
            max_seq = f"the whole context ({context:,})"
        else:
            max_seq = f"{seq:,}"
        method = str(m.get("method", "?"))
        rows.append(MemoryRow(method=METHOD_LABELS.get(method, method), fits=bool(m.get("fits")), launch=_launch(m, memory),
                              static=format_gb(float(m.get("static_gb_per_gpu") or 0)), max_seq=max_seq))
    return rows


def constant_baseline_words(file_path: str | None, bench: Any, *, root: Path | None = None,
                            holdout: Any = None) -> str:
    """One line: what the constant answer (chosen on validation's feedback part when ``holdout`` is given)
    scores on the prepared validation split ('' when it cannot be computed: no prepared split, a plug-in
    benchmark, a scorer that fails; a code benchmark's line comes from the session's baseline, which ran it)."""
    if not file_path or bench is None:
        return ""
    from ftagent.benchmarks.baselines import stored_constant_baseline
    from ftagent.core.paths import benchmarks_dir, eval_cache_dir

    try:
        base = stored_constant_baseline(bench, root or benchmarks_dir(file_path), eval_cache_dir(file_path),
                                        holdout=holdout)
    except Exception:  # noqa: BLE001 - a fact of the brief, never a reason to fail the planner
        return ""
    return base.line() if base is not None and base.score is not None else ""


def _per_item_prompt(bench: Any) -> bool:
    """True when the benchmark builds each prompt itself (its YAML shows a note, not a template)."""
    return bool(getattr(getattr(bench, "config", None), "prompt_note", None))


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
    per_item = _per_item_prompt(bench)
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
        max_out_len=_max_out_len(scenario, spec), decoding=decoding_words(scenario.eval_decoding),
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
        memory_rows=_memory_rows(memory, context), memory_device=str(memory.get("device") or ""),
        memory_text=re.sub(r"^#+ .*\n?", "", scenario.memory_report or "", flags=re.MULTILINE).strip(),
        budgets=budgets, data_cap=scenario.upper_data_size_limit, force_think_token=bool(think),
        datasets=list(scenario.datasets), dataset_texts=_dataset_texts(scenario, catalogue),
    )


#: Below this many parameters the brief says that the model learns surface forms (issue 35: a played planner
#: expected a 558K-parameter model trained from scratch to carry one wording over to another).
SMALL_MODEL_PARAMS = 10_000_000
_PLACEHOLDER = re.compile(r"\{[^{}]*\}")


def size_note(num_parameters: int | None) -> str:
    """One factual line for a very small model ("" for a larger or unknown one)."""
    if not num_parameters or num_parameters >= SMALL_MODEL_PARAMS:
        return ""
    return (f"A model this small (under {format_count(SMALL_MODEL_PARAMS)} parameters) learns the exact surface "
            "form of its training rows: expect little transfer between wordings.")


def says_more(prompt: str) -> bool:
    """True when a prompt template holds words besides its placeholders (``{question}`` alone says nothing)."""
    return bool(_PLACEHOLDER.sub("", prompt or "").strip())


def _max_out_len(scenario: ScenarioInfo, spec: Any) -> int | None:
    decoding = scenario.eval_decoding
    if decoding is not None and decoding.max_out_len:
        return decoding.max_out_len
    return spec.max_out_len if spec else None


def decoding_words(decoding: EvalDecoding | None) -> str:
    """How evaluation generates, in one sentence ("" when unknown)."""
    if decoding is None:
        return ""
    how = (f"sampling (temperature {decoding.temperature:g}, top_p {decoding.top_p:g}, top_k {decoding.top_k})"
           if decoding.sampling else "greedy decoding (temperature 0)")
    room = f"; prompt and answer together within {decoding.max_seq_len:,} tokens" if decoding.max_seq_len else ""
    think = "; thinking is enabled in the chat template" if decoding.enable_thinking else ""
    return (f"{how}{room}{think}. The prompt is rendered with the chat template in the trained model's "
            "tokenizer files (written at training time), so evaluation uses the training chat format.")


def render_brief(scenario: ScenarioInfo, *, benchmark: Any, catalogue: dict[str, Any] | None = None,
                 force_think_token: bool | None = None) -> str:
    """The scenario brief as Markdown (``prompts/scenario_brief.j2``).

    Args:
        scenario: the session's scenario (validation facts only).
        benchmark: the resolved benchmark (:attr:`ftagent.finetune.startup.ResolvedRun.adapter`: its
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
