"""The shared tool virtualenv (LLaMA-Factory + OpenCompass + peft): location, setup and check.

One env serves training, evaluation and data scripts, so a model saved by training always loads in
evaluation (same transformers major). Its location is ``FT_TOOLS_ENV`` or ``FT_FILE_PATH/envs/tools``.

Setup (``ftagent env setup``), following cpu-recipes §2:

1. ``python -m venv``;
2. torch on its own first (``configs/envs/torch-cpu.txt`` or ``torch-gpu.txt``);
3. ``pip install -c tools.lock.txt -r tools.txt torch==2.13.0 torchvision==0.28.0`` (torch and
   torchvision pinned in the same command);
4. on GPU: ``tools-gpu.txt`` (DeepSpeed, bitsandbytes) the same way; on CPU: uninstall torchvision
   and delete ``torchaudio/lib/*.so`` (CUDA-linked PyPI wheels);
5. verify the imports (and ``+cpu`` torch on CPU).

On a GPU machine a second env holds vLLM (``FT_FILE_PATH/envs/vllm``, ``configs/envs/vllm.txt``):
no vLLM release built for torch 2.13 shares an env with OpenCompass 0.5.4 (see vllm.txt). Its
location, check and setup are :func:`vllm_env_path`, :func:`vllm_available`, :func:`setup_vllm_env`
(module :mod:`ftagent.runners.vllmenv`).

A marker file in the env holds the hash of the requirement files; setup is skipped while it matches.

Each step runs under the supervisor of :mod:`ftagent.runners.supervise` (leader of its own process
group, recorded in the child registry while it runs), so a killed ``ftagent env setup`` takes its pip
with it; an OS file lock in the env folder (:func:`setup_lock`) keeps a second setup from writing the
same env at the same time (issue 34 item 3).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, Field

from ftagent.core.errors import EnvironmentFailure, UserInputError
from ftagent.core.paths import config_file, envs_dir
from ftagent.runners import reaper
from ftagent.runners.cudacheck import CUDA_PROBE, CudaProbe, CudaVerdict, cuda_verdict
from ftagent.runners.heartbeat import Heartbeat, latest_pip_line

TORCH_PIN = "torch==2.13.0"
TORCHVISION_PIN = "torchvision==0.28.0"
MARKER = ".ftagent_tools.json"
SETUP_LOG = "ftagent-setup.log"
SETUP_LOCK = ".ftagent-setup.lock"
SETUP_HOLDER = ".ftagent-setup.holder.json"
CHECKED_MODULES = ("torch", "transformers", "llamafactory", "opencompass", "peft")
ENVS_DIR = config_file("envs")


def tools_env_path(settings) -> Path:
    """The tool env of these settings: ``FT_TOOLS_ENV``, else ``FT_FILE_PATH/envs/tools``."""
    return Path(settings.ft.tools_env or envs_dir(settings.ft.file_path) / "tools").absolute()


def tools_python(env_path: Path) -> Path:
    """The env's python executable."""
    return Path(env_path) / "bin" / "python"


def requirement_files(gpu: bool, envs_dir: Path = ENVS_DIR) -> list[Path]:
    """The files that define the env, in install order (torch, tools, lock[, GPU extras])."""
    files = [envs_dir / ("torch-gpu.txt" if gpu else "torch-cpu.txt"), envs_dir / "tools.txt",
             envs_dir / "tools.lock.txt"]
    return files + [envs_dir / "tools-gpu.txt"] if gpu else files


def requirements_hash(gpu: bool, envs_dir: Path = ENVS_DIR) -> str:
    """sha256 over the requirement files, the pins and the CPU/GPU flavour."""
    h = hashlib.sha256(f"{TORCH_PIN} {TORCHVISION_PIN} gpu={gpu}\n".encode())
    for path in requirement_files(gpu, envs_dir):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def pip_install_steps(gpu: bool, envs_dir: Path = ENVS_DIR) -> list[tuple[str, list[str]]]:
    """``(description, pip arguments)`` for the two installs (shared with the conda runner)."""
    torch_req, tools_req, lock, *gpu_extra = requirement_files(gpu, envs_dir)
    steps = [
        ("install torch", ["install", "-r", str(torch_req)]),
        ("install LLaMA-Factory + OpenCompass",
         ["install", "-c", str(lock), "-r", str(tools_req), TORCH_PIN, TORCHVISION_PIN]),
    ]
    for extra in gpu_extra:  # GPU only: DeepSpeed, bitsandbytes
        steps.append(("install DeepSpeed + bitsandbytes (GPU)",
                      ["install", "-c", str(lock), "-r", str(extra), TORCH_PIN, TORCHVISION_PIN]))
    return steps


def cpu_fix_script() -> str:
    """Python code (run by the env's python) that removes the CUDA-linked torchvision/torchaudio parts."""
    return (
        "import glob, os, subprocess, sys, sysconfig\n"
        "subprocess.run([sys.executable, '-m', 'pip', 'uninstall', '-y', 'torchvision'], check=True)\n"
        "sp = sysconfig.get_paths()['purelib']\n"
        "for so in glob.glob(os.path.join(sp, 'torchaudio', 'lib', '*.so')):\n"
        "    os.remove(so)\n"
        "print('cpu fix applied')\n"
    )


# Runs in the tool env's python, where ftagent is not installed (a wheel install, any cwd): standard
# library and the checked tools only; run with ``-I`` so the caller's folder (a source checkout) cannot
# make an import of ftagent work by accident (issue 32 item 2).
VERIFY_SCRIPT = CUDA_PROBE + """
import importlib, json, sys
out = {"versions": {}, "errors": []}
for name in sys.argv[1:]:
    try:
        out["versions"][name] = str(getattr(importlib.import_module(name), "__version__", "?"))
    except Exception as exc:
        out["errors"].append(f"import {name}: {type(exc).__name__}: {str(exc)[:300]}")
try:
    from llamafactory.train.tuner import run_exp  # noqa: F401
except Exception as exc:
    out["errors"].append(f"from llamafactory.train.tuner import run_exp: {type(exc).__name__}: {str(exc)[:300]}")
out["cuda_probe"] = _cuda_probe()
print("FTAGENT_CHECK " + json.dumps(out))
"""


class ToolEnvReport(BaseModel):
    """What ``check_tools_env`` found."""

    path: Path
    exists: bool
    versions: dict[str, str] = Field(default_factory=dict)
    torch_cpu: bool | None = None
    gpu_expected: bool = False
    marker_current: bool = False
    errors: list[str] = Field(default_factory=list)  # what the imports found (a reinstall may repair it)
    driver_version: str | None = None  # the host's NVIDIA driver (NVML)
    cuda: CudaVerdict | None = None  # GPU envs: torch against the driver (a reinstall does not repair it)

    @property
    def imports_ok(self) -> bool:
        return self.exists and not self.errors and all(m in self.versions for m in CHECKED_MODULES)

    @property
    def ok(self) -> bool:
        return self.imports_ok and (self.cuda is None or self.cuda.ok)

    def problems(self) -> list[str]:
        """Every error, the CUDA verdict's included."""
        return self.errors + ([self.cuda.message] if self.cuda is not None and not self.cuda.ok else [])


class SetupResult(BaseModel):
    """What ``setup_tools_env`` did."""

    path: Path
    skipped: bool
    duration_s: float
    report: ToolEnvReport


def read_marker(env_path: Path) -> dict:
    """The env's marker (empty when missing or unreadable)."""
    try:
        return json.loads((Path(env_path) / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def marker_current(env_path: Path, gpu: bool, envs_dir: Path = ENVS_DIR) -> bool:
    """True when the env exists and was set up from the current requirement files."""
    return (tools_python(env_path).exists()
            and read_marker(env_path).get("requirements_sha256") == requirements_hash(gpu, envs_dir))


def check_tools_env(env_path: Path, gpu: bool | None = None, timeout: float = 300) -> ToolEnvReport:
    """Import the tools in the env and report versions and problems (never raises).

    With ``gpu`` (default: NVML sees a GPU) the env's torch is also checked against the host's driver
    (:func:`ftagent.runners.cudacheck.cuda_verdict`: CUDA build vs driver, ``is_available()``, a CUDA op).
    """
    from ftagent.core.hardware import detect_gpus

    env_path = Path(env_path).absolute()
    hardware = detect_gpus()
    if gpu is None:
        gpu = hardware.gpu_count > 0
    report = ToolEnvReport(path=env_path, exists=tools_python(env_path).exists(), gpu_expected=gpu,
                           driver_version=hardware.driver_version)
    if not report.exists:
        report.errors.append(f"no tool env at {env_path}; run `ftagent env setup`")
        return report
    report.marker_current = marker_current(env_path, gpu)
    try:
        proc = subprocess.run([str(tools_python(env_path)), "-I", "-c", VERIFY_SCRIPT, *CHECKED_MODULES],
                              capture_output=True, text=True, timeout=timeout, env=_pip_env(), check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        report.errors.append(f"cannot run the env's python: {exc}")
        return report
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("FTAGENT_CHECK ")), None)
    if line is None:
        report.errors.append(f"check script failed (exit {proc.returncode}): {last_error_line(proc.stderr)}")
        return report
    found = json.loads(line.split(" ", 1)[1])
    report.versions, report.errors = found["versions"], found["errors"]
    torch_version = report.versions.get("torch")
    if torch_version:
        report.torch_cpu = torch_version.endswith("+cpu")
        if not gpu and not report.torch_cpu:
            report.errors.append(f"torch {torch_version} is not the CPU build on a machine without a GPU")
    if gpu and found.get("cuda_probe") is not None:
        report.cuda = cuda_verdict(hardware.driver_version, CudaProbe.model_validate(found["cuda_probe"]),
                                   python=str(tools_python(env_path)), packages=(TORCH_PIN, TORCHVISION_PIN))
    return report


def last_error_line(stderr: str) -> str:
    """The exception line of a Python traceback (or the last line of any output): one line, no traceback."""
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    return lines[-1][-500:] if lines else "(no output)"


def _pip_env() -> dict[str, str]:
    from ftagent.runners.process import passthrough_env

    env = passthrough_env()
    env.update({k: v for k, v in __import__("os").environ.items() if k.startswith("PIP_")})
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["OMP_NUM_THREADS"] = "1"
    return env


def _supervised_run(argv: list[str], fh, timeout: float) -> int:
    """Run ``argv`` under the supervisor (its own process group, recorded while it runs); its exit status.

    The whole group dies with this process (the supervisor's watch), on a timeout and on any exception
    here (KeyboardInterrupt included): a pip never outlives ``env setup``.
    """
    from ftagent.runners.process import kill_tree, kill_tree_if_alive, start_supervised

    proc = start_supervised(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=_pip_env())
    record = reaper.record_process(proc.pid, argv)
    try:
        return proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            kill_tree(proc.pid)
            proc.wait()
        kill_tree_if_alive(proc.pid)  # what the step left behind in its group
        reaper.forget(record)


def _run_step(argv: list[str], what: str, log: Path, timeout: float,
              say: Callable[[str], None] | None = None) -> None:
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(f"\n$ {' '.join(argv)}\n")
        fh.flush()
        offset = fh.tell()
        try:
            # pip is quiet for minutes at a time: a heartbeat with its latest line at least every 10 s
            with Heartbeat(what, say or (lambda _m: None), detail=lambda: latest_pip_line(log, offset)):
                returncode = _supervised_run(argv, fh, timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EnvironmentFailure(f"{what} failed: {exc} (log: {log})") from exc
    if returncode != 0:
        tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-25:])
        raise EnvironmentFailure(f"{what} failed (exit {returncode}); log: {log}\n{tail}")


@contextmanager
def setup_lock(env_path: Path, timeout: float = 0) -> Iterator[None]:
    """Hold the env folder's setup lock (an OS file lock: a killed holder releases it with its death).

    Raises:
        UserInputError: another process still holds it after ``timeout`` seconds; the message names it
            (pid, host, start) — the CLI exits 2.
    """
    from filelock import FileLock, Timeout

    from ftagent.engine.session import LockHolder

    env_path = Path(env_path)
    env_path.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(env_path / SETUP_LOCK))
    holder_file = env_path / SETUP_HOLDER
    try:
        lock.acquire(timeout=timeout)
    except Timeout:
        try:
            who = LockHolder.model_validate_json(holder_file.read_text(encoding="utf-8")).describe()
        except (OSError, ValueError):
            who = "another process"
        raise UserInputError(f"another `ftagent env setup` ({who}) is installing into {env_path}; wait for it to "
                             "finish (or stop it), then run `ftagent env setup` again") from None
    try:
        holder_file.write_text(LockHolder(pid=os.getpid(), host=socket.gethostname(),
                                          started_at=time.time()).model_dump_json(), encoding="utf-8")
        yield
    finally:
        holder_file.unlink(missing_ok=True)
        lock.release()


def install_venv(env_path: Path, steps: list[tuple[str, list[str]]], *, base_python: str,
                 pip_cmd: list[str] | None, step_timeout: float, say: Callable[[str], None]) -> Path:
    """Create the venv at ``env_path`` when missing, then run each ``(what, pip args)`` step in it.

    Every step is logged to ``<env>/ftagent-setup.log`` (returned); a failing step raises
    :class:`EnvironmentFailure` with the log's tail.
    """
    log = env_path / SETUP_LOG
    if not tools_python(env_path).exists():
        say(f"creating venv {env_path}")
        _run_step([base_python, "-m", "venv", str(env_path)], "python -m venv", log, step_timeout, say)
    pip = pip_cmd or [str(tools_python(env_path)), "-m", "pip"]
    for what, args in steps:
        say(what)
        _run_step([*pip, *args], what, log, step_timeout, say)
    return log


def _raise_on_cuda(report: ToolEnvReport) -> None:
    """A GPU env whose torch cannot use this machine's driver fails setup with the verdict's message and fix."""
    if report.cuda is not None and not report.cuda.ok:
        raise EnvironmentFailure(f"tool env {report.path}: {report.cuda.message}")


def setup_tools_env(
    env_path: Path,
    gpu: bool,
    *,
    force: bool = False,
    base_python: str = sys.executable,
    pip_cmd: list[str] | None = None,
    envs_dir: Path = ENVS_DIR,
    step_timeout: float = 3600,
    progress: Callable[[str], None] | None = None,
    verify: bool = True,
    lock_timeout: float = 0,
) -> SetupResult:
    """Create (or reuse) the tool env at ``env_path``.

    Args:
        env_path: where the venv lives.
        gpu: install the GPU flavour (no CPU fix, no ``+cpu`` check).
        force: reinstall even when the marker matches.
        base_python: interpreter that creates the venv.
        pip_cmd: pip invocation (default ``<env>/bin/python -m pip``); tests pass a fake.
        envs_dir: folder with the requirement files.
        step_timeout: seconds per install step.
        progress: called with a short message before each step (the CLI shows a spinner).
        verify: run :func:`check_tools_env` at the end and fail when it reports errors.
        lock_timeout: seconds to wait for another setup of the same env (:func:`setup_lock`).

    Raises:
        EnvironmentFailure: when a step fails (with the tail of the pip log) or the check fails.
        UserInputError: another setup holds the env's lock (the message names it).
    """
    env_path = Path(env_path).absolute()
    say = progress or (lambda _msg: None)
    start = time.monotonic()
    current = not force and marker_current(env_path, gpu, envs_dir)
    if current:
        report = check_tools_env(env_path, gpu) if verify else ToolEnvReport(path=env_path, exists=True)
        if report.imports_ok or not verify:
            _raise_on_cuda(report)  # installed as specified; a reinstall would not change torch vs the driver
            say("tool env is up to date")
            return SetupResult(path=env_path, skipped=True, duration_s=time.monotonic() - start, report=report)
        # set up from the current files once, broken since (a package removed, a disk full): install again
        say("tool env marker is current but its check fails (" + "; ".join(report.errors)[:200] + "): reinstalling")
    with setup_lock(env_path, lock_timeout):
        if not force and not current and marker_current(env_path, gpu, envs_dir):  # a setup we waited for did it
            report = check_tools_env(env_path, gpu) if verify else ToolEnvReport(path=env_path, exists=True)
            _raise_on_cuda(report)
            return SetupResult(path=env_path, skipped=True, duration_s=time.monotonic() - start, report=report)
        (env_path / MARKER).unlink(missing_ok=True)
        log = install_venv(env_path, pip_install_steps(gpu, envs_dir), base_python=base_python, pip_cmd=pip_cmd,
                           step_timeout=step_timeout, say=say)
        if not gpu:
            say("CPU fix: remove torchvision, neutralise torchaudio")
            _run_step([str(tools_python(env_path)), "-c", cpu_fix_script()], "CPU fix", log, step_timeout, say)
        report = ToolEnvReport(path=env_path, exists=True)
        if verify:
            say("verifying imports")
            report = check_tools_env(env_path, gpu)
            if not report.imports_ok:
                raise EnvironmentFailure("tool env check failed: " + "; ".join(report.errors))
        (env_path / MARKER).write_text(json.dumps({
            "requirements_sha256": requirements_hash(gpu, envs_dir), "gpu": gpu,
            "versions": report.versions, "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }, indent=2), encoding="utf-8")
    report.marker_current = True
    _raise_on_cuda(report)
    return SetupResult(path=env_path, skipped=False, duration_s=time.monotonic() - start, report=report)
