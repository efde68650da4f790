"""GPU detection: the no-GPU result here, and per-GPU logic with 8 fake NVML GPUs."""

from __future__ import annotations

from types import SimpleNamespace

import pynvml
import pytest

from ftagent.core.hardware import GIB, detect_gpus, visible_indices


def test_no_gpu_is_a_clean_result() -> None:
    info = detect_gpus(None)
    if info.gpu_count:
        pytest.skip("this machine has a GPU")
    assert info.gpus == [] and info.per_gpu_memory_gb == 0.0 and info.total_memory_gb == 0.0
    assert info.message and info.summary().startswith("no GPU")
    assert info.model_dump()["gpu_count"] == 0


@pytest.fixture
def eight_gpus(monkeypatch):
    """Replace the NVML calls with 8 fake GPUs (80 GiB each, GPU i uses i GiB)."""
    state = {"init": 0, "shutdown": 0}
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: state.__setitem__("init", state["init"] + 1))
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: state.__setitem__("shutdown", state["shutdown"] + 1))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: 8)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: i)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetName", lambda h: "NVIDIA H100 80GB HBM3" if h < 7 else b"NVIDIA A100")
    monkeypatch.setattr(pynvml, "nvmlDeviceGetUUID", lambda h: f"GPU-{h:02d}aa-bbbb")
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMemoryInfo",
                        lambda h: SimpleNamespace(total=80 * GIB if h < 7 else 40 * GIB, used=h * GIB, free=0))
    monkeypatch.setattr(pynvml, "nvmlSystemGetDriverVersion", lambda: "550.54.15")
    monkeypatch.setattr(pynvml, "nvmlSystemGetCudaDriverVersion", lambda: 12040)
    return state


def test_eight_fake_gpus_all_visible(eight_gpus, monkeypatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    info = detect_gpus()
    assert info.gpu_count == 8 and [g.index for g in info.gpus] == list(range(8))
    assert info.gpus[3].memory_total_gb == 80.0 and info.gpus[3].memory_used_gb == 3.0
    assert info.gpus[3].memory_free_gb == 77.0
    assert info.gpus[7].name == "NVIDIA A100"  # bytes decoded
    assert info.per_gpu_memory_gb == 40.0  # the smallest card, not the sum
    assert info.total_memory_gb == 7 * 80 + 40
    assert (info.driver_version, info.cuda_version) == ("550.54.15", "12.4")
    assert eight_gpus == {"init": 1, "shutdown": 1}
    assert "8x" in info.summary()


def test_cuda_visible_devices_is_honoured(eight_gpus, monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    info = detect_gpus()
    assert [g.index for g in info.gpus] == [2, 5] and info.per_gpu_memory_gb == 80.0
    assert detect_gpus("GPU-07").gpus[0].index == 7
    empty = detect_gpus("")
    assert empty.gpu_count == 0 and "hides every GPU" in empty.message
    assert detect_gpus(None).gpu_count == 8


def test_visible_indices_parsing() -> None:
    uuids = [f"GPU-{i}abc" for i in range(4)]
    assert visible_indices(4, None, uuids) == [0, 1, 2, 3]
    assert visible_indices(4, "3,1", uuids) == [3, 1]
    assert visible_indices(4, "0,9,1", uuids) == [0]  # CUDA stops at the first invalid entry
    assert visible_indices(4, "-1", uuids) == []
    assert visible_indices(4, "GPU-2", uuids) == [2]
    assert visible_indices(4, "1,1", uuids) == [1]


def test_nvml_error_during_query(eight_gpus, monkeypatch) -> None:
    def boom():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", boom)
    info = detect_gpus(None)
    assert info.gpu_count == 0 and info.message.startswith("NVML query failed")
