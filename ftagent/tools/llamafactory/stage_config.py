"""What a training stage changes in a LLaMA-Factory config (issue 40): the keys it forces, the keys it reads.

The hypothesis names the stage (:mod:`ftagent.core.stage_specs`); the planner's ``train.yaml`` never decides it.
:func:`stage_forced` gives the keys the system sets for it (LLaMA-Factory's ``stage:``, the ``pref_loss`` of
ORPO and SimPO); :func:`filter_stage_keys` drops the arguments of LLaMA-Factory's ``RLHFArguments`` class that
the stage's trainer does not read, with the reason, so a DPO key in an SFT config (or a KTO weight in a
DPO config) is reported instead of silently ignored. Which class a key belongs to comes from LLaMA-Factory's
own catalogue (:class:`~ftagent.tools.llamafactory.catalogue.LFParam.group`).
"""

from __future__ import annotations

from typing import Any

from ftagent.core.stage_specs import StageSpec
from ftagent.tools.llamafactory.catalogue import LFCatalogue
from ftagent.tools.llamafactory.config import DroppedKey

RLHF_GROUP = "RLHFArguments"  # llamafactory/hparams/finetuning_args.py (0.9.5)
# RLHFArguments the stage's trainer reads, llamafactory 0.9.5: train/dpo/trainer.py CustomDPOTrainer.__init__
# (pref_beta, pref_loss, pref_ftx, pref_bco_weight, dpo_label_smoothing, simpo_gamma, ld_alpha) and
# train/kto/trainer.py CustomKTOTrainer.__init__ (pref_beta, kto_chosen_weight, kto_rejected_weight, pref_ftx).
# ORPO and SimPO are the DPO trainer with a forced pref_loss: dpo_label_smoothing is sigmoid-only
# (FinetuningArguments.__post_init__ refuses it with another loss).
STAGE_KEYS: dict[str, frozenset[str]] = {
    "sft": frozenset(),
    "dpo": frozenset({"pref_beta", "pref_loss", "pref_ftx", "pref_bco_weight", "dpo_label_smoothing", "ld_alpha"}),
    "orpo": frozenset({"pref_beta", "pref_ftx"}),
    "simpo": frozenset({"pref_beta", "pref_ftx", "simpo_gamma"}),
    "kto": frozenset({"pref_beta", "pref_ftx", "kto_chosen_weight", "kto_rejected_weight"}),
}
# set by the system (the reference is the start model: LoRA disables the adapter, full loads a copy)
MANAGED_RLHF = frozenset({"ref_model", "ref_model_adapters", "ref_model_quantization_bit"})
DPO_LOSSES = ("sigmoid", "hinge", "ipo", "kto_pair")  # the pref_loss values of the `dpo` stage itself


def stage_forced(stage: StageSpec) -> dict[str, Any]:
    """The keys the system sets for ``stage`` in every LLaMA-Factory run (its ``stage:``, a forced pref_loss)."""
    if stage.lf_stage is None:
        raise ValueError(f"stage {stage.name} is not a LLaMA-Factory stage")
    forced: dict[str, Any] = {"stage": stage.lf_stage}
    if stage.pref_loss:
        forced["pref_loss"] = stage.pref_loss
    return forced


def filter_stage_keys(config: dict[str, Any], stage: StageSpec,
                      catalogue: LFCatalogue) -> tuple[dict[str, Any], list[DroppedKey]]:
    """Drop the RLHF arguments ``stage`` does not read, and a pref_loss that belongs to another stage.

    Returns ``(kept, dropped)``; ``stage`` and the reference-model keys are the system's (dropped here,
    :func:`stage_forced` sets the stage).
    """
    wanted = STAGE_KEYS.get(stage.name, frozenset())
    kept: dict[str, Any] = {}
    dropped: list[DroppedKey] = []
    for key, value in config.items():
        param = catalogue.parameters.get(key)
        if key == "stage":
            if str(value).strip().lower() != str(stage.lf_stage):
                dropped.append(DroppedKey(key=key, reason=f"the hypothesis's stage is {stage.name} (set by the system)"))
            continue
        if key == "pref_loss" and stage.pref_loss:
            dropped.append(DroppedKey(key=key, reason=f"set by the system: stage {stage.name} is pref_loss {stage.pref_loss}"))
            continue
        if param is not None and param.group == RLHF_GROUP and key not in wanted:
            reason = ("set by the system: the reference is the start model" if key in MANAGED_RLHF
                      else f"not read by stage {stage.name}" + (f" (only by {', '.join(_readers(key))})"
                                                              if _readers(key) else ""))
            dropped.append(DroppedKey(key=key, reason=reason))
            continue
        if key == "pref_loss" and stage.name == "dpo" and str(value) not in DPO_LOSSES:
            dropped.append(DroppedKey(key=key, reason=f"{value} is its own stage here (FT_STAGES), the dpo stage "
                                                      f"takes one of {', '.join(DPO_LOSSES)}"))
            continue
        kept[key] = value
    return kept, dropped


def _readers(key: str) -> list[str]:
    return [name for name, keys in STAGE_KEYS.items() if key in keys]
