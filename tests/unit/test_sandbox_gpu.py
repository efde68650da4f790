"""The bubblewrap sandbox shows the host's GPUs to training and evaluation, never to data scripts.

bwrap's ``--dev /dev`` is a fresh tmpfs without the NVIDIA nodes; before the fix every confined
micro-batch saw no CUDA device while NVML outside counted them (issue 30, finding 1). The nodes are
faked here: a folder of regular files stands in for ``/dev``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ftagent.runners import sandbox
from ftagent.runners.local import LocalRunner

BWRAP_OK, BWRAP_WHY = sandbox.probe_bwrap()


def _fake_dev(root: Path) -> Path:
    """A stand-in for /dev with two GPUs, the control nodes, a MIG caps folder and unrelated nodes."""
    dev = root / "dev"
    (dev / "nvidia-caps").mkdir(parents=True)
    for name in ("nvidia0", "nvidia1", "nvidia10", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools",
                 "nvidia-modeset", "null", "sda", "nvidia-foo"):
        (dev / name).write_text(f"fake {name}\n")
    (dev / "nvidia-caps" / "nvidia-cap1").write_text("cap\n")
    return dev


def test_gpu_device_nodes_lists_the_nvidia_nodes_only(tmp_path: Path) -> None:
    dev = _fake_dev(tmp_path)
    names = [p.name for p in sandbox.gpu_device_nodes(dev)]
    assert names == ["nvidia0", "nvidia1", "nvidia10", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools",
                     "nvidia-modeset", "nvidia-caps"]
    assert sandbox.gpu_device_nodes(tmp_path / "missing") == []
    (tmp_path / "empty").mkdir()
    assert sandbox.gpu_device_nodes(tmp_path / "empty") == []


def test_bwrap_argv_binds_the_devices_after_dev_and_sys_read_only(tmp_path: Path) -> None:
    dev = _fake_dev(tmp_path)
    argv = sandbox.bwrap_argv(["true"], workdir=tmp_path, tools_env=None, devices=sandbox.gpu_device_nodes(dev))
    fresh_dev = argv.index("--dev")
    binds = [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == "--dev-bind"]
    assert (str(dev / "nvidia0"), "/dev/nvidia0") in binds
    assert (str(dev / "nvidiactl"), "/dev/nvidiactl") in binds
    assert (str(dev / "nvidia-caps"), "/dev/nvidia-caps") in binds
    assert len(binds) == 8
    assert argv.index("--dev-bind") > fresh_dev  # on top of the fresh /dev, not hidden under it
    assert ["--ro-bind", "/sys", "/sys"] == argv[argv.index("/sys") - 1:argv.index("/sys") + 2]
    plain = sandbox.bwrap_argv(["true"], workdir=tmp_path, tools_env=None)
    assert "--dev-bind" not in plain and "/sys" not in plain  # without GPUs nothing more is shown


def test_local_runner_gives_gpus_to_train_and_eval_not_to_data(tmp_path: Path) -> None:
    runner = LocalRunner(tmp_path / "env", sandbox="none", gpu=None)
    runner.dev_root = _fake_dev(tmp_path)
    assert [p.name for p in runner.sandbox_devices("train")][:2] == ["nvidia0", "nvidia1"]
    assert runner.sandbox_devices("eval") == runner.sandbox_devices("train")
    assert runner.sandbox_devices("data") == []  # LLM-written data code needs no GPU
    runner_cpu = LocalRunner(tmp_path / "env", sandbox="none", gpu=False)
    runner_cpu.dev_root = runner.dev_root
    assert runner_cpu.sandbox_devices("train") == []


@pytest.fixture(scope="module")
def fake_tools_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = tmp_path_factory.mktemp("toolenv") / "tools"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    return env


PROBE = ("import os\n"
         "print('node', open('/dev/nvidia0').read().strip())\n"
         "print('caps', sorted(os.listdir('/dev/nvidia-caps')))\n"
         "print('sys', os.path.isdir('/sys/bus'))\n")


@pytest.mark.skipif(not BWRAP_OK, reason=f"bubblewrap unusable here: {BWRAP_WHY}")
def test_real_bwrap_shows_the_device_nodes_to_a_training_command(fake_tools_env: Path, tmp_path: Path) -> None:
    runner = LocalRunner(fake_tools_env, sandbox="bwrap", gpu=None)
    runner.dev_root = _fake_dev(tmp_path)
    res = runner.run(["python", "-c", PROBE], tool="train", workdir=tmp_path / "wd", timeout=60)
    assert res.ok, res.log_tail
    assert "node fake nvidia0" in res.log_tail
    assert "caps ['nvidia-cap1']" in res.log_tail
    assert "sys True" in res.log_tail
    data = runner.run(["python", "-c", "import os; print('seen', os.path.exists('/dev/nvidia0'), "
                       "os.path.exists('/sys/bus'))"], tool="data", workdir=tmp_path / "wd", timeout=60)
    assert data.ok, data.log_tail
    assert "seen False False" in data.log_tail


def test_gpu_library_dirs_outside_the_system_folders(tmp_path: Path) -> None:
    libs, cuda = tmp_path / "nvidia" / "lib64", tmp_path / "cuda12"
    libs.mkdir(parents=True)
    cuda.mkdir()
    env = {"LD_LIBRARY_PATH": f"{libs}:/usr/lib/x86_64-linux-gnu::relative/dir:{tmp_path / 'missing'}",
           "CUDA_HOME": str(cuda)}
    assert sandbox.gpu_library_dirs(env) == [libs, cuda]
    assert sandbox.gpu_library_dirs({}) == []


@pytest.mark.skipif(not BWRAP_OK, reason=f"bubblewrap unusable here: {BWRAP_WHY}")
def test_real_bwrap_shows_the_driver_library_folder_to_gpu_commands_only(fake_tools_env: Path, tmp_path: Path,
                                                                         monkeypatch) -> None:
    libs = tmp_path / "cm" / "cuda" / "lib64"
    libs.mkdir(parents=True)
    (libs / "libcuda.so.1").write_text("driver")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(libs))
    runner = LocalRunner(fake_tools_env, sandbox="bwrap", gpu=None)
    runner.dev_root = _fake_dev(tmp_path)
    probe = f"import os; print('lib', os.path.exists({str(libs / 'libcuda.so.1')!r}))"
    train = runner.run(["python", "-c", probe], tool="train", workdir=tmp_path / "wd", timeout=60)
    data = runner.run(["python", "-c", probe], tool="data", workdir=tmp_path / "wd", timeout=60)
    assert "lib True" in train.log_tail, train.log_tail
    assert "lib False" in data.log_tail, data.log_tail
