"""GPU facts from NVML (package ``nvidia-ml-py``, module ``pynvml``), honouring CUDA_VISIBLE_DEVICES.

``detect_gpus()`` never raises: without a driver (``pynvml.NVMLError``) or without the module it
returns a report with ``gpu_count == 0`` and a ``message``. Memory is reported per GPU; totals are
derived properties, so callers cannot confuse per-GPU and summed memory (the reference's bug).
"""

from __future__ import annotations

import os
from types import EllipsisType, ModuleType

from pydantic import BaseModel, Field, computed_field

GIB = 1024**3


class GPUInfo(BaseModel):
    """One visible GPU."""

    index: int = Field(description="NVML (physical) index")
    name: str
    uuid: str = ""
    memory_total_gb: float = Field(description="GiB, rounded (for people)")
    memory_used_gb: float = Field(description="GiB")
    memory_total_bytes: int = Field(0, description="NVML's total, exact: what plans count (0: not recorded, "
                                                   "as in snapshots from before issue 42)")
    compute_capability: tuple[int, int] | None = Field(None, description="CUDA compute capability (NVML)")

    @property
    def memory_free_gb(self) -> float:
        return max(self.memory_total_gb - self.memory_used_gb, 0.0)

    @property
    def total_bytes(self) -> int:
        """NVML's total in bytes (the rounded GiB for an older record)."""
        return self.memory_total_bytes or round(self.memory_total_gb * GIB)


class HardwareInfo(BaseModel):
    """The GPUs this process may use."""

    gpus: list[GPUInfo] = Field(default_factory=list)
    driver_version: str | None = None
    cuda_version: str | None = None
    cuda_visible_devices: str | None = None
    message: str = ""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def per_gpu_memory_gb(self) -> float:
        """The smallest total memory among the visible GPUs (what every rank can count on); 0 without GPUs."""
        return min((g.memory_total_gb for g in self.gpus), default=0.0)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total_memory_gb(self) -> float:
        return sum(g.memory_total_gb for g in self.gpus)

    def summary(self) -> str:
        """One line for terminals and prompts."""
        if not self.gpus:
            return f"no GPU ({self.message})" if self.message else "no GPU"
        names = sorted({g.name for g in self.gpus})
        return (f"{self.gpu_count}x {'/'.join(names)}, {self.per_gpu_memory_gb:.0f} GiB each, "
                f"driver {self.driver_version}, CUDA {self.cuda_version}")


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def visible_indices(count: int, cuda_visible_devices: str | None, uuids: list[str]) -> list[int]:
    """The physical indices selected by ``CUDA_VISIBLE_DEVICES`` (indices or UUID prefixes).

    Like CUDA, parsing stops at the first invalid entry; unset means all devices.
    """
    if cuda_visible_devices is None:
        return list(range(count))
    chosen: list[int] = []
    for raw in cuda_visible_devices.split(","):
        item = raw.strip()
        if not item:
            break
        if item.lstrip("-").isdigit():
            idx = int(item)
            if idx < 0 or idx >= count:
                break
        else:
            matches = [i for i, u in enumerate(uuids) if u.startswith(item)]
            if len(matches) != 1:
                break
            idx = matches[0]
        if idx in chosen:
            break
        chosen.append(idx)
    return chosen


def _cuda_version(pynvml: ModuleType) -> str | None:
    try:
        v = int(pynvml.nvmlSystemGetCudaDriverVersion())
    except pynvml.NVMLError:
        return None
    return f"{v // 1000}.{(v % 1000) // 10}"


def _capability(pynvml: ModuleType, handle: object) -> tuple[int, int] | None:
    """(major, minor); None where NVML cannot say (bf16 needs 8.0: the launch plan's precision)."""
    try:
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
    except (pynvml.NVMLError, AttributeError, TypeError, ValueError):
        return None
    return int(major), int(minor)


def _read_gpus(pynvml: ModuleType, cvd: str | None) -> HardwareInfo:
    count = int(pynvml.nvmlDeviceGetCount())
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    uuids = []
    for h in handles:
        try:
            uuids.append(_text(pynvml.nvmlDeviceGetUUID(h)))
        except pynvml.NVMLError:
            uuids.append("")
    gpus = []
    for idx in visible_indices(count, cvd, uuids):
        mem = pynvml.nvmlDeviceGetMemoryInfo(handles[idx])
        gpus.append(GPUInfo(index=idx, name=_text(pynvml.nvmlDeviceGetName(handles[idx])), uuid=uuids[idx],
                            memory_total_gb=round(mem.total / GIB, 2), memory_used_gb=round(mem.used / GIB, 2),
                            memory_total_bytes=int(mem.total),
                            compute_capability=_capability(pynvml, handles[idx])))
    return HardwareInfo(gpus=gpus, driver_version=_text(pynvml.nvmlSystemGetDriverVersion()),
                        cuda_version=_cuda_version(pynvml), cuda_visible_devices=cvd,
                        message="" if gpus else "CUDA_VISIBLE_DEVICES hides every GPU")


def detect_gpus(cuda_visible_devices: str | None | EllipsisType = ...) -> HardwareInfo:
    """Query NVML for the GPUs this process may use.

    Args:
        cuda_visible_devices: overrides the ``CUDA_VISIBLE_DEVICES`` environment variable (``None`` =
            all GPUs); by default the variable is read.

    Returns:
        HardwareInfo; ``gpu_count == 0`` with a ``message`` when there is no GPU or no NVML.
    """
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES") if cuda_visible_devices is ... else cuda_visible_devices
    try:
        import pynvml
    except ImportError:
        return HardwareInfo(cuda_visible_devices=cvd, message="nvidia-ml-py is not installed")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return HardwareInfo(cuda_visible_devices=cvd, message=f"NVML unavailable: {exc}")
    try:
        return _read_gpus(pynvml, cvd)
    except pynvml.NVMLError as exc:
        return HardwareInfo(cuda_visible_devices=cvd, message=f"NVML query failed: {exc}")
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
