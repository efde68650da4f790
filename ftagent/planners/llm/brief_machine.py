"""What the brief says of the machine: the hardware in words and the memory estimate as a table (the
methods as LLaMA-Factory configs, how each is launched, what fits)."""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel

from ftagent.planners.llm.numbers import format_gb


def hardware_words(hardware: Any) -> str:
    """``1 × NVIDIA H200 (140 GiB each)`` or ``CPU only: 2 cores, 24 GiB RAM``."""
    gpus = list(getattr(hardware, "gpus", []) or [])
    if gpus:
        names: dict[str, list[Any]] = {}
        for gpu in gpus:
            names.setdefault(gpu.name, []).append(gpu)
        parts = [f"{len(v)} × {name} ({min(g.memory_total_gb for g in v):.0f} GiB each)" for name, v in names.items()]
        extra = f"; driver {hardware.driver_version}, CUDA {hardware.cuda_version}" if hardware.driver_version else ""
        return " + ".join(parts) + extra
    cores, ram_gib = cpu_facts()
    ram = f", {ram_gib:.0f} GiB RAM" if ram_gib else ""
    return f"CPU only: {cores} cores{ram} (no GPU: training is slow, keep models and data small)"


def cpu_facts() -> tuple[int, float | None]:
    """(usable CPU cores, RAM in GiB) of this machine."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        import psutil

        return cores, psutil.virtual_memory().total / 1024**3
    except ImportError:  # pragma: no cover - psutil is a dependency
        return cores, None


# the memory estimator's methods as LLaMA-Factory configs
METHOD_LABELS = {"full": "`full` + `disable_gradient_checkpointing: true`",
                 "full_gc": "`full` (gradient checkpointing, the default)",
                 "lora": "`lora`", "qlora": "`lora` + `quantization_bit: 4`"}


class MemoryRow(BaseModel):
    method: str
    fits: bool
    launch: str
    static: str
    max_seq: str


_ZERO = {"ds_z2_config.json": "ZeRO-2", "ds_z3_config.json": "ZeRO-3", "ds_z3_offload_config.json": "ZeRO-3 + CPU offload"}


def _launch(m: dict[str, Any], memory: dict[str, Any]) -> str:
    """How the system launches a method (the memory plan's DeepSpeed config, DDP, one GPU, CPU)."""
    ds = m.get("deepspeed")
    if ds:
        return f"{_ZERO.get(ds, 'DeepSpeed')} (`{ds}`)"
    if memory.get("device") == "cpu":
        return "CPU"
    n = int(memory.get("num_gpus") or 1)
    return f"DDP × {n}" if n > 1 else "1 GPU"


def memory_table(memory: dict[str, Any], context: int | None) -> list[MemoryRow]:
    rows = []
    cpu = memory.get("device") == "cpu"
    for m in memory.get("methods") or []:
        if cpu and m.get("method") == "qlora":
            continue  # bitsandbytes 4-bit needs CUDA: not an option without a GPU
        if cpu and m.get("method") == "full_gc":
            continue  # relay round r2: the system sets disable_gradient_checkpointing: true on CPU, so never run
        seq = int(m.get("max_seq_len") or 0)
        if not m.get("fits"):
            max_seq = "does not fit"
        elif context and seq >= context:
            max_seq = f"the whole context ({context:,})"
        else:
            max_seq = f"{seq:,}"
        method = str(m.get("method", "?"))
        label = "`full`" if cpu and method == "full" else METHOD_LABELS.get(method, method)  # the key is the system's
        rows.append(MemoryRow(method=label, fits=bool(m.get("fits")), launch=_launch(m, memory),
                              static=format_gb(float(m.get("static_gb_per_gpu") or 0)), max_seq=max_seq))
    return rows
