"""Issue 40: the integrity guard on a stage that trains a LoRA adapter on an earlier loop's weights.

The offline planner's default chain is SFT (full) → GRPO (LoRA) from the SFT loop's weights: the adapter's
``base_model_name_or_path`` is then the start folder the system resolved (``WORKSPACE_PATH/<session>/weights/
loop_<n>``), not the declared base. Before this fix the architecture check flagged every such adapter ("adapter of
.../weights/loop_0, not of the declared base"), so a chained LoRA loop could never become the best
(tests/integration/test_stage_plateau.py found it). The start folder is the system's record (the loop's
``StartModel``, copied to ``artefacts["start_weights"]`` by the workflow), never a path the adapter names: an
adapter of any other folder is still flagged, and a folder that only shares the start folder's name is not it.
"""

from __future__ import annotations

from pathlib import Path

from ftagent.core.types import Hypothesis, StartModel
from ftagent.finetune.loop_record import experiment_of
from ftagent.finetune.state import FinetuneLoop
from tests.helpers.model_files import (
    GuardedBase,
    base_weights,
    candidate,
    finetuned,
    guarded_base,
    lora_factors,
    write_adapter,
    write_model,
)

MODULES = ["model.layers.0.self_attn.q_proj", "model.layers.1.mlp.up_proj"]


def _setup(tmp_path: Path, declared: str) -> tuple[GuardedBase, Path, Path]:
    world = guarded_base(tmp_path, seed=1)
    start = write_model(tmp_path / "ws" / "sess" / "weights" / "loop_0", finetuned(world.weights, 0.3, 2))
    adapter = write_adapter(tmp_path / "ws" / "sess" / "loop_3" / "output", lora_factors(MODULES, 4, 3),
                            {"base_model_name_or_path": declared or str(start)})
    return world, start, adapter


def _architecture(world: GuardedBase, adapter: Path, **artefacts: str):
    verdict = world.guard.check(candidate(adapter, **artefacts))
    return next(c for c in verdict.checks if c.name == "architecture")


def test_an_adapter_on_the_start_weights_the_system_resolved_passes(tmp_path: Path) -> None:
    world, start, adapter = _setup(tmp_path, "")
    check = _architecture(world, adapter, start_weights=str(start))
    assert check.passed is True and "the start weights the system resolved" in check.detail, check


def test_the_same_adapter_of_a_loop_that_started_from_the_base_is_flagged(tmp_path: Path) -> None:
    world, start, adapter = _setup(tmp_path, "")
    check = _architecture(world, adapter)  # no start weights recorded: it should name the base
    assert check.passed is False and "not of the declared base" in check.detail, check


def test_an_adapter_of_another_folder_is_flagged_even_when_named_like_the_start(tmp_path: Path) -> None:
    planted = write_model(tmp_path / "elsewhere" / "loop_0", finetuned(base_weights(9), 0.3, 4))
    world, start, adapter = _setup(tmp_path, str(planted))
    check = _architecture(world, adapter, start_weights=str(start))
    assert check.passed is False and "nor of this loop's start weights" in check.detail, check


def test_the_workflow_records_the_start_weights_of_a_chained_loop_only(tmp_path: Path) -> None:
    start = StartModel(path=str(tmp_path / "weights" / "loop_0"), loop=0, chain=["sft"])
    chained = FinetuneLoop(index=3, hypothesis=Hypothesis(hypothesis="grpo", stage="grpo", weights_from=0), start=start)
    assert experiment_of(chained).artefacts["start_weights"] == start.path
    from_base = FinetuneLoop(index=0, hypothesis=Hypothesis(hypothesis="sft"), start=StartModel(path="/models/base"))
    assert "start_weights" not in experiment_of(from_base).artefacts
