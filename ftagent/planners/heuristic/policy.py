"""The offline planner's policy: the next training recipe from the trace, without any LLM.

1. **First loop** — a recipe from the memory estimate: full fine-tuning when it fits, else LoRA;
   learning rate by model size; a short "probe" run (``PROBE_STEPS`` for tiny models, one epoch
   otherwise). Data comes from the selected datasets' default Alpaca converters.
2. **After a failure** of the parent recipe — OOM: switch full → LoRA, halve the batch and the
   cutoff; TIMEOUT: halve the steps; anything else: back to the SOTA recipe with half the lr.
3. **After a success** with a low training loss and a zero score: the answers are not in the format the
   benchmark scores (issue 35: loss 0.046, every answer unboxed, diagnosed "under-trained"); the data
   is written again in the benchmark's format (not when the data step already wrote the gold's form:
   the loss curve decides then). Otherwise, reading the parent's loss curve — still falling at the end: train twice as
   long (under-trained); flat and high: halve the lr (a too-high lr stalls small models silently);
   near-zero loss but not better than the SOTA (memorisation): switch full ↔ LoRA; a plateau at a
   moderate loss (or no better score): train twice as long; a low loss and a new best: 1.5× the steps.
   Data processing is reused (``skip_data_processing``) whenever the data recipe is unchanged.
"""

from __future__ import annotations

from typing import Any

from ftagent.core.errors import StepFailure
from ftagent.core.trace import Experiment
from ftagent.core.types import ScenarioInfo

TINY_PARAMS = 50_000_000
PROBE_STEPS = 300
MAX_STEPS_CAP = 4000
MEMORISED_LOSS = 0.05  # per-token training loss below which we assume memorisation
PLATEAU_LOSS = 0.1  # a converged loss above this is a plateau, not a fit
FORMAT_HYPOTHESIS = ("The answers are not in the format the benchmark scores (a low training loss with a zero "
                     "score): write the training answers in the benchmark's answer format, then train the same "
                     "recipe.")


def _params(scenario: ScenarioInfo) -> int:
    return int(scenario.model_info.num_parameters or 0)


def is_tiny(scenario: ScenarioInfo) -> bool:
    n = _params(scenario)
    return 0 < n < TINY_PARAMS


def _full_fits(scenario: ScenarioInfo) -> bool:
    """Whether the full fine-tune this planner writes fits: on GPU that is the plan's ``full_gc``
    (LLaMA-Factory's default gradient checkpointing), launched as the plan says (ZeRO-3 over several
    GPUs); a plan that needs CPU offload counts as not fitting (too slow: LoRA instead)."""
    methods = {m.get("method"): m for m in scenario.memory.get("methods") or []}
    full = methods.get("full_gc") or methods.get("full") or {}
    if "fits" in full:
        return bool(full["fits"]) and not full.get("offload")
    return is_tiny(scenario)


def base_recipe(scenario: ScenarioInfo) -> dict[str, Any]:
    """The first loop's training recipe (a plan dict that the coder turns into train.yaml)."""
    tiny = is_tiny(scenario)
    full = _full_fits(scenario)
    recipe: dict[str, Any] = {
        "finetuning_type": "full" if full else "lora",
        "learning_rate": 1e-3 if tiny else (1e-5 if full else 2e-4),
        "per_device_train_batch_size": 32 if tiny else 2,
        "gradient_accumulation_steps": 1 if tiny else 8,
        "cutoff_len": 64 if tiny else 2048,
        "max_steps": PROBE_STEPS if tiny else None,
        "num_train_epochs": None if tiny else 1.0,
        "lr_scheduler_type": "cosine",
        "warmup_steps": 50 if tiny else 10,
        "seed": 2,
    }
    if recipe["finetuning_type"] == "lora":
        recipe.update(lora_rank=16, lora_alpha=32, lora_target="all")
    return recipe


def loss_trend(history: list[dict[str, Any]]) -> str:
    """'falling', 'plateau_high', 'converged' or 'unknown' from a loss history."""
    losses = [float(p["loss"]) for p in history if p.get("loss") is not None]
    if len(losses) < 5:
        return "unknown"
    k = max(1, len(losses) // 5)
    last, before, first = sum(losses[-k:]) / k, sum(losses[-2 * k:-k]) / k, losses[0]
    if last < 0.9 * before:
        return "falling"
    if first > 0 and last > 0.5 * first:
        return "plateau_high"
    return "converged"


def final_loss(history: list[dict[str, Any]]) -> float:
    """Mean of the last few logged losses (inf when there are none)."""
    losses = [float(p["loss"]) for p in history if p.get("loss") is not None]
    return sum(losses[-3:]) / len(losses[-3:]) if losses else float("inf")


def scaled_steps(recipe: dict[str, Any], factor: float) -> dict[str, Any]:
    out = dict(recipe)
    if out.get("max_steps"):
        out["max_steps"] = int(min(MAX_STEPS_CAP, max(10, round(out["max_steps"] * factor))))
    else:
        out["num_train_epochs"] = round(min(10.0, (out.get("num_train_epochs") or 1.0) * factor), 2)
    return out


def toggle_method(recipe: dict[str, Any], scenario: ScenarioInfo) -> dict[str, Any] | None:
    out = dict(recipe)
    if recipe["finetuning_type"] == "full":
        out.update(finetuning_type="lora", lora_rank=16, lora_alpha=32, lora_target="all",
                   learning_rate=min(2e-3, recipe["learning_rate"] * 2))
        return out
    if _full_fits(scenario):
        for key in ("lora_rank", "lora_alpha", "lora_target"):
            out.pop(key, None)
        out.update(finetuning_type="full", learning_rate=recipe["learning_rate"] / 2)
        return out
    return None


def next_recipe(parent: Experiment | None, sota: Experiment | None, last: Experiment | None,
                scenario: ScenarioInfo) -> tuple[dict[str, Any], str, str]:
    """Choose the next recipe. Returns (recipe, reason, hypothesis)."""
    if last is None:
        recipe = base_recipe(scenario)
        return (recipe, "No experiment yet: start from a recipe sized by the memory estimate.",
                f"A short {recipe['finetuning_type']} probe run teaches the answer format and gives a "
                "loss curve to plan from.")
    base = dict((sota or last).plan.get("recipe") or base_recipe(scenario))
    if last.failure is not None:
        prev = dict(last.plan.get("recipe") or base)
        kind = last.failure.error_type.value
        if kind == "OOM":
            toggled = toggle_method(prev, scenario) if prev["finetuning_type"] == "full" else None
            recipe = toggled or dict(prev)
            recipe["per_device_train_batch_size"] = max(1, prev["per_device_train_batch_size"] // 2)
            recipe["gradient_accumulation_steps"] = prev.get("gradient_accumulation_steps", 1) * 2
            recipe["cutoff_len"] = max(32, prev["cutoff_len"] // 2)
            return recipe, f"Loop {last.loop} ran out of memory.", "Lower memory use: LoRA, smaller batch and cutoff."
        if kind == "TIMEOUT":
            return (scaled_steps(prev, 0.5), f"Loop {last.loop} ran out of time.",
                    "Half the training length finishes within the budget.")
        recipe = dict(base)
        recipe["learning_rate"] = base["learning_rate"] / 2
        return (recipe, f"Loop {last.loop} failed ({kind}): {last.failure.message[:200]}",
                "Return to the best known recipe with a more conservative learning rate.")
    ref = parent or last
    prev = dict(ref.plan.get("recipe") or base)
    trend = loss_trend(ref.loss_history)
    improved = sota is not None and sota.loop == ref.loop
    if format_problem(last):
        return (dict(last.plan.get("recipe") or prev),
                f"Loop {last.loop} reached a training loss of {final_loss(last.loss_history):.3g} but scored 0: the "
                "model learnt its data, and the benchmark found no answer in its outputs.", FORMAT_HYPOTHESIS)
    if trend == "falling":
        return (scaled_steps(prev, 2.0), f"Loop {ref.loop}: the training loss was still falling at the end.",
                "The model is under-trained: twice the steps should raise the validation score.")
    if trend == "plateau_high":
        recipe = dict(prev)
        recipe["learning_rate"] = prev["learning_rate"] / 2
        return (recipe, f"Loop {ref.loop}: the loss flattened while still high.",
                "The learning rate is too high for this model: halve it.")
    if not improved and final_loss(ref.loss_history) < MEMORISED_LOSS:
        toggled = toggle_method(prev, scenario)
        if toggled is not None:
            return (toggled, f"Loop {ref.loop} drove the training loss to ~0 without beating the best score.",
                    f"The model memorises the data: switch to {toggled['finetuning_type']} fine-tuning.")
    if final_loss(ref.loss_history) > PLATEAU_LOSS or not improved:
        return (scaled_steps(prev, 2.0), f"Loop {ref.loop} plateaued at a moderate training loss.",
                "The answer format is learnt but not the task yet: train twice as long (small models often "
                "improve suddenly after such a plateau).")
    recipe = scaled_steps(prev, 1.5)
    recipe["learning_rate"] = prev["learning_rate"] / 2 if not improved else prev["learning_rate"]
    return (recipe, f"Loop {ref.loop} converged (score {ref.val_score}).",
            "Train longer to consolidate the gains.")


def format_problem(exp: Experiment | None) -> bool:
    """A low training loss (below PLATEAU_LOSS) and a zero validation score: the data was learnt, its
    answers are not what the benchmark extracts (missing ``\\boxed{}``, prose around the answer ...).
    Not when the data step already wrote every answer in the gold's form (``data_in_gold_form``): writing
    the same data again would change nothing, so the loss curve decides."""
    return (exp is not None and exp.failure is None and exp.val_score is not None and abs(exp.val_score) < 1e-9
            and bool(exp.loss_history) and final_loss(exp.loss_history) < PLATEAU_LOSS
            and not exp.plan.get("data_in_gold_form"))


def conservative(recipe: dict[str, Any], failure: StepFailure) -> dict[str, Any]:
    out = dict(recipe)
    if failure.error_type.value == "OOM":
        out["per_device_train_batch_size"] = max(1, recipe["per_device_train_batch_size"] // 2)
        out["cutoff_len"] = max(32, recipe["cutoff_len"] // 2)
    else:
        out["learning_rate"] = recipe["learning_rate"] / 2
    return out
