"""Bubblewrap confinement for commands run by the local runner.

Inside the sandbox only these paths exist: system directories (``/usr``, ``/lib*``, ``/bin``,
``/sbin``, ``/etc``; read-only), the tool env and the Python installation it was created from
(read-only), the working directory (read-write), the caller's mounts (read-only unless
``read_only=False``), a private ``/tmp``, ``/proc`` and ``/dev``. ``$HOME``, ``FT_FILE_PATH`` (and so
the benchmark data), other sessions and the project tree are invisible unless mounted explicitly.
The network is kept (data-processing scripts may call an LLM API).

``FT_SANDBOX``: ``auto`` (bwrap when it works, else a one-time warning), ``bwrap`` (required: an
:class:`EnvironmentFailure` when it does not work) or ``none``.
"""

from __future__ import annotations

import functools
import logging
import shutil
import subprocess
from pathlib import Path

from ftagent.core.errors import EnvironmentFailure
from ftagent.runners.base import Mount

log = logging.getLogger(__name__)

SYSTEM_RO = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/etc", "/opt")
NO_SANDBOX_WARNING = "running without a sandbox: generated code can read and write everything this user can"
_warned = False


@functools.lru_cache(maxsize=4)
def probe_bwrap(executable: str | None = None) -> tuple[bool, str]:
    """Whether bubblewrap exists and can create namespaces here (probed once per executable).

    Returns:
        ``(works, reason)``; ``reason`` explains a failure.
    """
    exe = executable or shutil.which("bwrap")
    if not exe:
        return False, "bwrap is not installed (apt-get install bubblewrap)"
    try:
        proc = subprocess.run([exe, "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
                               "--unshare-pid", "true"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bwrap probe failed: {exc}"
    if proc.returncode != 0:
        return False, f"bwrap cannot create namespaces here: {proc.stderr.strip()[:200]}"
    return True, ""


def warn_no_sandbox(reason: str) -> None:
    """Log the no-sandbox warning once per process."""
    global _warned
    if not _warned:
        _warned = True
        log.warning("%s (%s)", NO_SANDBOX_WARNING, reason)


def use_sandbox(mode: str) -> bool:
    """Decide from ``FT_SANDBOX`` whether to confine commands.

    Raises:
        EnvironmentFailure: when ``mode == "bwrap"`` but bubblewrap does not work.
    """
    if mode == "none":
        return False
    works, reason = probe_bwrap()
    if works:
        return True
    if mode == "bwrap":
        raise EnvironmentFailure(f"FT_SANDBOX=bwrap but {reason}; install bubblewrap or set FT_SANDBOX=auto")
    warn_no_sandbox(reason)
    return False


def _python_home(tools_env: Path) -> Path | None:
    """The base Python installation a venv was created from (``home`` in pyvenv.cfg), as a prefix."""
    cfg = tools_env / "pyvenv.cfg"
    if not cfg.is_file():
        return None
    for line in cfg.read_text(encoding="utf-8").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            bin_dir = Path(value.strip())
            return bin_dir.parent if bin_dir.name == "bin" else bin_dir
    return None


def _under_system(path: Path) -> bool:
    return any(path == Path(p) or Path(p) in path.parents for p in SYSTEM_RO)


def bwrap_argv(
    cmd: list[str],
    *,
    workdir: Path,
    tools_env: Path | None,
    mounts: list[Mount] | None = None,
    executable: str = "bwrap",
) -> list[str]:
    """The bubblewrap command line that runs ``cmd`` confined (see the module docstring)."""
    argv = [executable, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc",
            "--unshare-uts"]
    for path in SYSTEM_RO:
        argv += ["--ro-bind-try", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    if tools_env is not None:
        env_real = Path(tools_env).resolve()
        home = _python_home(env_real)
        if home is not None and not _under_system(home.resolve()):
            argv += ["--ro-bind", str(home.resolve()), str(home.resolve())]
        argv += ["--ro-bind", str(env_real), str(env_real)]
        if Path(tools_env).absolute() != env_real:
            argv += ["--symlink", str(env_real), str(Path(tools_env).absolute())]
    wd = Path(workdir).resolve()
    binds = [(wd, wd, False)]
    for mount in mounts or []:
        source = Path(mount.source).resolve()
        binds.append((source, Path(mount.target) if mount.target is not None else source, mount.read_only))
    # Parents before children, so a nested bind stays visible (e.g. a read-only model folder inside a
    # writable workdir, or a writable workdir inside a read-only mount).
    for source, target, read_only in sorted(binds, key=lambda b: len(b[1].parts)):
        argv += ["--ro-bind" if read_only else "--bind", str(source), str(target)]
    argv += ["--chdir", str(wd), "--"]
    return argv + list(cmd)
