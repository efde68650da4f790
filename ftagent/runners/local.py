"""The local runner (embedded default): commands run with the shared tool virtualenv.

``python``, ``llamafactory-cli``, ``opencompass`` (any executable in the tool env's ``bin``) resolve
to the tool env; one env serves ``tool="train"``, ``"eval"`` and ``"data"``. The child gets a
minimal environment built from scratch: PATH (tool env first), HOME, LANG, HF offline flags and the
like (see :data:`ftagent.runners.process.PASSTHROUGH_VARS`), plus what the caller passes in ``env``.
Nothing that looks like a secret (``*KEY*``, ``*TOKEN*`` ...) is inherited from ``os.environ``; a
caller that wants a command to see a key passes it explicitly. Commands are confined with bubblewrap
when available (:mod:`ftagent.runners.sandbox`).
"""

from __future__ import annotations

import functools
import shutil
import threading
from pathlib import Path

from ftagent.core.errors import EnvironmentFailure
from ftagent.runners.base import Mount, RunResult, ToolEnv, tool_uses_gpu
from ftagent.runners.process import passthrough_env, run_process
from ftagent.runners.sandbox import bwrap_argv, gpu_device_nodes, gpu_library_dirs, use_sandbox

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@functools.lru_cache(maxsize=1)
def _host_has_gpu() -> bool:
    from ftagent.core.hardware import detect_gpus

    return detect_gpus().gpu_count > 0


class LocalRunner:
    """Runs commands on this machine with the tool env (optionally inside bubblewrap)."""

    name = "local"
    needs_bwrap = True  # capabilities (runners/base.py): confined only by bubblewrap
    runs_on_host = True
    uses_tools_env = True  # FT_TOOLS_ENV is its env
    stops_on_event = True  # run(stop=...) ends the command's process group early

    def __init__(self, tools_env: Path, *, sandbox: str = "auto", gpu: bool | None = None) -> None:
        """Create the runner.

        Args:
            tools_env: the tool virtualenv (``FT_TOOLS_ENV`` or ``FT_FILE_PATH/envs/tools``).
            sandbox: ``auto`` | ``bwrap`` | ``none`` (``FT_SANDBOX``); ``bwrap`` fails at once when
                bubblewrap does not work here.
            gpu: whether GPUs are used; None = detect with NVML.
        """
        self.tools_env = Path(tools_env).absolute()
        self.sandbox_mode = sandbox
        self.sandboxed = use_sandbox(sandbox)
        self._gpu = gpu
        self.dev_root = Path("/dev")  # where the GPU device nodes are looked up (a test points it elsewhere)

    @classmethod
    def from_settings(cls, settings) -> LocalRunner:
        """Build from :class:`ftagent.core.settings.Settings`."""
        from ftagent.runners.toolenv import tools_env_path

        return cls(tools_env_path(settings), sandbox=settings.ft.sandbox)

    @property
    def bin_dir(self) -> Path:
        return self.tools_env / "bin"

    def _check_env(self) -> None:
        if not (self.bin_dir / "python").exists():
            raise EnvironmentFailure(
                f"tool env not found at {self.tools_env} (no bin/python); run `ftagent env setup` "
                f"or set FT_TOOLS_ENV to an existing one")

    def resolve_cmd(self, cmd: list[str]) -> list[str]:
        """Replace ``cmd[0]`` with the tool env's executable of that name when there is one."""
        if not cmd:
            raise ValueError("empty command")
        head = cmd[0]
        if "/" not in head and (self.bin_dir / head).exists():
            return [str(self.bin_dir / head), *cmd[1:]]
        return list(cmd)

    def uses_gpu(self) -> bool:
        return _host_has_gpu() if self._gpu is None else self._gpu

    def build_env(self, env: dict[str, str] | None, gpus: str | None) -> dict[str, str]:
        """The child's complete environment (see the module docstring)."""
        child = passthrough_env()
        child.update(
            PATH=f"{self.bin_dir}:{SYSTEM_PATH}",
            VIRTUAL_ENV=str(self.tools_env),
            PYTHONUNBUFFERED="1",
            LANG=child.get("LANG", "C.UTF-8"),
        )
        child.setdefault("HOME", str(Path.home()))
        if not self.uses_gpu():
            child["OMP_NUM_THREADS"] = "1"
        if gpus is not None:
            child["CUDA_VISIBLE_DEVICES"] = gpus
        if self.sandboxed:
            child["HOME"] = "/tmp"  # the real home is not visible inside the sandbox
        child.update(env or {})
        return child

    def sandbox_devices(self, tool: ToolEnv) -> list[Path]:
        """The GPU device nodes a confined command of ``tool`` gets (see :mod:`ftagent.runners.sandbox`).

        Training, the micro-batch and evaluation get every NVIDIA node the host has (none without a
        GPU; none when the runner was built with ``gpu=False``). ``tool="data"`` never does: it runs
        LLM-written data-processing code, which needs no GPU, and a GPU node is one more kernel
        interface that code could reach.
        """
        if not tool_uses_gpu(tool) or self._gpu is False:
            return []
        return gpu_device_nodes(self.dev_root)

    def command_line(self, cmd: list[str], workdir: Path, mounts: list[Mount] | None,
                     tool: ToolEnv = "train") -> list[str]:
        """The argv actually executed (wrapped in bwrap when sandboxed)."""
        resolved = self.resolve_cmd(cmd)
        if not self.sandboxed:
            return resolved
        devices = self.sandbox_devices(tool)
        return bwrap_argv(resolved, workdir=workdir, tools_env=self.tools_env, mounts=mounts,
                          executable=shutil.which("bwrap") or "bwrap", devices=devices,
                          read_only=gpu_library_dirs() if devices else None)

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
        """Run ``cmd`` in ``workdir`` with the tool env; see :class:`ftagent.runners.base.Runner`.

        Raises:
            EnvironmentFailure: when the tool env does not exist.
        """
        self._check_env()  # one shared env serves train, eval and data
        workdir = Path(workdir).absolute()
        workdir.mkdir(parents=True, exist_ok=True)
        for mount in mounts or []:
            if not mount.read_only:  # a writable output folder may not exist yet
                Path(mount.source).mkdir(parents=True, exist_ok=True)
        argv = self.command_line(cmd, workdir, mounts, tool)
        return run_process(argv, cwd=workdir, env=self.build_env(env, gpus), timeout=timeout,
                           log_file=log_file, stop=stop)
