"""Shared fixtures of the integration tests (real tool env on CPU).

* ``tools_env`` (session): the tool virtualenv (``FT_TOOLS_ENV``, else ``$FT_FILE_PATH/envs/tools``);
  the test is skipped with the reason when it is missing or incomplete.
* ``tools_python`` (session): ``tools_env / "bin" / "python"``.
* ``tiny_model`` (session): ``builtin/tiny-qwen2`` built once (seed 2) into a temporary folder with the
  tool env's python; a folder with ``config.json``, ``model.safetensors`` and the tokenizer files.
* ``wheel_venv`` (session): a fresh venv with the built wheel of ftagent (tests/helpers/wheel_venv.py),
  built once per worker process for the tests that run the installed ``bin/ftagent`` outside the source tree.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

for _key, _value in {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "OMP_NUM_THREADS": "1",
}.items():
    os.environ.setdefault(_key, _value)


def _find_tools_env() -> tuple[Path | None, str]:
    explicit = os.environ.get("FT_TOOLS_ENV")
    if explicit:
        candidate, source = Path(explicit), "FT_TOOLS_ENV"
    elif os.environ.get("FT_FILE_PATH"):
        candidate, source = Path(os.environ["FT_FILE_PATH"]) / "envs" / "tools", "FT_FILE_PATH/envs/tools"
    else:
        return None, "no tool env: set FT_TOOLS_ENV (e.g. /tmp/warm/tools) or FT_FILE_PATH"
    for tool in ("python", "llamafactory-cli", "opencompass"):
        if not (candidate / "bin" / tool).exists():
            return None, f"tool env {candidate} (from {source}) has no bin/{tool}; run `ftagent env setup`"
    return candidate, ""


@pytest.fixture(scope="session")
def tools_env() -> Path:
    """The tool virtualenv with LLaMA-Factory + OpenCompass (skips when absent)."""
    path, reason = _find_tools_env()
    if path is None:
        if os.environ.get("FTAGENT_REQUIRE_TOOLS") == "1":  # CI: a missing tool env is a failure
            pytest.fail(reason)
        pytest.skip(reason)
    return path


@pytest.fixture(scope="session")
def tools_python(tools_env: Path) -> Path:
    """The tool env's python executable."""
    return tools_env / "bin" / "python"


@pytest.fixture(scope="session")
def tiny_model(tools_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``builtin/tiny-qwen2`` (seed 2) built once per test session into a temporary folder."""
    from ftagent.models.builtin import build_builtin

    out = tmp_path_factory.mktemp("models") / "builtin" / "tiny-qwen2"
    return build_builtin("tiny-qwen2", out, tools_python)


@pytest.fixture(scope="session")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the built wheel of ftagent (its ``bin/ftagent``), as after ``pip install ftagent``."""
    from tests.helpers.wheel_venv import build_wheel_venv

    return build_wheel_venv(tmp_path_factory.mktemp("wheel"))
