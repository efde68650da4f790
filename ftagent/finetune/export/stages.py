"""The stage chain of an exported model (issue 40): each stage that made its weights, for the card and
``reproduce/``.

A model trained by DPO from an SFT loop's weights is the product of two runs; ``reproduce/`` then holds
one folder per step (``1_sft_loop0/``, ``2_dpo_loop2/`` ...) with its data script, its portable
``train.yaml`` (``model_name_or_path`` = the previous step's weights), the ``samples.jsonl`` a preference or
GRPO step built its rows from (the sampling step needs ftagent: the samples are shipped), and ``run.sh``
runs them in order, merging a LoRA step into its base before the next one starts (as ftagent does).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field

from ftagent.core.stage_specs import stage_spec
from ftagent.core.trace import Trace

STEP_FILES = ("process_data.py", "dataset_info.json", "samples.jsonl")


class StageStep(BaseModel):
    """One run of the weights' chain (oldest first)."""

    loop: int
    stage: str
    finetuning_type: str = "full"
    workspace: str = ""
    config: dict[str, Any] = Field(default_factory=dict)
    sampling: dict[str, Any] | None = None  # the sampling step's counts (preference, GRPO)
    reward: dict[str, Any] | None = None  # GRPO: the benchmark's scorer the system passed (RewardSpec)

    @property
    def folder(self) -> str:
        return f"{self.loop}_{self.stage}"

    @property
    def is_lora(self) -> bool:
        return self.finetuning_type == "lora"


def stage_steps(trace: Trace, loop: int) -> list[StageStep]:
    """The runs that made loop ``loop``'s weights, following ``weights_from`` to the base model."""
    steps: list[StageStep] = []
    seen: set[int] = set()
    current: int | None = loop
    while current is not None and current not in seen:
        seen.add(current)
        exp = trace.get(current)
        if exp is None:
            break
        hyp = exp.hypothesis
        steps.append(StageStep(loop=exp.loop, stage=hyp.stage if hyp else "sft",
                               finetuning_type=str(exp.config.get("finetuning_type") or "full"),
                               workspace=exp.artefacts.get("workspace", ""), config=dict(exp.config),
                               sampling=exp.plan.get("sampling"), reward=exp.plan.get("reward")))
        current = hyp.weights_from if hyp is not None else None
    return steps[::-1]


def chain_words(steps: list[StageStep]) -> str:
    """``sft (loop 0) → dpo (loop 2)``."""
    return " → ".join(f"{s.stage} (loop {s.loop})" for s in steps)


def write_chain(steps: list[StageStep], target: Path, start: str, portable: Any) -> list[str]:
    """One folder per step under ``target`` (``reproduce/``) and the commands that run them in order.

    ``start``: the base model's ``model_name_or_path`` seen from inside a step's folder (a Hub id, or
    ``../base_model``); ``portable(config, model)``: the host-free config with ``model_name_or_path = model``
    (:func:`ftagent.finetune.export.reproduce.portable_config`). Returns the commands for ``run.sh``.
    """
    commands: list[str] = []
    for i, step in enumerate(steps, 1):
        folder = target / f"{i}_{step.folder}"
        folder.mkdir(parents=True)
        for name in STEP_FILES:
            src = Path(step.workspace) / name
            if step.workspace and src.is_file():
                shutil.copy2(src, folder / name)
        config, _ = portable(step.config, start)
        (folder / "train.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        spec = stage_spec(step.stage)
        commands.append(f"# step {i}: {step.stage} (loop {step.loop}), from {start}")
        commands.append(f"(cd {folder.name} && python process_data.py)"
                        + ("  # reads samples.jsonl, written by ftagent's sampling step" if spec.needs_samples else ""))
        if spec.trainer == "trl":
            write_reward(folder, step.reward)
            commands.append(f"(cd {folder.name} && FT_GRPO_REWARD=\"$(cat reward.json)\" PYTHONPATH=\"$FTAGENT_ROOT\" "
                            "python \"$FTAGENT_ROOT/ftagent/tools/trl/grpo_script.py\" train.yaml)"
                            "  # TRL GRPO; the reward is the benchmark's scorer in ftagent's package (FTAGENT_ROOT)")
        else:
            commands.append(f"(cd {folder.name} && llamafactory-cli train train.yaml)")
        out = "output"
        if step.is_lora:
            merge = {"model_name_or_path": start, "adapter_name_or_path": "output",
                     "template": step.config.get("template"), "finetuning_type": "lora", "export_dir": "merged"}
            (folder / "merge.yaml").write_text(yaml.safe_dump(merge, sort_keys=False), encoding="utf-8")
            commands.append(f"(cd {folder.name} && llamafactory-cli export merge.yaml)  # the LoRA merged: merged/")
            out = "merged"
        start = f"../{folder.name}/{out}"
    return commands


def write_reward(step_dir: Path, reward: dict[str, Any] | None) -> None:
    """The GRPO step's reward spec, as the system passed it (``FT_GRPO_REWARD``)."""
    if reward is not None:
        (step_dir / "reward.json").write_text(json.dumps(reward, indent=1), encoding="utf-8")
