"""The docker runner (docker SDK): one container per command.

* Images ``ftagent-llm-finetune:latest`` (tool ``train`` and ``data``) and
  ``ftagent-opencompass:latest`` (tool ``eval``) are built from ``docker/<name>/Dockerfile`` only
  when missing.
* GPUs through a ``DeviceRequest``: the ``gpus`` argument, else ``CUDA_VISIBLE_DEVICES``, else all.
* Mounts become volumes (read-only unless ``read_only=False``); the workdir is mounted read-write at
  the same path. Mounts whose source lies under the benchmark folder are dropped unless
  ``tool == "eval"``.
* Output is streamed to the log file; on timeout the container is killed. At the end files the
  container created as root are handed back to the calling user (``chown -R uid:gid``) from inside a
  short-lived container.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from ftagent.core.errors import EnvironmentFailure
from ftagent.core.paths import docker_dir
from ftagent.runners.base import Mount, RunResult, ToolEnv
from ftagent.runners.process import LogSink, passthrough_env

IMAGES = {"train": "ftagent-llm-finetune:latest", "data": "ftagent-llm-finetune:latest",
          "eval": "ftagent-opencompass:latest"}
DOCKER_DIR = docker_dir()
_DOCKERFILE_DIRS = {"ftagent-llm-finetune:latest": "llm_finetune", "ftagent-opencompass:latest": "opencompass"}


def connect():
    """A docker client, or one clear :class:`EnvironmentFailure` when no engine answers."""
    try:
        import docker

        client = docker.from_env()
        client.ping()
        return client
    except Exception as exc:  # docker.errors.DockerException, requests errors ...
        raise EnvironmentFailure(
            f"Docker engine not reachable: {exc}. Start Docker, or set FT_ENV_TYPE=local") from exc


def gpu_device_ids(gpus: str | None, environ: dict[str, str] | None = None) -> list[str] | None:
    """Device ids for the DeviceRequest: explicit ``gpus``, else CUDA_VISIBLE_DEVICES; None = all.

    An empty string means no GPU (returns ``[]``).
    """
    environ = os.environ if environ is None else environ
    value = gpus if gpus is not None else environ.get("CUDA_VISIBLE_DEVICES")
    if value is None or value.strip().lower() == "all":
        return None
    return [v.strip() for v in value.split(",") if v.strip() and v.strip() != "-1"]


class DockerRunner:
    """Runs each command in a fresh container of the tool's image."""

    name = "docker"

    def __init__(self, *, benchmarks_dir: Path | None = None, use_gpu: bool = True, shm_size: str = "16g",
                 mem_limit: str | None = None, client=None, docker_dir: Path = DOCKER_DIR) -> None:
        self.benchmarks_dir = Path(benchmarks_dir).absolute() if benchmarks_dir else None
        self.use_gpu = use_gpu
        self.shm_size = shm_size
        self.mem_limit = mem_limit
        self.docker_dir = docker_dir
        self._client = client
        self._built: set[str] = set()

    @classmethod
    def from_settings(cls, settings) -> DockerRunner:
        """Build from :class:`ftagent.core.settings.Settings`; fails at once when no engine answers."""
        from ftagent.core.hardware import detect_gpus

        runner = cls(benchmarks_dir=Path(settings.ft.file_path) / "benchmarks",
                     use_gpu=detect_gpus().gpu_count > 0)
        runner.client  # noqa: B018 - connect now: fail fast with the clear message
        return runner

    @property
    def client(self):
        if self._client is None:
            self._client = connect()
        return self._client

    def ensure_image(self, image: str) -> None:
        """Build ``image`` from its Dockerfile when the engine does not have it yet."""
        if image in self._built:
            return
        import docker

        try:
            self.client.images.get(image)
        except docker.errors.ImageNotFound:
            folder = self.docker_dir / _DOCKERFILE_DIRS[image]
            if not (folder / "Dockerfile").is_file():
                raise EnvironmentFailure(f"image {image} is missing and {folder}/Dockerfile does not exist") from None
            try:
                self.client.images.build(path=str(folder), tag=image, rm=True)
            except docker.errors.BuildError as exc:
                tail = "".join(str(chunk.get("stream", chunk)) for chunk in list(exc.build_log)[-20:])
                raise EnvironmentFailure(f"building {image} failed: {exc}\n{tail}") from exc
        self._built.add(image)

    def volumes(self, tool: ToolEnv, workdir: Path, mounts: list[Mount] | None) -> dict[str, dict[str, str]]:
        """Volume bindings: the workdir (rw) and the mounts; benchmark data only for ``eval``."""
        vols = {str(workdir): {"bind": str(workdir), "mode": "rw"}}
        for mount in mounts or []:
            source = Path(mount.source).absolute()
            if tool != "eval" and self.benchmarks_dir and (
                    source == self.benchmarks_dir or self.benchmarks_dir in source.parents):
                continue
            target = Path(mount.target) if mount.target is not None else source
            vols[str(source)] = {"bind": str(target), "mode": "ro" if mount.read_only else "rw"}
        return vols

    def device_requests(self, gpus: str | None) -> list:
        """The GPU DeviceRequest list (empty without GPUs)."""
        if not self.use_gpu:
            return []
        import docker

        ids = gpu_device_ids(gpus)
        if ids == []:
            return []
        if ids is None:
            return [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
        return [docker.types.DeviceRequest(device_ids=ids, capabilities=[["gpu"]])]

    def run(
        self,
        cmd: list[str],
        *,
        tool: ToolEnv,
        workdir: Path,
        env: dict[str, str] | None = None,
        mounts: list[Mount] | None = None,
        gpus: str | None = None,
        timeout: float | None = None,
        log_file: Path | None = None,
    ) -> RunResult:
        """Run ``cmd`` in a container; see :class:`ftagent.runners.base.Runner`.

        Raises:
            EnvironmentFailure: when the engine is unreachable or the image cannot be built.
        """
        image = IMAGES[tool]
        self.ensure_image(image)
        workdir = Path(workdir).absolute()
        workdir.mkdir(parents=True, exist_ok=True)
        environment = passthrough_env()
        environment.pop("HOME", None)
        environment.pop("CUDA_VISIBLE_DEVICES", None)  # the DeviceRequest selects the GPUs
        environment.update(env or {})
        container = self.client.containers.run(
            image, command=list(cmd), working_dir=str(workdir), environment=environment,
            volumes=self.volumes(tool, workdir, mounts), device_requests=self.device_requests(gpus),
            shm_size=self.shm_size, mem_limit=self.mem_limit, detach=True,
        )
        try:
            return self._wait(container, timeout, log_file)
        finally:
            try:
                container.remove(force=True)
            except Exception:  # noqa: BLE001 - the container may already be gone
                pass
            self.fix_ownership(image, workdir)

    def _wait(self, container, timeout: float | None, log_file: Path | None) -> RunResult:
        sink = LogSink(log_file)
        start = time.monotonic()
        pump = threading.Thread(target=_stream_logs, args=(container, sink), daemon=True)
        pump.start()
        timed_out = False
        exit_code: int | None = None
        try:
            exit_code = int(container.wait(timeout=timeout)["StatusCode"])
        except Exception:  # requests ReadTimeout / ConnectionError on timeout
            timed_out = True
            container.kill()
        pump.join(timeout=10)
        duration = time.monotonic() - start
        if timed_out:
            sink.write(f"[ftagent] timed out after {duration:.1f}s (limit {timeout}s); container killed")
        sink.close()
        return RunResult(exit_code=exit_code, duration_s=duration, timed_out=timed_out,
                         log_tail=sink.tail_text(), log_file=str(log_file) if log_file else None)

    def fix_ownership(self, image: str, workdir: Path) -> None:
        """Give files the container wrote as root back to this user (best effort)."""
        if os.getuid() == 0:
            return
        try:
            self.client.containers.run(image, command=["chown", "-R", f"{os.getuid()}:{os.getgid()}", str(workdir)],
                                       volumes={str(workdir): {"bind": str(workdir), "mode": "rw"}},
                                       user="root", remove=True)
        except Exception:  # noqa: BLE001 - cleanup must not hide the command's result
            pass


def _stream_logs(container, sink: LogSink) -> None:
    buffer = ""
    for chunk in container.logs(stream=True, follow=True):
        buffer += chunk.decode("utf-8", errors="replace")
        *lines, buffer = buffer.split("\n")
        for line in lines:
            sink.write(line)
    if buffer:
        sink.write(buffer)

