"""What the LLM planner is told about training stages (issue 40): facts, not a script.

* :func:`stages_rule` — the proposal's system prompt: the stages ``FT_STAGES`` enables, each with its
  data, reference model, step cost and where it helps (``configs/stages.yaml``), and how a hypothesis names
  its stage, its start weights and its sampling;
* :func:`stage_line` — one line per experiment in the history: its stage, start weights, chain and what the
  sampling of its start weights found;
* :func:`data_stage_part` — the data coder's section for a non-SFT stage: the row format and the first lines
  of the loop's ``samples.jsonl`` (written by the system before the coder runs);
* :func:`grpo_catalogue` — the config coder's parameter list for GRPO (TRL's GRPOConfig, from the cached
  catalogue) in place of LLaMA-Factory's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ftagent.core.stage_specs import DATA_WORDS, stage_spec
from ftagent.llm.budget import Section
from ftagent.planners.llm.prompting import text_part

SAMPLE_LINES = 6
GRPO_KEYS = ("num_generations", "max_completion_length", "max_prompt_length", "temperature", "top_p", "beta",
             "epsilon", "loss_type", "scale_rewards", "num_iterations", "learning_rate", "lr_scheduler_type",
             "warmup_steps", "per_device_train_batch_size", "gradient_accumulation_steps", "max_steps",
             "num_train_epochs", "logging_steps", "seed", "save_strategy", "save_steps", "use_vllm",
             "vllm_gpu_memory_utilization", "mask_truncated_completions")
GRPO_OWN = ("- finetuning_type (lora|full, default lora), lora_rank, lora_alpha, lora_dropout, lora_target (all or a "
            "comma list): the policy's adapter, as in LLaMA-Factory",
            "- cutoff_len: the prompt's token limit (TRL max_prompt_length when that is not set)",
            "- format_reward_weight (float, default 0): adds a reward of this weight when the benchmark's answer "
            "extractor finds an answer at all (a signal for weights that do not yet answer in the scored form)")


def stages_rule(enabled: list[str]) -> str:
    """The stages a hypothesis may name, their facts, and the fields that name them."""
    if enabled == ["sft"]:
        return "One training stage only: SFT (FT_STAGES=sft)."
    lines = [f"Training stages enabled (FT_STAGES={','.join(enabled)}); each experiment runs one:"]
    lines += [f"  - {stage_spec(name).line()}" for name in enabled]
    lines += [
        '  "stage" names it; "weights_from" is the loop whose trained weights it starts from (a loop that trained '
        "and scored; null: the base model). A LoRA parent is merged into its base first; the LoRA preference and "
        "GRPO runs use those start weights with the adapter disabled as their reference.",
        "  Preference stages and GRPO start with a sampling step the system runs: the start weights answer training "
        "prompts (never benchmark items: those of the SFT rows the start weights were trained on, so they score "
        "higher there than on new prompts; else the latest SFT loop's rows, else the datasets' default conversion) "
        '"samples_per_prompt" times at "temperature" (at most "max_prompts" '
        "prompts; null: 4 / 1.0 / 128), each answer scored by the benchmark's "
        "own evaluator against the training gold; the data script then reads samples.jsonl (prompt, gold, sample, "
        "score) to build this stage's rows. GRPO's reward is that same scorer, run on its own completions.",
    ]
    return "\n".join(lines)


def stage_line(exp: Any) -> str:
    """``- Stage: dpo from loop 2's weights (chain sft → dpo); sampling of them: ...`` ("" for an old SFT loop)."""
    hyp = getattr(exp, "hypothesis", None)
    if hyp is None or (hyp.stage == "sft" and hyp.weights_from is None):
        return ""
    start = f"loop {hyp.weights_from}'s weights" if hyp.weights_from is not None else "the base model"
    line = f"- Stage: {hyp.stage} from {start}"
    sampling = (getattr(exp, "plan", None) or {}).get("sampling")
    if sampling:
        line += (f"; sampling of the start weights: {sampling.get('samples')} answers to {sampling.get('prompts')} "
                 f"training prompts at temperature {sampling.get('temperature')}, {sampling.get('correct')} right, "
                 f"{sampling.get('prompts_mixed')} prompts with right and wrong answers")
    return line


def prompt_mix(rows: list[dict[str, Any]]) -> str:
    """``256 training prompts (175 with right and wrong answers, 8 all right, 73 all wrong)`` (relay round r3: the
    data coder had to count from the file which prompts carry a preference or a reward signal)."""
    scores: dict[str, set[bool]] = {}
    for r in rows:
        scores.setdefault(str(r.get("prompt")), set()).add(float(r.get("score") or 0) >= 1)
    mixed = sum(1 for s in scores.values() if len(s) == 2)
    right = sum(1 for s in scores.values() if s == {True})
    return (f"{len(scores)} training prompts ({mixed} with right and wrong answers, {right} all right, "
            f"{len(scores) - mixed - right} all wrong)")


def data_stage_part(stage: str, workspace: Path | None) -> Section | None:
    """The data coder's section for a non-SFT stage (None for SFT): rows to write, samples to read."""
    spec = stage_spec(stage)
    if stage == "sft":
        return None
    head = ""
    path = Path(workspace) / "samples.jsonl" if workspace is not None else None
    if path is not None and path.is_file():
        lines = path.read_text(encoding="utf-8").splitlines()
        shown = [json.dumps({k: (v[:200] if isinstance(v, str) else v) for k, v in json.loads(ln).items()},
                            ensure_ascii=False) for ln in lines[:SAMPLE_LINES]]
        answers = [json.loads(ln) for ln in lines if ln.strip()]
        right = sum(1 for r in answers if r.get("score", 0) >= 1)
        head = (f"`samples.jsonl` in the working directory holds {len(lines)} answers ({right} scored right) of the "
                f"start weights to {prompt_mix(answers)}, one JSON object a line: prompt (the whole user turn), gold "
                "(the training answer), sample (the model's answer), score (1 right, 0 wrong, by the benchmark's "
                "evaluator). First lines:\n```\n" + "\n".join(shown) + "\n```\n")
    rows = DATA_WORDS[spec.data]
    body = (f"{head}This experiment's stage is `{stage}`: data.json must hold {rows}. Put the prompt in instruction "
            "(input may stay empty). " + {
                "pairwise": "chosen: a right answer (a right sample, else the gold: it is in the benchmark's answer "
                            "format); rejected: a wrong answer to the same prompt; chosen and rejected differ.",
                "kto": "kto_tag true for a right answer (right samples, golds), false for a wrong one; both kinds "
                       "must occur.",
                "alpaca": "output: the gold answer the reward compares each completion with (GRPO samples its "
                          "own answers while training; prompts whose samples were both right and wrong carry the "
                          "signal).",
            }[spec.data])
    return text_part("stage_data", f"Stage {stage}: the rows to write", body, required=True)


def grpo_catalogue(info_dir: str | None) -> str:
    """The keys a GRPO train.yaml may set: TRL's GRPOConfig essentials (from the cached catalogue) and the
    LLaMA-Factory-style model keys the GRPO script reads."""
    params: dict[str, dict[str, Any]] = {}
    if info_dir:
        try:
            data = json.loads((Path(info_dir) / "grpo_parameters.json").read_text(encoding="utf-8"))
            params = {p["name"]: p for p in data.get("parameters", []) if isinstance(p, dict)}
        except (OSError, ValueError):
            params = {}
    lines = ["## GRPO keys (TRL GRPOConfig; any other GRPOConfig field is valid too)"]
    for key in GRPO_KEYS:
        p = params.get(key)
        if p is None:  # an older catalogue without TRL's fields: the names alone
            lines.append(f"- {key}")
            continue
        help_text = " ".join(str(p.get("help", "")).split())[:220]
        lines.append(f"- {key} ({p.get('type', '')}, default={p.get('default')!r}): {help_text}")
    lines += ["## Model keys the GRPO script reads", *GRPO_OWN]
    return "\n".join(lines)
