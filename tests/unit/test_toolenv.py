"""Tool env setup logic (marker/idempotence, step order, error surfacing) with fake pip/python."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ftagent.core.errors import EnvironmentFailure
from ftagent.core.settings import load_settings
from ftagent.runners.toolenv import (
    ENVS_DIR,
    MARKER,
    check_tools_env,
    marker_current,
    setup_tools_env,
    tools_env_path,
)

FAKE_BASE_PYTHON = """#!/bin/sh
# fake `python -m venv DIR`: DIR/bin/python logs its arguments and succeeds
mkdir -p "$3/bin"
printf '#!/bin/sh\\necho "python $1" >> "%s/calls.log"\\n' "$(dirname "$0")" > "$3/bin/python"
chmod +x "$3/bin/python"
"""
FAKE_PIP = """#!/bin/sh
echo "pip $*" >> "$(dirname "$0")/calls.log"
if [ -n "$(grep -l FAIL "$(dirname "$0")/fail" 2>/dev/null)" ]; then
  echo "ERROR: Could not find a version that satisfies the requirement llamafactory==9.9"; exit 1
fi
echo "Successfully installed"
"""


@pytest.fixture
def fakes(tmp_path: Path) -> dict[str, Path]:
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    for name, text in (("python3", FAKE_BASE_PYTHON), ("pip", FAKE_PIP)):
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    envs = tmp_path / "envs"
    shutil.copytree(ENVS_DIR, envs)
    return {"python": bindir / "python3", "pip": bindir / "pip", "log": bindir / "calls.log",
            "envs": envs, "fail": bindir / "fail"}


def _setup(env: Path, fakes: dict[str, Path], **kw):
    return setup_tools_env(env, gpu=kw.pop("gpu", False), base_python=str(fakes["python"]),
                           pip_cmd=[str(fakes["pip"])], envs_dir=fakes["envs"], verify=False, **kw)


def test_setup_order_marker_and_idempotence(fakes: dict[str, Path], tmp_path: Path) -> None:
    env = tmp_path / "tools"
    first = _setup(env, fakes)
    assert not first.skipped
    calls = fakes["log"].read_text().splitlines()
    assert calls[0] == f"pip install -r {fakes['envs'] / 'torch-cpu.txt'}"
    assert calls[1] == (f"pip install -c {fakes['envs'] / 'tools.lock.txt'} -r {fakes['envs'] / 'tools.txt'} "
                        "torch==2.13.0 torchvision==0.28.0")
    assert calls[2] == "python -c" and len(calls) == 3  # CPU fix
    assert json.loads((env / MARKER).read_text())["gpu"] is False
    assert marker_current(env, False, fakes["envs"]) and not marker_current(env, True, fakes["envs"])
    # Unchanged requirement files: nothing runs again.
    assert _setup(env, fakes).skipped
    assert len(fakes["log"].read_text().splitlines()) == 3
    # A changed requirement file invalidates the marker.
    with open(fakes["envs"] / "tools.txt", "a") as fh:
        fh.write("rich\n")
    assert not marker_current(env, False, fakes["envs"])
    assert not _setup(env, fakes).skipped
    assert len(fakes["log"].read_text().splitlines()) == 6
    # force reinstalls; the GPU flavour uses torch-gpu.txt and skips the CPU fix.
    _setup(env, fakes, gpu=True, force=True)
    gpu_calls = fakes["log"].read_text().splitlines()[6:]
    assert gpu_calls[0].endswith("torch-gpu.txt") and len(gpu_calls) == 3
    assert gpu_calls[2] == (f"pip install -c {fakes['envs'] / 'tools.lock.txt'} -r {fakes['envs'] / 'tools-gpu.txt'} "
                            "torch==2.13.0 torchvision==0.28.0")  # DeepSpeed + bitsandbytes, GPU only


def test_failed_install_surfaces_pip_output(fakes: dict[str, Path], tmp_path: Path) -> None:
    fakes["fail"].write_text("FAIL")
    env = tmp_path / "tools"
    with pytest.raises(EnvironmentFailure, match="install torch failed .*\n(.|\n)*Could not find a version"):
        _setup(env, fakes)
    assert not (env / MARKER).exists()


def test_check_reports_missing_env(tmp_path: Path) -> None:
    report = check_tools_env(tmp_path / "nothing", gpu=False)
    assert not report.ok and not report.exists and "ftagent env setup" in report.errors[0]


def test_tools_env_path(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("FT_TOOLS_ENV", raising=False)
    monkeypatch.setenv("FT_FILE_PATH", str(tmp_path / "ff"))
    assert tools_env_path(load_settings()) == tmp_path / "ff" / "envs" / "tools"
    monkeypatch.setenv("FT_TOOLS_ENV", str(tmp_path / "elsewhere"))
    assert tools_env_path(load_settings()) == tmp_path / "elsewhere"


def test_gpu_extras_pin_deepspeed_and_bitsandbytes() -> None:
    pins = [ln for ln in (ENVS_DIR / "tools-gpu.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    assert pins == ["deepspeed==0.19.8", "bitsandbytes==0.50.2"]


def test_vllm_env_setup_path_and_pins(fakes: dict[str, Path], tmp_path: Path, monkeypatch) -> None:
    from ftagent.runners.vllmenv import VLLM_PIN, setup_vllm_env, vllm_available, vllm_env_path

    monkeypatch.delenv("FT_VLLM_ENV", raising=False)
    assert vllm_env_path(load_settings(file_path=str(tmp_path / "ft"))) == (tmp_path / "ft" / "envs" / "vllm")
    monkeypatch.setenv("FT_VLLM_ENV", str(tmp_path / "elsewhere"))
    assert vllm_env_path(load_settings(file_path=str(tmp_path / "ft"))) == tmp_path / "elsewhere"
    env = tmp_path / "vllm"
    skipped, _ = setup_vllm_env(env, base_python=str(fakes["python"]), pip_cmd=[str(fakes["pip"])],
                                envs_dir=fakes["envs"], verify=False)
    calls = fakes["log"].read_text().splitlines()
    assert not skipped and calls[0] == f"pip install -r {fakes['envs'] / 'torch-gpu.txt'}"
    assert calls[1] == (f"pip install -c {fakes['envs'] / 'vllm.lock.txt'} -r {fakes['envs'] / 'vllm.txt'} "
                        "torch==2.13.0 torchvision==0.28.0") and len(calls) == 2
    again, _ = setup_vllm_env(env, base_python=str(fakes["python"]), pip_cmd=[str(fakes["pip"])],
                              envs_dir=fakes["envs"], verify=False)
    assert again and len(fakes["log"].read_text().splitlines()) == 2
    # the fake env's python cannot import vllm: not available (and no env at all: not available)
    assert not vllm_available(env) and not vllm_available(tmp_path / "none")
    # the pins: vllm.txt names the release, the lock holds the same, built for our torch pin
    lock = (ENVS_DIR / "vllm.lock.txt").read_text().splitlines()
    assert VLLM_PIN in (ENVS_DIR / "vllm.txt").read_text().splitlines() and VLLM_PIN in lock
    assert "torchvision==0.28.0" in lock and not any(ln.startswith("torch==") for ln in lock)
    assert any(ln.startswith("transformers==5.") for ln in lock)


def test_vllm_serve_argv() -> None:
    from ftagent.runners.vllmenv import vllm_serve_argv

    argv = vllm_serve_argv(Path("/e/vllm"), "/m/base", port=8123, tensor_parallel_size=2, max_model_len=2048,
                           served_model_name="base", lora_modules={"loop_1": "/w/output"}, max_lora_rank=64)
    assert argv[:3] == ["/e/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    joined = " ".join(argv)
    for part in ("--model /m/base", "--host 127.0.0.1", "--port 8123", "--tensor-parallel-size 2",
                 "--max-model-len 2048", "--served-model-name base", "--enable-lora --lora-modules loop_1=/w/output",
                 "--max-lora-rank 64"):
        assert part in joined
    assert "--enable-lora" not in vllm_serve_argv(Path("/e"), "/m", port=1)
