"""Filtering and system-managed injection of LLaMA-Factory configs (catalogue from a real extraction)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ftagent.core.hardware import GPUInfo, HardwareInfo
from ftagent.tools.llamafactory.catalogue import LFCatalogue, read_catalogue
from ftagent.tools.llamafactory.config import (
    convert_warmup,
    estimate_total_steps,
    filter_config,
    load_lf_defaults,
    manage_config,
    micro_batch_config,
    write_dataset_info,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llamafactory"


@pytest.fixture(scope="module")
def catalogue() -> LFCatalogue:
    return read_catalogue(FIXTURES)

TWO_GPUS = HardwareInfo(gpus=[GPUInfo(index=i, name="H200", memory_total_gb=140.0, memory_used_gb=0.0)
                             for i in range(2)])


def test_filter_drops_unknown_and_nested_junk(catalogue: LFCatalogue) -> None:
    config = {
        "learning_rate": 1e-3,
        "my_invented_flag": True,
        "lora_target": ["q_proj", "v_proj"],
        "template": {"name": "chatml"},  # mapping for a str parameter
        "cutoff_len": [[64]],  # nested list for an int parameter
        "deepspeed": {"zero_optimization": {"stage": 2}},  # deepspeed accepts a dict
        "report_to": ["none"],  # report_to accepts a list
    }
    kept, dropped = filter_config(config, catalogue)
    assert kept == {"learning_rate": 1e-3, "lora_target": "q_proj,v_proj",
                    "deepspeed": {"zero_optimization": {"stage": 2}}, "report_to": ["none"]}
    reasons = {d.key: d.reason for d in dropped}
    assert set(reasons) == {"my_invented_flag", "template", "cutoff_len"}
    assert reasons["my_invented_flag"] == "unknown to LLaMA-Factory"
    assert "mapping" in reasons["template"] and "nested list" in reasons["cutoff_len"]


def test_manage_config_forces_paths_and_cpu_settings(tmp_path: Path) -> None:
    planner = {"model_name_or_path": "/planner/choice", "output_dir": "/elsewhere", "learning_rate": 1e-3,
               "bf16": True, "tokenized_path": "/x", "finetuning_type": "lora"}
    managed = manage_config(planner, workspace=tmp_path, base_model_path="/models/base", hardware=HardwareInfo(),
                            n_samples=100)
    cfg = managed.config
    assert cfg["model_name_or_path"] == "/models/base"
    # the training's own folder beside the workspace, never inside it (issue 39, red team B1/B2)
    assert cfg["output_dir"] == str(tmp_path.absolute().parent / "train" / tmp_path.name / "run" / "output")
    assert cfg["dataset_dir"] == str(tmp_path.absolute())
    assert cfg["dataset"] == load_lf_defaults().dataset_name
    assert cfg["bf16"] is False and cfg["fp16"] is False and cfg["disable_gradient_checkpointing"] is True
    assert cfg["report_to"] == "none" and cfg["save_only_model"] is True and cfg["overwrite_cache"] is True
    assert cfg["per_device_eval_batch_size"] == 1 and cfg["learning_rate"] == 1e-3
    assert "tokenized_path" not in cfg and any("tokenized_path" in n for n in managed.notes)
    assert managed.env["OMP_NUM_THREADS"] == "1" and managed.env["HF_HUB_OFFLINE"] == "1"
    assert {"model_name_or_path", "output_dir", "bf16", "dataset"} <= set(managed.injected)
    assert "learning_rate" not in managed.injected


def test_manage_config_on_gpu_keeps_precision_and_threads(tmp_path: Path) -> None:
    managed = manage_config({"bf16": True}, workspace=tmp_path, base_model_path="/m",
                            hardware=TWO_GPUS, n_samples=10)
    assert managed.config["bf16"] is True
    assert "disable_gradient_checkpointing" not in managed.config
    assert "OMP_NUM_THREADS" not in managed.env


def test_warmup_ratio_becomes_steps(tmp_path: Path) -> None:
    with_max = manage_config({"warmup_ratio": 0.1, "max_steps": 95}, workspace=tmp_path, base_model_path="/m",
                             hardware=HardwareInfo(), n_samples=10)
    assert "warmup_ratio" not in with_max.config and with_max.config["warmup_steps"] == 10
    # epochs: 1000 samples, 10% validation, batch 8 x accum 2 -> ceil(900/16)=57 steps/epoch x 2 epochs
    cfg = {"num_train_epochs": 2, "per_device_train_batch_size": 8, "gradient_accumulation_steps": 2,
           "val_size": 0.1}
    assert estimate_total_steps(cfg, 1000) == 114
    assert estimate_total_steps({**cfg, "max_samples": 160}, 1000) == 18
    assert convert_warmup({**cfg, "warmup_ratio": 0.5}, 114)["warmup_steps"] == 57
    explicit = convert_warmup({"warmup_ratio": 0.5, "warmup_steps": 3}, 100)
    assert explicit == {"warmup_steps": 3}


def test_micro_batch_config_and_dataset_info(tmp_path: Path) -> None:
    final = {"max_steps": 1000, "num_train_epochs": 3, "save_strategy": "steps", "warmup_steps": 50,
             "output_dir": str(tmp_path / "output"), "learning_rate": 1e-3}
    micro = micro_batch_config(final, tmp_path / "debug")
    assert micro["max_steps"] <= 4 and micro["logging_steps"] == 1 and micro["save_strategy"] == "no"
    assert micro["output_dir"] == str((tmp_path / "debug").absolute() / "output")
    assert micro["warmup_steps"] <= 1 and "num_train_epochs" not in micro
    assert micro["learning_rate"] == 1e-3 and final["max_steps"] == 1000  # original untouched
    info = json.loads(write_dataset_info(tmp_path, "ftagent_data").read_text())
    assert info["ftagent_data"]["file_name"] == "data.json"
    assert info["ftagent_data"]["columns"] == {"prompt": "instruction", "query": "input", "response": "output"}


def test_dataset_info_maps_system_and_history_when_rows_carry_them(tmp_path: Path) -> None:
    rows = [{"instruction": "q", "input": "", "output": "a", "system": "be brief",
             "history": [["earlier q", "earlier a"]]}, {"instruction": "q2", "input": "", "output": "a2"}]
    (tmp_path / "data.json").write_text(json.dumps(rows))
    columns = json.loads(write_dataset_info(tmp_path, "ftagent_data").read_text())["ftagent_data"]["columns"]
    assert columns == {"prompt": "instruction", "query": "input", "response": "output", "system": "system",
                       "history": "history"}
    (tmp_path / "data.json").write_text(json.dumps(rows[1:]))
    columns = json.loads(write_dataset_info(tmp_path, "ftagent_data").read_text())["ftagent_data"]["columns"]
    assert "system" not in columns and "history" not in columns
