"""The docker runner (docker SDK): one container per command, all in the one tool image.

* The image ``ftagent-tools:<flavour>-<hash>`` (see :mod:`ftagent.runners.images`) serves
  ``tool="train"``, ``"eval"`` and ``"data"``, like the local runner's shared tool env. It is built
  on first use when the engine does not have its tag (``ftagent env build-images`` builds it ahead).
* Containers run as the calling user (``uid:gid``, ``HOME=/tmp``), so every file they write in the
  workspace belongs to that user afterwards.
* Mounts keep their host path inside the container (read-only unless ``read_only=False``); the
  workdir is mounted read-write. The benchmark folder is visible only to ``tool="eval"``: for the
  other tools, mounts under it are dropped and, when a mount contains it, an empty tmpfs hides it.
* GPUs through a ``DeviceRequest``: the ``gpus`` argument, else ``CUDA_VISIBLE_DEVICES``, else all.
* ``--shm-size``, the memory limit and the network (``FT_DOCKER_NETWORK``, default ``host`` so a
  script reaches an LLM server on the host's loopback) come from the settings.
* Output is streamed to the log file while the command runs; on timeout the container is killed
  and ``timed_out`` is set.
* Containers die with ftagent: each carries the labels ``org.ftagent.session`` and
  ``org.ftagent.owner`` (host:pid:start of this process) and is recorded in the child registry
  (:mod:`ftagent.runners.reaper`) while it runs; a watcher process (:mod:`ftagent.runners.supervise`,
  started with the first container) removes this process's containers as soon as it dies, SIGKILL
  included, and the next session's reaper removes any the watcher could not.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from ftagent.core.errors import EnvironmentFailure
from ftagent.core.paths import docker_logs_dir
from ftagent.core.untrusted import UnsafeEntry
from ftagent.runners import reaper
from ftagent.runners.base import Mount, RunResult, ToolEnv, tool_uses_gpu
from ftagent.runners.images import ImageSpec, build_image, image_exists
from ftagent.runners.mounts import with_hf_blobs
from ftagent.runners.process import LogSink, passthrough_env

log = logging.getLogger(__name__)

# host paths that mean nothing inside a container (unless the caller passes them explicitly)
_HOST_PATH_VARS = ("HOME", "TMPDIR", "HF_HOME", "HF_HUB_CACHE", "HF_DATASETS_CACHE", "COMPASS_DATA_CACHE",
                   "CUDA_VISIBLE_DEVICES")
_IMAGE_VARS = ("PATH", "VIRTUAL_ENV")  # the image's own, never the host's


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


def gpu_device_ids(gpus: str | None, environ: Mapping[str, str] | None = None) -> list[str] | None:
    """Device ids for the DeviceRequest: explicit ``gpus``, else CUDA_VISIBLE_DEVICES; None = all.

    An empty string means no GPU (returns ``[]``).
    """
    env = os.environ if environ is None else environ
    value = gpus if gpus is not None else env.get("CUDA_VISIBLE_DEVICES")
    if value is None or value.strip().lower() == "all":
        return None
    return [v.strip() for v in value.split(",") if v.strip() and v.strip() != "-1"]


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


# One watcher per ftagent process, not per runner: it removes every container labelled with this
# process's owner label, so a second one adds nothing (a job or test process that builds many runners
# would otherwise keep one idle watcher per runner until it exits).
_WATCHER: dict[str, subprocess.Popen] = {}
_WATCHER_LOCK = threading.Lock()


def _ensure_process_watcher() -> None:
    from ftagent.runners.supervise import watcher_argv

    label = reaper.Owner.current().label
    with _WATCHER_LOCK:
        running = _WATCHER.get(label)
        if running is not None and running.poll() is None:
            return
        env = {k: v for k, v in os.environ.items() if k.startswith("DOCKER_") or k in ("PATH", "HOME")}
        # a session of its own: a Ctrl-C or group kill of ftagent must not take the watcher first
        _WATCHER[label] = subprocess.Popen(watcher_argv(label), env=env, stdin=subprocess.DEVNULL,
                                           stdout=subprocess.DEVNULL, start_new_session=True)


class DockerRunner:
    """Runs each command in a fresh container of the tool image."""

    name = "docker"
    confines_itself = True  # capabilities (runners/base.py): a container, no bubblewrap needed
    stops_on_event = True  # run(stop=...) stops the container early

    def __init__(self, *, benchmarks_dir: Path | None = None, use_gpu: bool = True, shm_size: str = "16g",
                 mem_limit: str | None = None, network: str | None = "host", client=None,
                 image: ImageSpec | str | None = None, build_network: str | None = "host",
                 build_log_dir: Path | None = None, uid: int | None = None, gid: int | None = None) -> None:
        """Create the runner.

        Args:
            benchmarks_dir: evaluation data, mounted only into ``tool="eval"`` containers.
            use_gpu: request GPUs (``DeviceRequest``) for the containers.
            shm_size: ``--shm-size``.
            mem_limit: ``--memory`` (None = unlimited).
            network: ``--network`` (``host`` | ``bridge`` | ``none`` | a network name).
            client: a docker client (default: connect on first use).
            image: the image spec to build/use, or a ready image tag (default: the CPU/GPU spec of
                this machine's pip setup).
            build_network: the network of image builds.
            build_log_dir: where image build logs go (default: the system temp folder).
            uid, gid: the user the containers run as (default: the calling user).
        """
        self.benchmarks_dir = Path(benchmarks_dir).absolute() if benchmarks_dir else None
        self.use_gpu = use_gpu
        self.shm_size = shm_size
        self.mem_limit = mem_limit
        self.network = network
        self.build_network = build_network
        self.build_log_dir = Path(build_log_dir) if build_log_dir else None
        self.uid = os.getuid() if uid is None else uid
        self.gid = os.getgid() if gid is None else gid
        self._client = client
        self._image = image
        self._ready: str | None = None
        self._lock = threading.Lock()

    @classmethod
    def reaper_client(cls):
        """The client the reaper ends a dead run's containers with (capability ``reaps_leftovers``);
        None when no engine answers (the runner itself then reports the missing engine)."""
        try:
            return connect()
        except EnvironmentFailure:
            return None

    @classmethod
    def from_settings(cls, settings) -> DockerRunner:
        """Build from :class:`ftagent.core.settings.Settings`; fails at once when no engine answers."""
        from ftagent.core.hardware import detect_gpus
        from ftagent.core.paths import benchmarks_dir
        from ftagent.runners.images import spec_from_settings

        ft = settings.ft
        client = connect()  # fail fast with the clear message
        gpu = detect_gpus().gpu_count > 0
        spec = spec_from_settings(settings, flavour="gpu" if gpu else "cpu", client=client)
        return cls(benchmarks_dir=benchmarks_dir(ft.file_path), use_gpu=gpu, shm_size=ft.docker_shm_size,
                   mem_limit=ft.docker_mem_limit, network=ft.docker_network, client=client, image=spec,
                   build_network=ft.docker_build_network, build_log_dir=docker_logs_dir(ft.file_path))

    @property
    def client(self):
        if self._client is None:
            self._client = connect()
        return self._client

    @property
    def image(self) -> str:
        """The tool image's tag (computed, not built; see :meth:`image_tag`)."""
        spec = self._spec()
        return spec if isinstance(spec, str) else spec.tag

    def _spec(self) -> ImageSpec | str:
        return self._image if self._image is not None else ImageSpec(flavour="gpu" if self.use_gpu else "cpu")

    def image_tag(self) -> str:
        """The tag of the image the containers run (building it first when the engine lacks it).

        Raises:
            EnvironmentFailure: when the image is missing and cannot be built.
        """
        with self._lock:
            if self._ready is None:
                self._ready = self._ensure_image()
            return self._ready

    def _ensure_image(self) -> str:
        spec = self._spec()
        if isinstance(spec, str):
            if not image_exists(self.client, spec):
                raise EnvironmentFailure(f"docker image {spec} does not exist; run `ftagent env build-images`")
            return spec
        tag = spec.tag
        if image_exists(self.client, tag):
            return tag
        log_dir = self.build_log_dir or Path(os.environ.get("TMPDIR", "/tmp"))
        log_file = log_dir / f"build-{tag.replace(':', '-')}.log"
        log.warning("docker image %s is missing; building it now (log: %s)", tag, log_file)
        result = build_image(self.client, spec, network_mode=self.build_network, log_file=log_file,
                             on_step=lambda s: log.info("building %s: step %d/%d %s", tag, s.number, s.total,
                                                        s.instruction[:80]))
        log.warning("built %s in %.0fs", tag, result.duration_s)
        return tag

    def volumes(self, tool: ToolEnv, workdir: Path, mounts: list[Mount] | None) -> dict[str, dict[str, str]]:
        """Volume bindings: the workdir (rw) and the existing mounts; benchmark data only for ``eval``.

        A mount inside a Hugging Face cache snapshot brings its repo's ``blobs`` (read-only), where the
        snapshot's symlinks point (:func:`ftagent.runners.mounts.with_hf_blobs`).
        """
        vols = {str(workdir): {"bind": str(workdir), "mode": "rw"}}
        for mount in with_hf_blobs(mounts or [], resolve_sources=False):
            source = Path(mount.source).absolute()
            if tool != "eval" and self.benchmarks_dir and _inside(source, self.benchmarks_dir):
                continue
            if not source.exists():
                if mount.read_only:
                    continue  # Docker would create it on the host, owned by root
                source.mkdir(parents=True, exist_ok=True)
            target = Path(mount.target) if mount.target is not None else source
            vols[str(source)] = {"bind": str(target), "mode": "ro" if mount.read_only else "rw"}
        return vols

    def hidden_paths(self, tool: ToolEnv, volumes: dict[str, dict[str, str]]) -> dict[str, str]:
        """tmpfs mounts that hide the benchmark folder inside a non-eval container's other mounts."""
        if tool == "eval" or self.benchmarks_dir is None:
            return {}
        bench = self.benchmarks_dir
        for source, spec in volumes.items():
            if _inside(bench, Path(source)):
                hidden = Path(spec["bind"]) / bench.relative_to(source)
                return {str(hidden): "ro,size=1m"}
        return {}

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

    def environment(self, env: dict[str, str] | None) -> dict[str, str]:
        """The container's variables: the safe host subset without host paths, then the caller's ``env``."""
        child = {k: v for k, v in passthrough_env().items() if k not in _HOST_PATH_VARS}
        child.update(HOME="/tmp", USER=child.get("USER") or "ftagent", PYTHONUNBUFFERED="1",
                     LANG=child.get("LANG", "C.UTF-8"))
        if not self.use_gpu:
            child["OMP_NUM_THREADS"] = child.get("OMP_NUM_THREADS", "1")
        child.update({k: v for k, v in (env or {}).items() if k not in _IMAGE_VARS})
        return child

    def container_options(self, *, tool: ToolEnv, workdir: Path, env: dict[str, str] | None,
                          mounts: list[Mount] | None, gpus: str | None) -> dict:
        """Keyword arguments of ``client.containers.run`` (without image and command)."""
        volumes = self.volumes(tool, workdir, mounts)
        return dict(working_dir=str(workdir), environment=self.environment(env), volumes=volumes,
                    tmpfs=self.hidden_paths(tool, volumes),
                    device_requests=self.device_requests(gpus) if tool_uses_gpu(tool) else [],
                    shm_size=self.shm_size, mem_limit=self.mem_limit, network_mode=self.network,
                    user=f"{self.uid}:{self.gid}", detach=True, labels=self.labels(tool))

    def labels(self, tool: ToolEnv) -> dict[str, str]:
        """The tool, the session and this process (the watcher and the reaper find containers by them)."""
        return {"org.ftagent.tool": tool, reaper.SESSION_LABEL: reaper.current_session() or "",
                reaper.OWNER_LABEL: reaper.Owner.current().label}

    def _ensure_watcher(self) -> None:
        """Start the process that removes this process's containers once it dies (one per process)."""
        _ensure_process_watcher()

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
        stop: threading.Event | None = None,
    ) -> RunResult:
        """Run ``cmd`` in a container; see :class:`ftagent.runners.base.Runner`.

        Raises:
            EnvironmentFailure: when the engine is unreachable or the image cannot be built.
        """
        image = self.image_tag()
        workdir = Path(workdir).absolute()
        workdir.mkdir(parents=True, exist_ok=True)
        options = self.container_options(tool=tool, workdir=workdir, env=env, mounts=mounts, gpus=gpus)
        try:  # opened before the container starts, never through a link it could plant (issue 39 item 1)
            sink = LogSink(log_file, root=workdir)
        except UnsafeEntry as exc:
            return RunResult(exit_code=None, duration_s=0.0, log_tail=f"[ftagent] not run: its log {exc.strerror}")
        self._ensure_watcher()
        try:
            container = self.client.containers.run(image, command=list(cmd), **options)
        except BaseException:
            sink.close()
            raise
        record = reaper.record_container(container.id, list(cmd))
        try:
            return self._wait(container, timeout, log_file, stop, sink)
        finally:  # also on KeyboardInterrupt / SIGTERM
            try:
                container.remove(force=True)
            except Exception:  # noqa: BLE001 - the container may already be gone
                pass
            reaper.forget(record)

    def _wait(self, container, timeout: float | None, log_file: Path | None,
              stop: threading.Event | None = None, sink: LogSink | None = None) -> RunResult:
        import requests

        sink = sink if sink is not None else LogSink(log_file)
        start = time.monotonic()
        pump = threading.Thread(target=_stream_logs, args=(container, sink), daemon=True)
        pump.start()
        done = threading.Event()
        if stop is not None:
            threading.Thread(target=_stop_when, args=(stop, done, container), daemon=True).start()
        timed_out = False
        exit_code: int | None = None
        try:
            exit_code = int(container.wait(timeout=timeout)["StatusCode"])
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
            timed_out = True
            try:
                container.kill()
            except Exception:  # noqa: BLE001 - it may have exited just now
                pass
        done.set()
        pump.join(timeout=10)
        duration = time.monotonic() - start
        if timed_out:
            sink.write(f"[ftagent] timed out after {duration:.1f}s (limit {timeout}s); container killed")
        elif stop is not None and stop.is_set():
            sink.write(f"[ftagent] stopped on request after {duration:.1f}s (exit {exit_code})")
        sink.close()
        return RunResult(exit_code=exit_code, duration_s=duration, timed_out=timed_out,
                         log_tail=sink.tail_text(), log_file=str(log_file) if log_file else None)


def _stop_when(stop: threading.Event, done: threading.Event, container, poll_s: float = 0.5) -> None:
    """Stop ``container`` (SIGTERM, SIGKILL after 10 s) once ``stop`` is set, unless it ended (``done``)."""
    while not done.wait(poll_s):
        if stop.is_set():
            try:
                container.stop(timeout=10)
            except Exception:  # noqa: BLE001 - it may have exited just now
                pass
            return


def _stream_logs(container, sink: LogSink) -> None:
    buffer = ""
    try:
        for chunk in container.logs(stream=True, follow=True):
            buffer += chunk.decode("utf-8", errors="replace")
            *lines, buffer = buffer.split("\n")
            for line in lines:
                sink.write(line)
    except Exception:  # noqa: BLE001 - the container was killed/removed under the stream
        pass
    if buffer:
        sink.write(buffer)
