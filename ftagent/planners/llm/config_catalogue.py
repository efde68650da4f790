"""LLaMA-Factory's parameter catalogue as the config prompt shows it: the scenario's rendered catalogue, without
the entries that cannot apply to this run (GPU-only arguments on a CPU run, the methods the experiment does not
use, other stages' arguments), with the keys the system sets in every run split off and shown up front."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ftagent.core.stage_specs import StageSpec
    from ftagent.core.types import Hypothesis, ScenarioInfo


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


_STAGE_ENTRY = re.compile(r"`stage` \([^)]*\)")


def stage_managed_words(managed: str, stage: StageSpec) -> str:
    """The managed line's `stage` entry as this experiment's own stage (and the pref_loss it forces), the words
    of ``tools.llamafactory.stage_config.stage_forced``; a session stored before relay round r2 listed every
    stage LLaMA-Factory has there ("sft, dpo, kto; orpo and simpo") whatever FT_STAGES enabled."""
    if stage.lf_stage is None:  # GRPO: TRL's run, whose managed line is its own
        return managed
    forced = f"`stage: {stage.lf_stage}`" + (f", `pref_loss: {stage.pref_loss}`" if stage.pref_loss else "")
    return _STAGE_ENTRY.sub(lambda _: f"{forced} (this experiment's stage, {stage.name})", managed, count=1)


def without_topic(text: str, heading: str) -> str:
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


def managed_names(line: str) -> set[str]:
    """The key names of a system-managed keys line (:func:`split_managed`'s first part)."""
    return set(_MANAGED_KEY.findall(line))


def managed_key_names(scenario: ScenarioInfo) -> set[str]:
    """The keys the config prompt lists as set by the system on this run's hardware (its managed line)."""
    return managed_names(split_managed(parameter_catalogue(scenario))[0])
