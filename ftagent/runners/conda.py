"""The conda runner: ``conda run -n <env> --no-capture-output <cmd>``.

One conda env (default ``ftagent-tools``) serves every tool. When it does not exist it is created from
the same requirement files as the local tool env (``configs/envs/``): torch first, then the tools with
the lock file as constraints, then the CPU fix. Every failure raises :class:`EnvironmentFailure` with
the tail of conda's / pip's output (never swallowed).

Commands are confined with bubblewrap exactly like the local runner's (:mod:`ftagent.runners.sandbox`):
the conda installation and the env are visible read-only, the working directory read-write, the
caller's mounts as given; ``FT_FILE_PATH`` (benchmark data), ``$HOME`` and other sessions are not.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

from ftagent.core.errors import EnvironmentFailure
from ftagent.runners.base import Mount, RunResult, ToolEnv, tool_uses_gpu
from ftagent.runners.process import passthrough_env, run_process, tool_value
from ftagent.runners.sandbox import bwrap_argv, gpu_device_nodes, gpu_library_dirs, use_sandbox

DEFAULT_ENV_NAME = "ftagent-tools"
PYTHON_VERSION = "3.11"


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.splitlines()[-lines:])


class CondaRunner:
    """Runs commands inside a conda env created on demand."""

    name = "conda"
    needs_bwrap = True  # capabilities (runners/base.py): confined only by bubblewrap
    runs_on_host = True
    stops_on_event = True  # run(stop=...) ends the command's process group early

    def __init__(self, env_name: str = DEFAULT_ENV_NAME, *, conda: str | None = None, gpu: bool = False,
                 timeout_create: float = 3600, sandbox: str = "auto") -> None:
        """Create the runner.

        Args:
            env_name: the conda env every tool runs in.
            conda: the conda (or mamba) executable; default: found on PATH.
            gpu: whether GPUs are used.
            timeout_create: seconds allowed for each env-creation command.
            sandbox: ``auto`` | ``bwrap`` | ``none`` (``FT_SANDBOX``), as for the local runner.
        """
        self.env_name = env_name
        self.conda = conda or shutil.which("conda") or shutil.which("mamba") or "conda"
        self.gpu = gpu
        self.timeout_create = timeout_create
        self.sandboxed = use_sandbox(sandbox)
        self._ready = False
        self._env_prefix: Path | None = None

    @classmethod
    def from_settings(cls, settings) -> CondaRunner:
        """Build from :class:`ftagent.core.settings.Settings` (GPU detected with NVML)."""
        from ftagent.core.hardware import detect_gpus

        return cls(gpu=detect_gpus().gpu_count > 0, sandbox=settings.ft.sandbox)

    def _conda(self, args: list[str], timeout: float) -> subprocess.CompletedProcess:
        try:
            return subprocess.run([self.conda, *args], capture_output=True, text=True, timeout=timeout,
                                  check=False)
        except FileNotFoundError as exc:
            raise EnvironmentFailure(f"conda not found ({self.conda}); install it or set FT_ENV_TYPE=local") from exc
        except subprocess.TimeoutExpired as exc:
            raise EnvironmentFailure(f"`conda {' '.join(args[:3])}` timed out after {timeout}s") from exc

    def _checked(self, args: list[str], what: str, timeout: float) -> str:
        proc = self._conda(args, timeout)
        if proc.returncode != 0:
            raise EnvironmentFailure(
                f"{what} failed (exit {proc.returncode}) for conda env '{self.env_name}':\n"
                f"{_tail(proc.stdout + proc.stderr)}")
        return proc.stdout

    def env_exists(self) -> bool:
        """True when ``conda env list --json`` lists an env named ``env_name``."""
        out = self._checked(["env", "list", "--json"], "conda env list", 120)
        try:
            envs = json.loads(out).get("envs", [])
        except json.JSONDecodeError as exc:
            raise EnvironmentFailure(f"unexpected `conda env list --json` output: {out[:200]}") from exc
        for prefix in envs:
            if Path(prefix).name == self.env_name:
                self._env_prefix = Path(prefix)
                return True
        return False

    def visible_prefixes(self) -> list[Path]:
        """What a confined command must see read-only: the conda installation and the env."""
        exe = Path(shutil.which(self.conda) or self.conda).resolve()
        base = exe.parent.parent if exe.parent.name in ("bin", "condabin") else exe.parent
        return [base] + ([self._env_prefix] if self._env_prefix is not None else [])

    def install_commands(self) -> list[tuple[str, list[str]]]:
        """The conda commands that create and fill the env: ``(description, args)`` pairs."""
        from ftagent.runners.toolenv import cpu_fix_script, pip_install_steps

        run = ["run", "-n", self.env_name, "--no-capture-output"]
        steps = [("conda create", ["create", "-y", "-n", self.env_name, f"python={PYTHON_VERSION}", "pip"])]
        for desc, pip_args in pip_install_steps(self.gpu):
            steps.append((desc, [*run, "python", "-m", "pip", *pip_args]))
        if not self.gpu:
            steps.append(("CPU fix", [*run, "python", "-c", cpu_fix_script()]))
        return steps

    def ensure_env(self) -> None:
        """Create the env when missing (once per runner)."""
        if self._ready:
            return
        if not self.env_exists():
            for desc, args in self.install_commands():
                self._checked(args, desc, self.timeout_create)
        self._ready = True

    def command_line(self, cmd: list[str]) -> list[str]:
        """The argv actually executed."""
        return [self.conda, "run", "-n", self.env_name, "--no-capture-output", *cmd]

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
        """Run ``cmd`` in the conda env, confined by bubblewrap unless ``FT_SANDBOX`` says otherwise
        (then ``mounts`` do not matter: the host filesystem is visible)."""
        self.ensure_env()
        child = passthrough_env()
        conda_dir = [str(Path(self.conda).parent)] if "/" in self.conda else []
        child["PATH"] = os.pathsep.join([*conda_dir, os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")])
        conda_vars = {k: tool_value(k, v) for k, v in os.environ.items() if k.startswith(("CONDA_", "MAMBA_"))}
        child.update({k: v for k, v in conda_vars.items() if v is not None})
        child["PYTHONUNBUFFERED"] = "1"
        if not self.gpu:
            child["OMP_NUM_THREADS"] = "1"
        if gpus is not None:
            child["CUDA_VISIBLE_DEVICES"] = gpus
        if self.sandboxed:
            child["HOME"] = "/tmp"  # the real home is not visible inside the sandbox
        child.update(env or {})
        workdir = Path(workdir).absolute()
        workdir.mkdir(parents=True, exist_ok=True)
        argv = self.command_line(cmd)
        if self.sandboxed:
            for mount in mounts or []:
                if not mount.read_only:
                    Path(mount.source).mkdir(parents=True, exist_ok=True)
            # the GPU nodes for training and evaluation, never for LLM-written data code (as the local runner)
            devices = gpu_device_nodes() if self.gpu and tool_uses_gpu(tool) else []
            visible = self.visible_prefixes() + (gpu_library_dirs() if devices else [])
            argv = bwrap_argv(argv, workdir=workdir, tools_env=None, mounts=mounts, devices=devices,
                              executable=shutil.which("bwrap") or "bwrap", read_only=visible)
        return run_process(argv, cwd=workdir, env=child, timeout=timeout, log_file=log_file, stop=stop)
