"""The training stages a loop can run (issue 40): SFT, the preference stages, GRPO.

The facts are data (``configs/stages.yaml``): which trainer runs a stage (LLaMA-Factory's ``stage:`` or
TRL's GRPOTrainer), its data format, whether the system samples the start model first, the reference
model it keeps, its step cost. ``FT_STAGES`` enables a subset (:func:`parse_stages`); a hypothesis names
one of them (:attr:`ftagent.core.types.Hypothesis.stage`) and the loop whose weights it starts from
(``weights_from``), so stages chain: SFT → DPO → GRPO.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any, Literal

import yaml
from pydantic import BaseModel

from ftagent.core.paths import config_file
from ftagent.core.registry import did_you_mean

StageName = Literal["sft", "dpo", "kto", "orpo", "simpo", "grpo"]
STAGE_NAMES: tuple[str, ...] = ("sft", "dpo", "kto", "orpo", "simpo", "grpo")
DEFAULT_STAGES: tuple[str, ...] = ("sft", "dpo", "grpo")
DataFormat = Literal["alpaca", "pairwise", "kto"]


class StageSpec(BaseModel):
    """One stage's facts (``configs/stages.yaml``)."""

    name: str
    trainer: Literal["llamafactory", "trl"]
    lf_stage: str | None = None  # LLaMA-Factory's `stage:` (None: not a LLaMA-Factory stage)
    pref_loss: str | None = None  # the pref_loss the stage forces (orpo, simpo), None: free or not used
    data: DataFormat
    needs_samples: bool
    reference: str
    step_cost: float
    summary: str
    helps: str

    @property
    def preference(self) -> bool:
        """Trains on preferences (pairs or tagged answers) built from samples."""
        return self.data in ("pairwise", "kto")

    def line(self) -> str:
        """One line for prompts and docs: the stage, what it trains on, its reference and cost."""
        return (f"`{self.name}` — {self.summary}; data: {DATA_WORDS[self.data]}; reference model: {self.reference}; "
                f"step time ≈ {self.step_cost:g}× an SFT step. When it helps: {self.helps}")


DATA_WORDS: dict[str, str] = {
    "alpaca": "Alpaca rows {instruction, input, output}",
    "pairwise": "pairs {instruction, input, chosen, rejected} (the system registers them with ranking: true)",
    "kto": "rows {instruction, input, output, kto_tag: true|false} (true = a desirable answer)",
}


@lru_cache(maxsize=1)
def stage_specs() -> dict[str, StageSpec]:
    """Every stage's facts, from ``configs/stages.yaml`` (read once)."""
    raw = yaml.safe_load(config_file("stages.yaml").read_text(encoding="utf-8")) or {}
    specs = {name: StageSpec(name=name, **facts) for name, facts in raw.items()}
    if tuple(specs) != STAGE_NAMES:
        raise ValueError(f"configs/stages.yaml names {tuple(specs)}, the code knows {STAGE_NAMES}")
    return specs


def stage_spec(name: str) -> StageSpec:
    """The facts of stage ``name``.

    Raises:
        ValueError: an unknown stage, with a did-you-mean.
    """
    specs = stage_specs()
    if name not in specs:
        raise ValueError(f"unknown training stage '{name}' (stages: {', '.join(STAGE_NAMES)})."
                         + did_you_mean(name, STAGE_NAMES))
    return specs[name]


def parse_stages(value: str | list[str] | tuple[str, ...]) -> list[str]:
    """``FT_STAGES`` as a list of known stage names (comma-separated text or a list), order kept.

    Raises:
        ValueError: empty, or an unknown name (with a did-you-mean).
    """
    names = [v.strip().lower() for v in (value.split(",") if isinstance(value, str) else value) if str(v).strip()]
    if not names:
        raise ValueError(f"no training stage given (stages: {', '.join(STAGE_NAMES)})")
    for name in names:
        stage_spec(name)
    return list(dict.fromkeys(names))


def weights_chain(trace: Any, loop: int | None) -> list[str]:
    """The stages that made the weights of ``loop`` (base model first: ``[]``; SFT then DPO: ``["sft", "dpo"]``).

    ``trace``: anything with ``get(loop)`` returning an experiment (``core.trace.Trace``, a planner's view).
    Follows each experiment's ``hypothesis.weights_from`` back to the base model (a cycle or an unknown
    loop ends the walk).
    """
    get: Callable[[int], Any] = trace.get
    chain: list[str] = []
    seen: set[int] = set()
    while loop is not None and loop not in seen:
        seen.add(loop)
        exp = get(loop)
        if exp is None or exp.hypothesis is None:
            break
        chain.append(exp.hypothesis.stage)
        loop = exp.hypothesis.weights_from
    return chain[::-1]
