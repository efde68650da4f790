"""Issue 39, red team breach B1: no train.yaml key names a path.

B1: the debug data run planted a checkpoint in the workspace and ``resume_from_checkpoint`` pointed the trainer at it
(transformers ``Trainer._load_from_checkpoint``); the validator kept the key. The rule tested here (docs/trust.md,
rule 4): every key a plan may set is a value (LLaMA-Factory's and TRL's own field types) or a listed text key or the
system's; every other key, written with a value, fails validation with CONFIG
(:mod:`ftagent.tools.llamafactory.planner_keys`).

On 3106b5b (before the fix): the validator kept ``resume_from_checkpoint``, ``tokenized_path`` and friends were only
removed when ``manage_config`` knew them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ftagent.core.errors import ErrorType
from ftagent.core.hardware import HardwareInfo
from ftagent.core.settings import load_settings
from ftagent.core.types import CodeResult, ScenarioInfo
from ftagent.tools.llamafactory.catalogue import LFCatalogue, LFParam, read_catalogue
from ftagent.tools.llamafactory.config import filter_config, load_lf_defaults, manage_config, system_keys
from ftagent.tools.llamafactory.planner_keys import is_value_type
from ftagent.tools.llamafactory.validator import LlamaFactoryValidator
from ftagent.tools.trl.config import filter_grpo_config

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llamafactory"
ROW = {"instruction": "What is 1 + 1?", "input": "", "output": "2"}
#: the keys the red team and the issue name, and others of their kind (each names a file or folder a run would read)
PATH_KEYS = ("resume_from_checkpoint", "cache_dir", "tokenized_path", "adapter_name_or_path", "adapter_folder",
             "accelerator_config", "fsdp_config", "generation_config", "hyper_parallel_args",
             "export_dir", "offload_folder", "media_dir", "profiler_output_dir", "new_special_tokens_config",
             "ref_model", "reward_model", "kt_weight_path", "hf_hub_token")


@pytest.fixture(scope="module")
def catalogue() -> LFCatalogue:
    return read_catalogue(FIXTURES)


# --- no key names a path ------------------------------------------------------------------------------------------

def test_no_train_yaml_key_makes_the_trainer_load_a_checkpoint(catalogue, tmp_path):
    """The red team's test (branch redteam, c08c4f7): the trained model starts from the base model, whatever
    train.yaml says (paths are system-managed)."""
    planner = {"finetuning_type": "full", "learning_rate": 1e-5, "resume_from_checkpoint": str(tmp_path / "ckpt")}
    kept, _ = filter_config(planner, catalogue)
    final = manage_config(kept, workspace=tmp_path, base_model_path="/models/base", hardware=HardwareInfo(),
                          n_samples=100).config
    assert final.get("resume_from_checkpoint") in (None, False), (
        f"the validated config resumes from {final['resume_from_checkpoint']}: the trainer loads those weights")


def test_every_key_a_plan_keeps_is_a_value_a_listed_text_or_the_systems(catalogue):
    """By construction, over LLaMA-Factory's whole catalogue and TRL's GRPOConfig: a key survives the filter only
    when its type admits no free text, or it is one of defaults.yaml's text keys, or the system replaces it."""
    defaults = load_lf_defaults()
    text, system = set(defaults.text_keys), system_keys(defaults)
    for params, filt in ((catalogue.parameters, lambda c: filter_config(c, catalogue)),
                         (catalogue.grpo_parameters, lambda c: filter_grpo_config(c, catalogue))):
        for name, param in params.items():
            kept, dropped = filt({name: "/ws/loop_0/planted"})
            if name in kept:
                assert is_value_type(param.type) or name in text or name in system or name in (
                    "dataset_file", "use_vllm", "vllm_gpu_memory_utilization"), (name, param.type)
            elif not any(d.reason.startswith(("a mapping", "a nested", "not a valid")) for d in dropped):
                assert [d.refused for d in dropped] == [True], (name, dropped)
    for key in PATH_KEYS:
        kept, dropped = filter_config({key: "/ws/loop_0/ckpt"}, catalogue)
        assert kept == {} and dropped[0].refused, key
    # the system's own keys pass the filter, then are replaced or removed: no planner path reaches a run (the
    # DeepSpeed file is launch.choose_deepspeed's: a shipped config or none, tests/unit/test_launch.py)
    for name in sorted(system - {"deepspeed"}):
        kept, _ = filter_config({name: "/ws/loop_0/planted"}, catalogue)
        final = manage_config(kept, workspace=Path("/ws/loop_0"), base_model_path="/models/base",
                              hardware=HardwareInfo(), n_samples=100).config
        assert final.get(name) != "/ws/loop_0/planted", name
    # a string-typed key a future LLaMA-Factory adds is refused until someone lists it
    future = catalogue.model_copy(update={"parameters": {**catalogue.parameters, "warm_start_path": LFParam(
        name="warm_start_path", type="str | None")}})
    assert filter_config({"warm_start_path": "/ws/loop_0/ckpt"}, future)[1][0].refused
    # keys that ask for nothing are dropped, not refused (LLaMA-Factory's examples write resume_from_checkpoint: null)
    kept, dropped = filter_config({"resume_from_checkpoint": None, "cache_dir": ""}, catalogue)
    assert kept == {} and not any(d.refused for d in dropped)
    # the GRPO stage: TRL's from_pretrained keywords and a DeepSpeed file are paths too
    kept, dropped = filter_grpo_config({"model_init_kwargs": {"cache_dir": "/ws"}, "deepspeed": "/ws/ds.json",
                                        "loss_type": "dr_grpo", "beta": 0.04}, catalogue)
    assert kept == {"loss_type": "dr_grpo", "beta": 0.04} and all(d.refused for d in dropped)


class _NoRun:
    name = "none"

    def run(self, *args, **kwargs):  # pragma: no cover - reached only when a refused config ran
        raise AssertionError("a refused config reached a run")


def test_a_path_key_fails_validation_with_config_before_anything_runs(catalogue, tmp_path):
    ws = tmp_path / "ws" / "loop_0"
    ws.mkdir(parents=True)
    (ws / "data.json").write_text(json.dumps([ROW] * 4))
    (ws / "train.yaml").write_text(yaml.safe_dump({"learning_rate": 1e-4, "resume_from_checkpoint": str(ws / "ckpt"),
                                                   "tokenized_path": str(ws / "tok"), "cache_dir": None}))
    scenario = ScenarioInfo(benchmark="demo", base_model="m", base_model_path="/models/m", file_path=str(tmp_path),
                            workspace_root=str(tmp_path / "ws"))
    report = LlamaFactoryValidator(scenario, load_settings(file_path=str(tmp_path)), runner=_NoRun(),
                                   catalogue=catalogue).validate(CodeResult(workspace=str(ws)), None)
    failure = report.failure
    assert failure is not None and failure.error_type is ErrorType.CONFIG
    assert f"resume_from_checkpoint: {ws / 'ckpt'}" in failure.message and "tokenized_path" in failure.message
    assert "cache_dir" not in failure.message and "Remove resume_from_checkpoint, tokenized_path" in failure.suggestion
    assert failure.details["refused_keys"] == ["resume_from_checkpoint", "tokenized_path"]
