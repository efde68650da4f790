"""Scripted sessions (tests/helpers/make_sessions.py) whose loops left model folders, for export tests.

The scripted workflow trains nothing; here its latest snapshot is given what a real train step
records in the trace: a model folder, the trained config (with host paths and a credential), rows
and a loss history, and a raw dataset folder for the scenario.
"""

from __future__ import annotations

import json
from pathlib import Path

from ftagent.engine.session import list_snapshots
from ftagent.finetune.state import FinetuneSessionState
from tests.helpers.make_sessions import LoopPlan, SessionPlan, make_session
from tests.helpers.weights import safetensors_bytes

HUB_TOKEN = "hf_FAKEexportTOKEN123"


def fake_model(folder: Path, *, lora: bool) -> Path:
    """A model (or adapter) folder as LLaMA-Factory leaves it: weights, tokenizer, bookkeeping."""
    folder.mkdir(parents=True)
    if lora:
        (folder / "adapter_config.json").write_text(json.dumps({"r": 8, "peft_type": "LORA"}))
        (folder / "adapter_model.safetensors").write_bytes(safetensors_bytes(b"\0" * 64))
    else:
        (folder / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
        (folder / "model.safetensors").write_bytes(safetensors_bytes(b"\0" * 64))
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    (folder / "trainer_log.jsonl").write_text("{}\n")
    (folder / "checkpoint-10").mkdir()
    return folder


def exportable_session(root: Path, *, lora: bool = False, base_model: str = "builtin/tiny-qwen2",
                       plan: SessionPlan | None = None) -> Path:
    """A finished scripted session (default: loop 0 best, loop 1 failed, loop 2 built on loop 0)
    whose successful loops have model folders."""
    plan = plan or SessionPlan(base_model=base_model)
    plan.base_model = base_model
    session = make_session(root / "log", plan, workspace=root / "ws")
    snap = list_snapshots(session)[-1]
    state = FinetuneSessionState.model_validate_json(snap.read_text(encoding="utf-8"))
    datasets = root / "datasets"
    (datasets / "demo_add").mkdir(parents=True)
    (datasets / "demo_add" / "demo_add_train.json").write_text("[]")
    state.scenario.datasets, state.scenario.dataset_root = ["demo_add"], str(datasets)
    state.scenario.base_model_path = str(root / "base")
    for exp in state.trace.experiments:
        if exp.failure is not None:
            continue
        ws = root / "ws" / f"loop_{exp.loop}"
        (ws / "dataset_info.json").write_text(json.dumps({"ftagent_data": {"file_name": "data.json"}}))
        model = fake_model(ws / "output", lora=lora)
        exp.artefacts.update(model=str(model), output_dir=str(model), workspace=str(ws),
                             **{"process_data.py": str(ws / "process_data.py"), "train.yaml": str(ws / "train.yaml")})
        exp.config = {"stage": "sft", "finetuning_type": "lora" if lora else "full", "template": "chatml",
                      "learning_rate": 2e-4, "lora_rank": 8, "model_name_or_path": str(root / "base"),
                      "output_dir": str(model), "dataset_dir": str(ws), "dataset": "ftagent_data",
                      "deepspeed": str(root / "ds_z3.json"), "hub_token": HUB_TOKEN}
        exp.data_rows = 200
        exp.loss_history = [{"step": s, "loss": round(2.0 / s, 4)} for s in range(1, 11)]
    snap.write_text(state.model_dump_json(), encoding="utf-8")
    return session


def no_sota_plan() -> SessionPlan:
    """One loop that does not beat the baseline."""
    return SessionPlan(baseline=(0.5, 0.5), loops=[LoopPlan(val=0.2, test=0.2)])
