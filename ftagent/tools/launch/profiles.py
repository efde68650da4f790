"""Hardware profiles: ``8xH100``, ``4xA100-40GB``, ``8x80GB`` or the GPUs NVML reports.

A profile is what the launch plan needs of the hardware: GPU count, memory per GPU and compute
capability (bf16 needs 8.0 or newer). Names come from ``configs/gpu_profiles.yaml``.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from ftagent.core.errors import UserInputError
from ftagent.core.hardware import HardwareInfo
from ftagent.core.paths import config_file

ASSUMED_CAPABILITY = (8, 0)  # an `NxMEMGB` GPU, or one NVML did not name: said in the plan's notes
# bf16 needs compute capability 8.0 (Ampere): transformers' TrainingArguments refuses `bf16: true` below
# ("Your setup doesn't support bf16/gpu", transformers/training_args.py __post_init__ via
# is_torch_bf16_gpu_available), vLLM likewise (vllm_rules.BF16_MIN_CAPABILITY).
BF16_MIN_CAPABILITY = (8, 0)
Precision = Literal["bf16", "fp16", "fp32"]
SPEC_RE = re.compile(r"^\s*(\d+)\s*[xX×]\s*([A-Za-z0-9_.\-]+)\s*$")
# The most GPUs a described plan may count (issue 43: a 20-digit count made the TP search loop for ever).
# 4,096 is 512 nodes of 8, beyond any single fine-tuning run LLaMA-Factory launches.
MAX_GPU_COUNT = 4096
MIB = 2**20
MEM_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*GB$", re.IGNORECASE)


class HardwareProfile(BaseModel):
    """The GPUs a plan is made for (``gpu_count == 0``: CPU)."""

    model_config = ConfigDict(frozen=True)

    spec: str = Field(description="as written: 8xH100, 2x48GB, detected: 8x NVIDIA H100 80GB HBM3")
    gpu_name: str = ""
    gpu_count: int = Field(ge=0)
    memory_gb: float = Field(ge=0, description="per GPU, GB (1e9 bytes) as NVML reports the total: "
                                               "configs/gpu_profiles.yaml nvml_mib for a name, the bytes NVML "
                                               "read for detected GPUs, the user's GB for NxMEMGB")
    compute_capability: tuple[int, int] | None = None
    capability_assumed: bool = Field(False, description="not known for this GPU: 8.0 assumed")

    @property
    def precision(self) -> Precision:
        """The mixed precision of training and serving on these GPUs."""
        return mixed_precision(self.compute_capability if self.gpu_count else None)


def mixed_precision(compute_capability: tuple[int, int] | None) -> Precision:
    """``bf16`` from compute capability 8.0, ``fp16`` below; ``fp32`` without a GPU (None)."""
    if compute_capability is None:
        return "fp32"
    return "bf16" if tuple(compute_capability) >= BF16_MIN_CAPABILITY else "fp16"


def precision_config(precision: Precision) -> dict[str, bool]:
    """LLaMA-Factory's ``bf16`` / ``fp16`` keys for a precision (both false: fp32)."""
    return {"bf16": precision == "bf16", "fp16": precision == "fp16"}


def _key(name: str) -> str:
    return re.sub(r"[\s_\-]", "", name).upper()


@lru_cache(maxsize=1)
def gpu_table() -> dict[str, dict]:
    """``configs/gpu_profiles.yaml`` keyed by the normalised name."""
    data = yaml.safe_load(config_file("gpu_profiles.yaml").read_text(encoding="utf-8")) or {}
    return {_key(k): {"name": k, **v} for k, v in data.items()}


def parse_hardware_spec(spec: str) -> HardwareProfile:
    """``8xH100`` / ``4xA100-40GB`` / ``8x80GB`` → a profile.

    Raises:
        UserInputError: not ``N x NAME`` with a known NAME or ``N x MEMGB``.
    """
    known = ", ".join(v["name"] for v in gpu_table().values())
    match = SPEC_RE.match(str(spec or ""))
    digits = match.group(1).lstrip("0") if match else ""
    if not match or not digits or len(digits) > len(str(MAX_GPU_COUNT)) or int(digits) > MAX_GPU_COUNT:
        raise UserInputError(f"--hardware {str(spec)[:80]!r}: expected COUNTxGPU (8xH100, 1xA10G, 4xA100-40GB) or "
                             f"COUNTxMEMGB (8x80GB), COUNT from 1 to {MAX_GPU_COUNT}; known GPUs: {known}")
    count, name = int(digits), match.group(2)
    entry = gpu_table().get(_key(name))
    if entry:
        return HardwareProfile(spec=spec.strip(), gpu_name=entry["name"], gpu_count=count,
                               memory_gb=int(entry["nvml_mib"]) * MIB / 1e9,
                               compute_capability=tuple(entry["compute_capability"]))
    mem = MEM_RE.match(name)
    if not mem or float(mem.group(1)) <= 0:
        raise UserInputError(f"--hardware {spec!r}: unknown GPU {name!r}; known GPUs: {known}, "
                             "or give the memory per GPU (8x80GB)")
    return HardwareProfile(spec=spec.strip(), gpu_name=f"{mem.group(1)} GB GPU", gpu_count=count,
                           memory_gb=float(mem.group(1)), compute_capability=ASSUMED_CAPABILITY,
                           capability_assumed=True)


def capability_of_name(name: str) -> tuple[int, int] | None:
    """The compute capability of a GPU from its NVML name (``NVIDIA A100-SXM4-80GB`` → 8.0), if known."""
    key = _key(name)
    hits = [v for k, v in gpu_table().items() if k in key]
    if not hits:
        return None
    best = max(hits, key=lambda v: len(_key(v["name"])))  # A100-40GB before A100, L40S before L4
    return tuple(best["compute_capability"])


def profile_of(hardware: HardwareInfo) -> HardwareProfile:
    """The profile of the GPUs NVML reports (the smallest memory and capability among them)."""
    if hardware.gpu_count == 0:
        return HardwareProfile(spec="cpu", gpu_count=0, memory_gb=0.0)
    caps = [tuple(cap) if (cap := getattr(g, "compute_capability", None)) else capability_of_name(g.name)
            for g in hardware.gpus]
    known = [c for c in caps if c is not None]
    assumed = len(known) < len(caps)
    cap = min(known) if known and not assumed else ASSUMED_CAPABILITY
    names = sorted({g.name for g in hardware.gpus})
    return HardwareProfile(spec=f"{hardware.gpu_count}x {'/'.join(names)}", gpu_name="/".join(names),
                           gpu_count=hardware.gpu_count, memory_gb=min(g.total_bytes for g in hardware.gpus) / 1e9,
                           compute_capability=cap, capability_assumed=assumed)
