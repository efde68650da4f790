"""GPU tier: every test here needs an NVIDIA GPU (checked with NVML) and is skipped elsewhere."""

from __future__ import annotations

import pytest

from ftagent.core.hardware import detect_gpus
from tests.integration.conftest import tiny_model, tools_env, tools_python  # noqa: F401 (shared fixtures)


def pytest_collection_modifyitems(config, items):
    info = detect_gpus()
    if info.gpu_count:
        return
    skip = pytest.mark.skip(reason="no NVIDIA GPU visible (NVML)")
    for item in items:
        if "tests/gpu/" in str(item.fspath):
            item.add_marker(skip)
