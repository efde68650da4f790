"""GPU tier: every test here needs an NVIDIA GPU (checked with NVML) and is skipped elsewhere."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ftagent.core.hardware import detect_gpus
from tests.integration.conftest import _find_tools_env, tiny_model, tools_python  # noqa: F401 (shared fixtures)


def pytest_collection_modifyitems(config, items):
    info = detect_gpus()
    if info.gpu_count:
        return
    skip = pytest.mark.skip(reason="no NVIDIA GPU visible (NVML)")
    for item in items:
        if "tests/gpu/" in str(item.fspath):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tools_env() -> Path:
    """The full tool env, else the device check's env (``DEVICE_CHECK_ENV``, LLaMA-Factory only: what the
    GPU machine gets from the wheelhouse). Tests that need OpenCompass check for it themselves."""
    path, reason = _find_tools_env()
    if path is not None:
        return path
    check_env = os.environ.get("DEVICE_CHECK_ENV")
    if check_env and all((Path(check_env) / "bin" / tool).exists() for tool in ("python", "llamafactory-cli")):
        return Path(check_env)
    pytest.skip(reason)
