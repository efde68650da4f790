"""DockerRunner without an engine: DeviceRequests, mount lists, the container's environment and options."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ftagent.core.errors import EnvironmentFailure
from ftagent.runners.base import Mount
from ftagent.runners.docker import DockerRunner, gpu_device_ids
from ftagent.runners.images import ImageSpec


def test_device_requests_from_gpus_and_cuda_visible_devices(monkeypatch) -> None:
    runner = DockerRunner(use_gpu=True, client=object())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    (everything,) = runner.device_requests(None)
    assert everything["Count"] == -1 and everything["Capabilities"] == [["gpu"]] and not everything.get("DeviceIDs")
    (two,) = runner.device_requests("1, 3")
    assert two["DeviceIDs"] == ["1", "3"] and two["Capabilities"] == [["gpu"]] and two["Count"] == 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    assert runner.device_requests(None)[0]["DeviceIDs"] == ["2"]
    assert runner.device_requests("0")[0]["DeviceIDs"] == ["0"]  # the explicit argument wins
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert runner.device_requests(None) == []
    assert runner.device_requests("") == []
    assert DockerRunner(use_gpu=False, client=object()).device_requests("0,1") == []
    assert gpu_device_ids("all", {}) is None and gpu_device_ids(None, {"CUDA_VISIBLE_DEVICES": "all"}) is None


def test_mounts_hide_benchmarks_from_non_eval_tools(tmp_path: Path) -> None:
    ff = tmp_path / "ff"
    bench, model, data = ff / "benchmarks", ff / "models" / "tiny", ff / "datasets"
    for d in (bench / "demo_add", model, data):
        d.mkdir(parents=True)
    runner = DockerRunner(benchmarks_dir=bench, client=object())
    wd = tmp_path / "ws"
    mounts = [Mount(source=model), Mount(source=bench / "demo_add"), Mount(source=data),
              Mount(source=tmp_path / "out", target=Path("/out"), read_only=False),
              Mount(source=tmp_path / "missing")]
    train = runner.volumes("train", wd, mounts)
    assert train[str(wd)] == {"bind": str(wd), "mode": "rw"}
    assert train[str(model)] == {"bind": str(model), "mode": "ro"} and train[str(data)]["mode"] == "ro"
    assert train[str(tmp_path / "out")] == {"bind": "/out", "mode": "rw"} and (tmp_path / "out").is_dir()
    assert str(bench / "demo_add") not in train
    assert str(tmp_path / "missing") not in train and not (tmp_path / "missing").exists()  # no root-owned dir
    ev = runner.volumes("eval", wd, mounts)
    assert ev[str(bench / "demo_add")] == {"bind": str(bench / "demo_add"), "mode": "ro"}
    # a mount that contains the benchmark folder: a tmpfs hides it, except for eval
    whole = runner.volumes("data", wd, [Mount(source=ff)])
    assert runner.hidden_paths("data", whole) == {str(bench): "ro,size=1m"}
    assert runner.hidden_paths("eval", runner.volumes("eval", wd, [Mount(source=ff)])) == {}
    assert runner.hidden_paths("train", train) == {}
    moved = runner.volumes("data", wd, [Mount(source=ff, target=Path("/ff"))])
    assert runner.hidden_paths("data", moved) == {"/ff/benchmarks": "ro,size=1m"}


def test_environment_drops_host_paths_and_secrets(monkeypatch) -> None:
    monkeypatch.setenv("HF_HOME", "/root/.cache/huggingface")
    monkeypatch.setenv("TMPDIR", "/var/tmp/me")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    env = DockerRunner(use_gpu=False, client=object()).environment(
        {"PYTHONPATH": "/src", "PATH": "/host/bin", "FT_DATASETS_DIR": "/data"})
    assert env["HOME"] == "/tmp" and env["HF_HUB_OFFLINE"] == "1" and env["OMP_NUM_THREADS"]
    assert "HF_HOME" not in env and "TMPDIR" not in env and "OPENAI_API_KEY" not in env
    assert "CUDA_VISIBLE_DEVICES" not in env  # the DeviceRequest picks GPUs
    assert "PATH" not in env  # the image's PATH (its venv) stays
    assert env["PYTHONPATH"] == "/src" and env["FT_DATASETS_DIR"] == "/data"


def test_container_options_from_settings_values(tmp_path: Path) -> None:
    runner = DockerRunner(use_gpu=False, shm_size="2g", mem_limit="6g", network="bridge", client=object(),
                          uid=1234, gid=2345)
    opts = runner.container_options(tool="data", workdir=tmp_path, env=None, mounts=None, gpus=None)
    assert (opts["shm_size"], opts["mem_limit"], opts["network_mode"]) == ("2g", "6g", "bridge")
    assert opts["user"] == "1234:2345" and opts["working_dir"] == str(tmp_path) and opts["detach"]
    assert opts["device_requests"] == [] and opts["labels"]["org.ftagent.tool"] == "data"
    assert opts["labels"]["org.ftagent.owner"].split(":")[-2] == str(os.getpid())  # the watcher's key


def test_from_settings_reads_the_docker_settings(monkeypatch, tmp_path: Path) -> None:
    from ftagent.core.settings import load_settings
    from ftagent.runners import docker as docker_runner

    monkeypatch.setattr(docker_runner, "connect", lambda: _NoImages())
    monkeypatch.setenv("FT_FILE_PATH", str(tmp_path / "ff"))
    monkeypatch.setenv("FT_DOCKER_NETWORK", "none")
    monkeypatch.setenv("FT_DOCKER_SHM_SIZE", "1g")
    monkeypatch.setenv("FT_DOCKER_MEM_LIMIT", "3g")
    monkeypatch.setenv("FT_DOCKER_BASE_IMAGE", "my-py311:1")
    runner = DockerRunner.from_settings(load_settings())
    assert (runner.network, runner.shm_size, runner.mem_limit) == ("none", "1g", "3g")
    assert runner.benchmarks_dir == tmp_path / "ff" / "benchmarks"
    assert runner.image.startswith("ftagent-tools:") and runner._spec().base_image == "my-py311:1"


class _NoImages:
    class images:  # noqa: N801 - mimics client.images
        @staticmethod
        def get(tag):
            import docker

            raise docker.errors.ImageNotFound(tag)


def test_a_missing_prebuilt_tag_is_one_clear_error(tmp_path: Path) -> None:
    runner = DockerRunner(client=_NoImages(), image="ftagent-tools:nope")
    with pytest.raises(EnvironmentFailure, match="ftagent-tools:nope does not exist; run `ftagent env build-images`"):
        runner.run(["true"], tool="train", workdir=tmp_path)
    assert DockerRunner(client=object(), image=ImageSpec(flavour="gpu")).image.startswith("ftagent-tools:gpu-")


def test_one_container_watcher_per_process_not_per_runner(monkeypatch):
    """Many runners in one process (a job, a test run) share one watcher: it serves the owner label."""
    import subprocess as sp

    from ftagent.runners import docker as docker_mod

    started = []

    class FakePopen:
        def __init__(self, argv, **kwargs):
            started.append(argv)

        def poll(self):
            return None  # still running

    monkeypatch.setattr(docker_mod, "_WATCHER", {})
    monkeypatch.setattr(sp, "Popen", FakePopen)
    for _ in range(3):
        docker_mod.DockerRunner(client=object())._ensure_watcher()
    assert len(started) == 1 and "--docker-owner" in started[0]


def test_data_containers_get_no_gpu_train_and_eval_do(tmp_path: Path) -> None:
    """LLM-written data code gets no GPU, as in the bwrap sandbox (runners.base.tool_uses_gpu)."""
    runner = DockerRunner(use_gpu=True, client=object())
    data = runner.container_options(tool="data", workdir=tmp_path, env=None, mounts=None, gpus="0")
    train = runner.container_options(tool="train", workdir=tmp_path, env=None, mounts=None, gpus="0")
    evaluate = runner.container_options(tool="eval", workdir=tmp_path, env=None, mounts=None, gpus="0")
    assert data["device_requests"] == []
    assert train["device_requests"][0]["DeviceIDs"] == ["0"] == evaluate["device_requests"][0]["DeviceIDs"]
