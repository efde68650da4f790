"""CUDA through the bubblewrap sandbox (issue 30, finding 1): a training command sees every GPU NVML
counts, a data script sees none. Needs bubblewrap on the GPU machine (skipped without it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftagent.core.hardware import detect_gpus
from ftagent.runners import sandbox
from ftagent.runners.local import LocalRunner

PROBE = "import torch; print('cuda', torch.cuda.is_available(), torch.cuda.device_count())"


def test_cuda_is_visible_to_confined_training_not_to_data_scripts(check_env: Path, tmp_path: Path) -> None:
    works, why = sandbox.probe_bwrap()
    if not works:
        pytest.skip(f"bubblewrap unusable on this GPU machine: {why}")
    count = detect_gpus().gpu_count
    runner = LocalRunner(check_env, sandbox="bwrap", gpu=None)
    train = runner.run(["python", "-c", PROBE], tool="train", workdir=tmp_path, timeout=300)
    assert train.ok, train.log_tail
    assert f"cuda True {count}" in train.log_tail, train.log_tail
    data = runner.run(["python", "-c", PROBE], tool="data", workdir=tmp_path, timeout=300)
    assert "cuda False 0" in data.log_tail, data.log_tail
