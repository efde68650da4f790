"""The offline planner's stage policy (issue 40): when to leave SFT for preference optimisation and GRPO.

:func:`choose_stage` reads the trace and ``FT_STAGES``:

* SFT (when enabled) until it plateaus: the last loop was an SFT loop that trained and scored but brought
  no significant gain, while a best loop exists (a model that already answers something).
* After a plateau: the first enabled preference stage (dpo, kto, orpo, simpo in that order) not yet run
  from the best loop's weights — it starts from them, with pairs built from their own samples.
* Then GRPO from the best loop's weights, unless the last sampling of those weights found no right answer
  at all (every reward 0: GRPO would learn nothing); with no sampling of them yet, GRPO's own sampling step
  measures it.
* When every enabled stage has been run from the current best weights, SFT again (its recipe policy).
* Without SFT in ``FT_STAGES``: the first enabled stage from the base model, then from the best loop.

The reason is written into the hypothesis. The recipes of the non-SFT stages are sized like the SFT probe
(:func:`stage_recipe`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ftagent.core.stage_specs import stage_spec
from ftagent.core.trace import Experiment, Trace
from ftagent.core.types import SamplingPlan, ScenarioInfo

PREFERENCE_ORDER = ("dpo", "kto", "orpo", "simpo")
TINY_SAMPLING = SamplingPlan(samples_per_prompt=4, temperature=1.0, max_prompts=128)
TINY_STEPS = {"grpo": 60}  # optimizer steps of a tiny model's GRPO run (tests shorten them)
# epochs over a preference stage's pairs: its rows are known only after sampling, so the length is in epochs.
# Measured on the demo (tiny-qwen2 at 97.5 % validation, 137 pairs from its own samples): 100 steps (12 epochs)
# of DPO without an SFT term fell to 47.5 % (-50 [-65, -32.5]); 2 epochs with pref_ftx 1.0 kept 97.5 % at lr 5e-5
# and 1e-4, without the SFT term 92.5 % (-5 [-12.5, 0]).
PREFERENCE_EPOCHS = 2.0
SAMPLING = SamplingPlan(samples_per_prompt=4, temperature=0.8, max_prompts=256)


class StageChoice(BaseModel):
    """The stage of the next loop, the loop whose weights it starts from, and why."""

    stage: str
    weights_from: int | None = None
    reason: str = ""


def _stage(exp: Experiment | None) -> str:
    return exp.hypothesis.stage if exp is not None and exp.hypothesis is not None else "sft"


def _tried(trace: Trace, stage: str, weights_from: int | None) -> bool:
    return any(_stage(e) == stage and e.hypothesis is not None and e.hypothesis.weights_from == weights_from
               for e in trace.experiments)


def sampled_correct(trace: Trace, loop: int | None) -> int | None:
    """Right answers in the latest sampling of ``loop``'s weights (None: never sampled)."""
    for exp in reversed(trace.experiments):
        sampling = exp.plan.get("sampling") if exp.hypothesis is not None else None
        if sampling and exp.hypothesis is not None and exp.hypothesis.weights_from == loop:
            return int(sampling.get("correct", 0))
    return None


def _plateau(trace: Trace) -> Experiment | None:
    """The last loop, when it is a scored SFT loop without a significant gain while a best loop exists."""
    last = trace.experiments[-1] if trace.experiments else None
    if last is None or _stage(last) != "sft" or not last.succeeded or last.decision or trace.sota() is None:
        return None
    return last


def choose_stage(trace: Trace, enabled: list[str]) -> StageChoice:
    """The next loop's stage (see the module docstring)."""
    sota = trace.sota()
    if "sft" not in enabled:
        return _without_sft(trace, enabled, sota)
    plateau = _plateau(trace)
    last_stage = _stage(trace.experiments[-1]) if trace.experiments else "sft"
    if plateau is None and last_stage == "sft":
        return StageChoice(stage="sft")
    assert sota is not None or last_stage != "sft"
    start = sota.loop if sota is not None else None
    why = (f"Loop {plateau.loop} (SFT) brought no significant gain over the best loop {start}: SFT has plateaued."
           if plateau is not None else f"Loop {trace.experiments[-1].loop} ran stage {last_stage}.")
    after_sft = _stage(sota) == "sft"  # chains run SFT -> preference -> GRPO: no preference on preference weights
    for stage in PREFERENCE_ORDER:
        if stage in enabled and start is not None and after_sft and not _tried(trace, stage, start):
            return StageChoice(stage=stage, weights_from=start, reason=(
                f"{why} {stage.upper()} from loop {start}'s weights, on pairs of its own right and wrong answers "
                "to training prompts (the training gold where it answers none right), can move probability from "
                "its typical mistakes to right answers."))
    if "grpo" in enabled and start is not None and _stage(sota) != "grpo" and not _tried(trace, "grpo", start):
        right = sampled_correct(trace, start)
        if right != 0:
            seen = f"its last sampling answered {right} training prompts right" if right else "GRPO samples it first"
            return StageChoice(stage="grpo", weights_from=start, reason=(
                f"{why} GRPO from loop {start}'s weights ({seen}): the benchmark's own scorer rewards its right "
                "answers against the training golds."))
        why += f" GRPO from loop {start} is not tried: its sampling found no right answer (every reward 0)."
    return StageChoice(stage="sft", reason=f"{why} Every enabled stage has been tried from the best weights: back to SFT.")


def sft_view(trace: Trace) -> tuple[Experiment | None, Experiment | None]:
    """(the best SFT loop, the last SFT loop): what the SFT recipe policy reads, other stages left out."""
    sft = [e for e in trace.experiments if _stage(e) == "sft"]
    sota = trace.sota()
    if _stage(sota) != "sft":
        sota = next((e for e in reversed(sft) if e.decision), None)
    return sota, (sft[-1] if sft else None)


def _without_sft(trace: Trace, enabled: list[str], sota: Experiment | None) -> StageChoice:
    start = sota.loop if sota is not None else None
    for stage in enabled:
        if not _tried(trace, stage, start):
            where = f"loop {start}'s weights (the best)" if start is not None else "the base model"
            return StageChoice(stage=stage, weights_from=start,
                               reason=f"FT_STAGES={','.join(enabled)} (no SFT): {stage} from {where}.")
    return StageChoice(stage=enabled[0], weights_from=start,
                       reason=f"FT_STAGES={','.join(enabled)}: every stage was tried from these weights; "
                              f"{enabled[0]} again.")


def stage_recipe(stage: str, base: dict[str, Any], scenario: ScenarioInfo, *, tiny: bool,
                 right_answers: int | None) -> dict[str, Any]:
    """The recipe of a non-SFT stage, from the SFT recipe ``base`` (method, cutoff, seed kept)."""
    spec = stage_spec(stage)
    recipe: dict[str, Any] = {k: base[k] for k in ("finetuning_type", "cutoff_len", "seed", "lora_rank", "lora_alpha",
                                                    "lora_target") if k in base}
    recipe.update(lr_scheduler_type="cosine", warmup_steps=5)
    if spec.trainer == "trl":  # GRPO: LoRA by default (issue 40), groups of 4 answers, two prompts per step
        recipe.update(finetuning_type="lora", lora_rank=16, lora_alpha=32, lora_target="all",
                      learning_rate=2e-4 if tiny else 1e-5, num_generations=4, per_device_train_batch_size=8,
                      gradient_accumulation_steps=1, max_steps=TINY_STEPS["grpo"] if tiny else 200, beta=0.04, temperature=1.0,
                      max_completion_length=_completion_len(scenario), logging_steps=5,
                      format_reward_weight=0.0 if right_answers else 0.2)
        return recipe
    full = recipe.get("finetuning_type") == "full"
    recipe.update(learning_rate=1e-4 if tiny else (5e-7 if full else 5e-6), pref_beta=0.1,
                  per_device_train_batch_size=16 if tiny else 1, gradient_accumulation_steps=1 if tiny else 8,
                  max_steps=None, num_train_epochs=PREFERENCE_EPOCHS, logging_steps=1 if tiny else 5)
    if stage == "dpo":
        recipe["pref_loss"] = "sigmoid"
    if stage in ("dpo", "simpo", "kto"):  # an SFT term on the chosen answers keeps the start weights' skill
        recipe["pref_ftx"] = 1.0
    return recipe


def _completion_len(scenario: ScenarioInfo) -> int:
    """New tokens of a GRPO completion: the evaluation's answer cap (what the model may write when scored)."""
    decoding = scenario.eval_decoding
    cap = decoding.max_out_len if decoding is not None and decoding.max_out_len else 256
    return int(min(cap, 1024))


def sampling_plan(tiny: bool) -> SamplingPlan:
    """How many answers per training prompt the sampling step draws, and how hot."""
    return TINY_SAMPLING if tiny else SAMPLING
