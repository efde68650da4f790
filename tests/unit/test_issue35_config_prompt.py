"""Issue 35 (relay critique), items 3 and 4: the config prompt lists the keys the system sets up front
(rendered from their owner in tools/llamafactory) and gives the training data's size."""

from __future__ import annotations

import pytest

from ftagent.core.trace import Experiment
from ftagent.core.types import Hypothesis
from ftagent.planners.llm import brief
from ftagent.planners.llm.preview import preview
from tests.unit.test_prompts import _demo_scenario, _settings


@pytest.fixture(autouse=True)
def _fixed_machine(monkeypatch):
    monkeypatch.setattr(brief, "cpu_facts", lambda: (2, 24.0))
    monkeypatch.setattr(brief, "dir_size", lambda path: 2_312_345)


def _text(p) -> str:
    return "\n".join(m["content"] for m in p.messages)


def _scored(loop: int, score: float, **extra) -> Experiment:
    return Experiment(loop=loop, hypothesis=Hypothesis(hypothesis=f"h{loop}", task=f"t{loop}"), val_score=score,
                      **extra)


# --- 4. the system-managed keys, up front in the config prompt -------------------------------------------

@pytest.mark.parametrize("gpus", [0, 1])
def test_every_key_the_system_sets_is_listed_and_shown_before_the_catalogue(tmp_path, gpus):
    from ftagent.core.hardware import GPUInfo, HardwareInfo
    from ftagent.tools.llamafactory.config import manage_config, managed_keys

    hardware = HardwareInfo(gpus=[GPUInfo(index=0, name="NVIDIA H200", memory_total_gb=139.8, memory_used_gb=0.5,
                                          compute_capability=(9, 0))] * gpus)
    listed = {k.key for k in managed_keys(gpu=bool(gpus))}
    managed = manage_config({"learning_rate": 1e-4, "eval_dataset": "x", "bf16": True, "fp16": True},
                            workspace=tmp_path, base_model_path="/m", hardware=hardware, n_samples=10)
    assert set(managed.injected) <= listed and "eval_dataset" in listed and "learning_rate" not in listed

    scenario = _demo_scenario(tmp_path)  # CPU; its catalogue comes from format_for_prompt, as a session's
    text = _text(preview("config", scenario, _settings()))
    up_front = text.split("# Parameter catalogue", 1)[0]
    assert "The system sets these keys in every run; leave them out" in up_front
    for key in managed_keys(gpu=False):
        assert f"`{key.key}" in up_front, key
    assert "`bf16: false`" in up_front and "`output_dir` (the loop's output folder)" in up_front
    catalogue = text.split("# Parameter catalogue", 1)[1]
    assert "Set by the system" not in catalogue and "- disable_gradient_checkpointing (" not in catalogue
