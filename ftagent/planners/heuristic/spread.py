"""K proposals at once for the offline planner (issue 41): the policy's next recipe, then variants of it.

With K trials at once the heuristic policy (:mod:`.planner`) still picks one next recipe from the trace;
the other trials of the round run variants of it, each one change away, so the round spreads over the
directions the policy is least sure of: the learning rate halved and doubled, the training length
doubled and halved, full ↔ LoRA (when the other method fits), then a quarter and four times the
learning rate and three times the length. A variant that equals a running trial's recipe is skipped.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ftagent.core.types import Hypothesis, ScenarioInfo

Recipe = dict[str, Any]

VARIANTS: tuple[tuple[str, float], ...] = (
    ("learning_rate", 0.5), ("learning_rate", 2.0), ("steps", 2.0), ("steps", 0.5), ("method", 0.0),
    ("learning_rate", 0.25), ("learning_rate", 4.0), ("steps", 3.0),
)


def _variant(recipe: Recipe, kind: str, factor: float, *, scale: Callable[[Recipe, float], Recipe],
             toggle: Callable[[Recipe], Recipe | None]) -> tuple[Recipe, str] | None:
    if kind == "learning_rate":
        out = dict(recipe, learning_rate=float(f"{recipe['learning_rate'] * factor:.3g}"))
        return out, f"learning rate {'×' if factor >= 1 else '÷'}{factor if factor >= 1 else 1 / factor:g} ({out['learning_rate']:g})"
    if kind == "steps":
        out = scale(recipe, factor)
        length = f"{out['max_steps']} steps" if out.get("max_steps") else f"{out.get('num_train_epochs')} epochs"
        return out, f"training length ×{factor:g} ({length})"
    toggled = toggle(recipe)
    return (toggled, f"{toggled['finetuning_type']} fine-tuning instead") if toggled is not None else None


def key(h: Hypothesis) -> str:
    return json.dumps(h.plan.get("recipe") or {}, sort_keys=True)


def spread(base: Hypothesis, n: int, running: list[Hypothesis], scenario: ScenarioInfo, *,
           scale: Callable[[Recipe, float], Recipe], toggle: Callable[[Recipe, ScenarioInfo], Recipe | None]
           ) -> list[Hypothesis]:
    """``n`` distinct hypotheses: ``base`` (unless a running trial has its recipe) and variants of it.
    ``scale``/``toggle``: the policy's own rules for a training length and a method switch (planner.py)."""
    taken = {key(h) for h in running}
    out = [] if key(base) in taken else [base]
    recipe = dict(base.plan.get("recipe") or {})
    for kind, factor in VARIANTS:
        if len(out) >= n or not recipe:
            break
        found = _variant(recipe, kind, factor, scale=scale, toggle=lambda r: toggle(r, scenario))
        if found is None:
            continue
        changed, what = found
        plan = {**base.plan, "recipe": changed, "variant": what}
        h = base.model_copy(update={
            "hypothesis": f"{base.hypothesis} Variant for a parallel trial: {what}.",
            "task": f"Train with {json.dumps(changed, sort_keys=True)}", "plan": plan})
        if key(h) not in taken and all(key(h) != key(x) for x in out):
            out.append(h)
    return out[:n] if out else [base]
