"""Issue 30 finding 6: a GPU env's torch against the host's NVIDIA driver (CUDA 13 wheels need driver >= 580).

The decision (:func:`cuda_verdict`) with fake (driver, torch.version.cuda, is_available) inputs, and the
whole path — probe script in the env's python, verdict, `env setup`/`env check`/`doctor` — in a fake-tool
venv whose fake torch reports a CUDA build, with NVML's driver version faked.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ftagent.core import hardware
from ftagent.core.errors import EnvironmentFailure
from ftagent.runners.cudacheck import CudaProbe, cuda_verdict, index_for_driver, toolkit_driver
from ftagent.runners.toolenv import MARKER, check_tools_env, setup_tools_env
from tests.fakes.toolenv import make_fake_tool_env, set_fake_torch

OLD_DRIVER_WARNING = ("CUDA initialization: The NVIDIA driver on your system is too old (found version 12040). "
                      "Please update your GPU driver")


def _probe(cuda: str | None, available: bool, **kw) -> CudaProbe:
    return CudaProbe(torch=kw.pop("torch", "2.13.0"), cuda=cuda, available=available,
                     device="NVIDIA H100 80GB HBM3" if available else None, **kw)


def test_the_table_is_nvidias() -> None:
    assert [toolkit_driver(v) for v in ("12.1", "12.4", "12.6", "12.8", "13.0")] == \
        ["530.30.02", "550.54.14", "560.28.03", "570.26", "580.65.06"]
    assert toolkit_driver("12.7") == "560.28.03"  # not listed: the nearest listed release below it
    assert index_for_driver("580.95.05") == ("13.0", "cu130")
    assert index_for_driver("570.172.08") == ("12.8", "cu128")
    assert index_for_driver("550.54.15") == ("12.6", "cu126")  # through minor version compatibility
    assert index_for_driver("470.256.02") is None


def test_a_cuda_13_wheel_on_a_550_driver_is_one_message_with_the_fix() -> None:
    verdict = cuda_verdict("550.54.15", _probe("13.0", False, warning=OLD_DRIVER_WARNING),
                           python="/envs/tools/bin/python", packages=("torch==2.13.0", "torchvision==0.28.0"))
    assert not verdict.ok
    assert verdict.message == (
        "torch 2.13.0 (CUDA 13.0) in this env needs NVIDIA driver >= 580.65.06 (NVIDIA's CUDA toolkit release "
        "notes), this machine's driver is 550.54.15: CUDA is not usable from this env; install torch's CUDA 12.6 "
        "build: `/envs/tools/bin/python -m pip uninstall -y torch torchvision && /envs/tools/bin/python -m pip "
        "install --index-url https://download.pytorch.org/whl/cu126 torch==2.13.0 torchvision==0.28.0` "
        "(or upgrade the NVIDIA driver)")


@pytest.mark.parametrize(("driver", "cuda", "available", "ok", "needle"), [
    ("580.65.06", "13.0", True, True, "CUDA works on NVIDIA H100"),
    ("570.172.08", "12.8", True, True, "CUDA works"),
    ("470.256.02", "13.0", False, False, "upgrade the NVIDIA driver (no PyTorch CUDA build"),
    ("580.65.06", "13.0", False, False, "torch.cuda.is_available() is False (no reason given)"),
    ("570.172.08", None, False, False, "is a CPU build (torch.version.cuda is None)"),
    (None, "13.0", False, True, "no NVIDIA driver visible"),
])
def test_decisions(driver, cuda, available, ok, needle) -> None:
    verdict = cuda_verdict(driver, _probe(cuda, available))
    assert verdict.ok is ok
    assert needle in verdict.summary + verdict.message + " ".join(verdict.notes)


def test_minor_version_compatibility_works_with_a_note() -> None:
    verdict = cuda_verdict("535.247.01", _probe("12.8", True))
    assert verdict.ok and "minor version compatibility" in verdict.notes[0] and "570.26" in verdict.notes[0]


def test_a_failing_cuda_op_is_not_ok() -> None:
    verdict = cuda_verdict("580.65.06", _probe("13.0", True, error="CUDA op failed: RuntimeError: no kernel image"))
    assert not verdict.ok and "no kernel image" in verdict.message


def _gpu_host(monkeypatch, driver: str) -> None:
    info = hardware.HardwareInfo(gpus=[hardware.GPUInfo(index=0, name="NVIDIA H100 80GB HBM3", memory_total_gb=80,
                                                        memory_used_gb=0)], driver_version=driver, cuda_version="12.4")
    monkeypatch.setattr(hardware, "detect_gpus", lambda *a, **k: info)


@pytest.fixture
def cuda13_env(tmp_path: Path) -> Path:
    env = make_fake_tool_env(tmp_path / "tools")
    set_fake_torch(env, version="2.13.0", cuda="13.0", available=False, warning=OLD_DRIVER_WARNING)
    return env


def test_the_probe_runs_in_the_env_and_check_reports_the_mismatch(cuda13_env: Path, monkeypatch) -> None:
    _gpu_host(monkeypatch, "550.54.15")
    report = check_tools_env(cuda13_env)  # gpu detected from NVML
    assert report.imports_ok and not report.ok
    assert report.cuda is not None and "needs NVIDIA driver >= 580.65.06" in report.cuda.message
    assert f"{cuda13_env}/bin/python -m pip uninstall -y torch torchvision" in report.cuda.message
    set_fake_torch(cuda13_env, version="2.13.0+cu126", cuda="12.6", available=True)  # the fix applied
    fixed = check_tools_env(cuda13_env)
    assert fixed.ok and fixed.cuda.summary == "torch 2.13.0+cu126 (CUDA 12.6), driver 550.54.15: CUDA works on Fake GPU"
    assert "minor version compatibility" in fixed.cuda.notes[0]


def test_gpu_setup_fails_with_the_message_keeps_its_marker_and_does_not_reinstall(cuda13_env: Path, tmp_path: Path,
                                                                                   monkeypatch) -> None:
    _gpu_host(monkeypatch, "550.54.15")
    pip = tmp_path / "pip"
    pip.write_text('#!/bin/sh\necho "pip $*" >> "$(dirname "$0")/pip.log"\n')
    pip.chmod(0o755)
    with pytest.raises(EnvironmentFailure, match="needs NVIDIA driver >= 580.65.06.*cu126"):
        setup_tools_env(cuda13_env, gpu=True, pip_cmd=[str(pip)], step_timeout=60)
    assert (cuda13_env / MARKER).is_file()  # installed as specified: torch vs the driver is not a reinstall
    installs = (tmp_path / "pip.log").read_text()
    with pytest.raises(EnvironmentFailure, match="needs NVIDIA driver"):
        setup_tools_env(cuda13_env, gpu=True, pip_cmd=[str(pip)], step_timeout=60)
    assert (tmp_path / "pip.log").read_text() == installs
    set_fake_torch(cuda13_env, version="2.13.0+cu126", cuda="12.6", available=True)
    assert setup_tools_env(cuda13_env, gpu=True, pip_cmd=[str(pip)], step_timeout=60).skipped


def test_env_check_and_doctor_report_it(cuda13_env: Path, tmp_path: Path, monkeypatch) -> None:
    from ftagent.cli.main import app

    _gpu_host(monkeypatch, "550.54.15")
    monkeypatch.chdir(tmp_path)
    for name, value in (("FT_FILE_PATH", tmp_path / "ff"), ("FT_TOOLS_ENV", cuda13_env), ("FT_ENV_TYPE", "local"),
                        ("FT_SANDBOX", "auto"), ("COLUMNS", "300")):
        monkeypatch.setenv(name, str(value))
    check = CliRunner().invoke(app, ["env", "check"], catch_exceptions=False)
    assert check.exit_code == 1
    assert "driver 550.54.15: driver too old" in check.output
    assert "error: torch 2.13.0 (CUDA 13.0) in this env needs NVIDIA driver >= 580.65.06" in check.output
    doctor = CliRunner().invoke(app, ["doctor"], catch_exceptions=False)
    assert doctor.exit_code == 1, doctor.output
    assert "its torch cannot use this machine's GPUs" in doctor.output.strip().splitlines()[-1]
    assert "download.pytorch.org/whl/cu126" in doctor.output.replace("\n", "").replace("│", "").replace(" ", "")
