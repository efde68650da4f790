"""Issue 35 (relay critique), items 3 and 4: the config prompt lists the keys the system sets up front
(rendered from their owner in tools/llamafactory) and gives the training data's size."""

from __future__ import annotations

import pytest

from ftagent.core.trace import Trace
from ftagent.core.types import Hypothesis
from ftagent.integrity.movement import optimizer_rule
from ftagent.planners.llm.preview import preview
from tests.helpers.prompt_view import fixed_machine, scored, text_of  # noqa: F401 (fixed_machine: autouse)
from tests.unit.test_prompts import _demo_scenario, _settings

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
    text = text_of(preview("config", scenario, _settings()))
    up_front = text.split("# Parameter catalogue", 1)[0]
    assert "The system sets these keys in every run; leave them out" in up_front
    for key in managed_keys(gpu=False):
        assert f"`{key.key}" in up_front, key
    assert "`bf16: false`" in up_front and "`output_dir` (the loop's output folder)" in up_front
    catalogue = text.split("# Parameter catalogue", 1)[1]
    assert "Set by the system" not in catalogue and "- disable_gradient_checkpointing (" not in catalogue
    assert "### Precision and memory" not in catalogue  # its only CPU entry is managed: no empty heading
    # issue 39: what the guard does with the tokenizer keys and the optimizer, as the guard does it
    assert "accepts that run's tokenizer and vocabulary size" in up_front and "flag the trained model" not in up_front
    assert optimizer_rule() in up_front and "`use_galore`" in up_front


# --- 3. the training data's size, or why it is not known ---------------------------------------------------

def test_the_first_config_prompt_says_why_the_rows_are_unknown_and_what_is_known(tmp_path):
    text = text_of(preview("config", _demo_scenario(tmp_path), _settings()))
    data = text.split("# Training data", 1)[1].split("# Parameter catalogue", 1)[0]
    assert "the proposal names no count" in data and "runs after it, in the validate step" in data  # issue 43
    assert "Rows: at most 2,000 (larger outputs" in data and "`demo_add` 6,000 rows" in data  # the cap, the raw file
    assert "steps per epoch = ceil(rows × (1 − val_size) ÷ (per_device_train_batch_size × " in data


def test_a_config_prompt_with_data_gives_rows_tokens_and_the_steps_rule(tmp_path):
    import json

    scenario = _demo_scenario(tmp_path)
    ws = tmp_path / "ws" / "loop_0"
    ws.mkdir(parents=True)
    rows = [{"instruction": f"What is {a} + 1?", "input": "", "output": f"\\boxed{{{a + 1}}}"} for a in range(37)]
    (ws / "data.json").write_text(json.dumps(rows), encoding="utf-8")
    text = text_of(preview("config", scenario, _settings(), workspace=ws))
    data = text.split("# Training data", 1)[1].split("# Parameter catalogue", 1)[0]
    assert "- 37 rows written by the data script's debug run" in data and "tokens per row" in data
    assert "steps per epoch = ceil(" in data and "not known yet" not in data
    # a later loop, before its own data exists: the data of the loop it builds on, with the same rule
    trace = Trace(core_metric="accuracy", baseline_val=0.0)
    trace.record(scored(0, 50.0, artefacts={"workspace": str(ws)}))
    later = text_of(preview("config", scenario, _settings(), trace,
                          hypothesis=Hypothesis(hypothesis="h", task="t", parent=0)))
    data = later.split("# Training data", 1)[1].split("# Parameter catalogue", 1)[0]
    assert "loop 0's data (the experiment built on), not this loop's" in data and "37 rows" in data
    assert "steps per epoch = ceil(" in data
