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


def llamafactory_env() -> Path | None:
    """The first env with LLaMA-Factory: the device check's (``DEVICE_CHECK_ENV``, built from the
    wheelhouse), else the tool env (``FT_TOOLS_ENV`` / ``FT_FILE_PATH/envs/tools``)."""
    for cand in (os.environ.get("DEVICE_CHECK_ENV"), os.environ.get("FT_TOOLS_ENV"),
                 os.environ.get("FT_FILE_PATH") and f"{os.environ['FT_FILE_PATH']}/envs/tools"):
        if cand and (Path(cand) / "bin" / "llamafactory-cli").exists():
            return Path(cand)
    return None


@pytest.fixture(scope="session")
def check_env() -> Path:
    """The env the device check's steps run in (see :func:`llamafactory_env`)."""
    env = llamafactory_env()
    if env is None:
        pytest.skip("no check env: set DEVICE_CHECK_ENV (run_device_check.sh builds one) or FT_TOOLS_ENV")
    return env


@pytest.fixture(scope="session")
def tools_env() -> Path:
    """The full tool env, else an env with LLaMA-Factory only (what the GPU machine gets from the
    wheelhouse). Tests that need OpenCompass check for its ``bin/opencompass`` themselves."""
    path, reason = _find_tools_env()
    path = path or llamafactory_env()
    if path is None:
        pytest.skip(reason)
    return path
