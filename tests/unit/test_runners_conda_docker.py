"""CondaRunner (with a fake `conda` executable), DockerRunner without an engine, and the factory.

The docker runner's mounts and DeviceRequests: tests/unit/test_docker_runner_options.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ftagent.core.errors import EnvironmentFailure, UserInputError
from ftagent.core.settings import load_settings
from ftagent.runners.conda import CondaRunner
from ftagent.runners.docker import DockerRunner, connect
from ftagent.runners.factory import get_runner

FAKE_CONDA = """#!/usr/bin/env python3
import json, os, subprocess, sys
state = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "state")
with open(state + "/calls.jsonl", "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\\n")
args = sys.argv[1:]
if args[:3] == ["env", "list", "--json"]:
    envs = ["/opt/conda/envs/" + n for n in os.listdir(state + "/envs")]
    print(json.dumps({"envs": envs}))
elif args[0] == "create":
    os.makedirs(state + "/envs/" + args[args.index("-n") + 1], exist_ok=True)
elif args[0] == "run":
    rest = args[args.index("--no-capture-output") + 1:]
    if "pip" in rest and os.environ.get("FAKE_PIP_FAIL"):
        print("ERROR: No matching distribution found for llamafactory==0.9.5", file=sys.stderr)
        sys.exit(1)
    if "pip" in rest or rest[:2] == ["python", "-c"]:
        sys.exit(0)
    sys.exit(subprocess.call(rest))
"""


@pytest.fixture
def fake_conda(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    (state / "envs").mkdir(parents=True)
    exe = tmp_path / "bin" / "conda"
    exe.parent.mkdir()
    exe.write_text(FAKE_CONDA)
    exe.chmod(0o755)
    return exe


def _calls(fake_conda: Path) -> list[list[str]]:
    path = fake_conda.parent.parent / "state" / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_conda_creates_missing_env_then_runs(fake_conda: Path, tmp_path: Path) -> None:
    runner = CondaRunner("ft-tools", conda=str(fake_conda), sandbox="none")
    res = runner.run(["echo", "hello"], tool="train", workdir=tmp_path / "wd", env={"A": "1"}, timeout=60)
    assert res.ok and res.log_tail == "hello"
    calls = _calls(fake_conda)
    assert calls[0] == ["env", "list", "--json"]
    assert calls[1] == ["create", "-y", "-n", "ft-tools", "python=3.11", "pip"]
    pip_calls = [c for c in calls if c[0] == "run" and "pip" in c]
    assert pip_calls[0][:6] == ["run", "-n", "ft-tools", "--no-capture-output", "python", "-m"]
    assert pip_calls[0][-2] == "-r" and pip_calls[0][-1].endswith("configs/envs/torch-cpu.txt")
    assert pip_calls[1][-2:] == ["torch==2.13.0", "torchvision==0.28.0"] and "-c" in pip_calls[1]
    assert calls[-1] == ["run", "-n", "ft-tools", "--no-capture-output", "echo", "hello"]
    # Second run: env known, no new create; a fresh runner sees the env in `conda env list`.
    CondaRunner("ft-tools", conda=str(fake_conda), sandbox="none").run(["true"], tool="eval", workdir=tmp_path)
    assert sum(1 for c in _calls(fake_conda) if c[0] == "create") == 1


def test_conda_surfaces_install_errors(fake_conda: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_PIP_FAIL", "1")
    with pytest.raises(EnvironmentFailure, match="No matching distribution found for llamafactory"):
        CondaRunner("ft-tools", conda=str(fake_conda), sandbox="none").run(["true"], tool="train", workdir=tmp_path)


def test_conda_missing_executable(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentFailure, match="conda not found"):
        CondaRunner(conda=str(tmp_path / "no-conda")).run(["true"], tool="train", workdir=tmp_path)


def test_docker_without_engine_is_one_clear_failure(monkeypatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(EnvironmentFailure, match="Docker engine not reachable: .*FT_ENV_TYPE=local"):
        connect()
    with pytest.raises(EnvironmentFailure, match="Docker engine not reachable"):
        DockerRunner().run(["true"], tool="train", workdir=Path("/tmp"))


def test_factory_by_env_type(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FT_TOOLS_ENV", str(tmp_path / "tools"))
    monkeypatch.setenv("FT_SANDBOX", "none")
    local = get_runner(load_settings(env_type="local"))
    assert local.name == "local" and local.tools_env == tmp_path / "tools"
    assert get_runner(load_settings(env_type="conda")).name == "conda"
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(EnvironmentFailure, match="Docker engine not reachable"):
        get_runner(load_settings(env_type="docker"))
    plugged = get_runner(load_settings(), name="ftagent.runners.conda:CondaRunner")
    assert plugged.name == "conda"
    with pytest.raises(UserInputError, match="Did you mean 'local'"):
        get_runner(load_settings(), name="locl")
