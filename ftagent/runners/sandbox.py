"""Bubblewrap confinement for commands run by the local runner.

Inside the sandbox only these paths exist: system directories (``/usr``, ``/lib*``, ``/bin``,
``/sbin``, ``/etc``; read-only), the tool env and the Python installation it was created from
(read-only), the working directory (read-write), the caller's mounts (read-only unless
``read_only=False``), a private ``/tmp``, ``/proc`` and ``/dev``. ``$HOME``, ``FT_FILE_PATH`` (and so
the benchmark data), other sessions and the project tree are invisible unless mounted explicitly.
The network is kept (data-processing scripts may call an LLM API).

GPUs: bwrap's ``--dev`` is a fresh tmpfs with only null, zero, random, tty ... (bubblewrap.c,
``SETUP_MOUNT_DEV``), so CUDA would see no GPU while NVML outside still counts them. A command that
may use GPUs (training, the micro-batch, evaluation: ``devices`` from :func:`gpu_device_nodes`) gets
the host's NVIDIA device nodes with ``--dev-bind`` and ``/sys`` read-only (CUDA and NCCL read the PCI
topology there), and the library folders of :func:`gpu_library_dirs` read-only;
``/proc/driver/nvidia`` is already visible in the fresh ``--proc``. All GPUs' nodes
are bound, not only those in ``CUDA_VISIBLE_DEVICES``: CUDA numbers devices fastest-first (or by
UUID / MIG id), not by ``/dev/nvidiaN`` minor, so a subset could hide the wrong GPU; choosing GPUs
stays ``CUDA_VISIBLE_DEVICES``'s job, confinement is about files.

A mount inside a Hugging Face cache (``.../snapshots/<rev>``, whose files are symlinks to
``../../blobs/<hash>``) also gets the repo's ``blobs`` folder, read-only, where the links point
(:func:`ftagent.runners.mounts.with_hf_blobs`). A mount or workdir given through a symlinked path is
bound at its real path and answers at the given path too (``--symlink``).

``FT_SANDBOX``: ``auto`` (bwrap when it works, else a one-time warning), ``bwrap`` (required: an
:class:`EnvironmentFailure` when it does not work) or ``none``.

Policy (:func:`require_confinement`, checked before a session exists): **code written by an LLM never
runs unconfined.** When the planner (or a plug-in ``FT_CODER``) declares ``writes_llm_code``, a runner
that declares ``needs_bwrap`` (``local``, ``conda``) needs a working bubblewrap (``docker`` declares
``confines_itself``); otherwise the run stops with one message naming the package to install (exit 2),
unless ``FT_ALLOW_UNSANDBOXED=1``. The heuristic planner writes its own scripts, so they may run
unconfined (with a warning that says so). Capabilities, not names, decide (runners/base.py,
planners/registry.py).
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import subprocess
from pathlib import Path

from ftagent.core.errors import EnvironmentFailure, UserInputError
from ftagent.runners.base import Mount, capabilities
from ftagent.runners.mounts import with_hf_blobs

log = logging.getLogger(__name__)

SYSTEM_RO = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/etc", "/opt")
NO_SANDBOX_WARNING = "running without a sandbox: generated code can read and write everything this user can"
INSTALL_HINT = "apt-get install bubblewrap"
_warned = False


@functools.lru_cache(maxsize=4)
def probe_bwrap(executable: str | None = None) -> tuple[bool, str]:
    """Whether bubblewrap exists and can create namespaces here (probed once per executable).

    Returns:
        ``(works, reason)``; ``reason`` explains a failure.
    """
    exe = executable or shutil.which("bwrap")
    if not exe:
        return False, "bwrap is not installed"  # the install hint is the caller's to give, once
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
        log.warning("%s (%s; %s to confine commands)", NO_SANDBOX_WARNING, reason, INSTALL_HINT)


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
        raise EnvironmentFailure(f"FT_SANDBOX=bwrap but {reason}; install bubblewrap ({INSTALL_HINT}) or set "
                                 "FT_SANDBOX=auto")
    warn_no_sandbox(reason)
    return False


def require_confinement(settings, writes_llm_code: bool) -> str | None:
    """Enforce the sandbox policy for a session about to start (call it before the session exists).

    Args:
        settings: :class:`ftagent.core.settings.Settings` (``FT_ENV_TYPE``, ``FT_SANDBOX``,
            ``FT_ALLOW_UNSANDBOXED``).
        writes_llm_code: the session runs code an LLM wrote (the planner's declared capability,
            :func:`ftagent.planners.registry.writes_llm_code`), whatever the planner is called.

    Returns:
        None when commands will run confined (or the runner does not declare ``needs_bwrap``: Docker,
        a plug-in that owns its confinement); else the warning text that was logged (no LLM code, or
        ``FT_ALLOW_UNSANDBOXED=1``).

    Raises:
        UserInputError: LLM-written code with a runner that needs bubblewrap and none working (or
            ``FT_SANDBOX=none``), without ``FT_ALLOW_UNSANDBOXED=1``: the message names the package.
    """
    global _warned
    ft = settings.ft
    from ftagent.runners.factory import runner_class  # the registry imports every runner: only here

    if not capabilities(runner_class(ft.env_type)).needs_bwrap:  # also: an unknown FT_ENV_TYPE exits 2 here
        return None
    if ft.sandbox == "none":
        works, reason = False, "FT_SANDBOX=none"
    else:
        works, reason = probe_bwrap()
    if works:
        return None
    if writes_llm_code and not ft.allow_unsandboxed:
        fix = (f"install bubblewrap ({INSTALL_HINT})" if ft.sandbox != "none" else "unset FT_SANDBOX=none")
        raise UserInputError(
            f"code written by an LLM never runs unconfined, and the {ft.env_type} runner cannot "
            f"confine it here ({reason}). Fix: {fix}, or use FT_ENV_TYPE=docker, or set "
            f"FT_ALLOW_UNSANDBOXED=1 to run LLM-written code with all of this user's rights")
    if writes_llm_code:
        text = (f"{NO_SANDBOX_WARNING}: FT_ALLOW_UNSANDBOXED=1 lets LLM-written code run unconfined "
                f"({reason}; {INSTALL_HINT})")
    else:
        text = (f"{NO_SANDBOX_WARNING}: only the planner's own scripts run, no LLM-written code "
                f"({reason}; {INSTALL_HINT} to confine them)")
    log.warning("%s", text)
    _warned = True  # the runner's generic warning would only repeat this one
    return text


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


# The NVIDIA driver's device nodes (besides /dev/nvidia<N>): control, unified memory, modeset, and the
# MIG capability nodes (a folder). /dev/dri is not needed by CUDA.
NVIDIA_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "nvidia-caps")
_GPU_NODE = re.compile(r"nvidia\d+")


def gpu_device_nodes(dev_root: Path = Path("/dev")) -> list[Path]:
    """The NVIDIA device nodes under ``dev_root`` (empty on a machine without the driver).

    ``dev_root`` is a parameter so a test can hand in a folder of fake nodes.
    """
    root = Path(dev_root)
    if not root.is_dir():
        return []
    gpus = sorted((p for p in root.iterdir() if _GPU_NODE.fullmatch(p.name)), key=lambda p: int(p.name[6:]))
    return gpus + [root / name for name in NVIDIA_NODES if (root / name).exists()]


def gpu_library_dirs(environ: dict[str, str] | None = None) -> list[Path]:
    """Folders outside the system directories that a GPU command's libraries come from: each existing
    ``LD_LIBRARY_PATH`` entry and ``CUDA_HOME`` (the driver's ``libcuda`` where an image or a cluster's
    module system puts it, e.g. ``/cm/shared/apps/cuda12``); the sandbox shows them read-only."""
    env = os.environ if environ is None else environ
    entries = [*env.get("LD_LIBRARY_PATH", "").split(":"), env.get("CUDA_HOME", "")]
    out: list[Path] = []
    for entry in entries:
        path = Path(entry) if entry and Path(entry).is_absolute() else None
        if path is not None and path.is_dir() and not _under_system(path.resolve()) and path not in out:
            out.append(path)
    return out


def _under_system(path: Path) -> bool:
    return any(path == Path(p) or Path(p) in path.parents for p in SYSTEM_RO)


def _symlinks_to_binds(given: list[tuple[Path, Path]], targets: list[Path]) -> list[str]:
    """``--symlink`` for each folder given through a symlinked path (``FT_FILE_PATH/models/org/name``
    linking into a Hub cache, ``/home`` linking to ``/mnt/home`` ...): bound at its real path, it must
    also answer at the path the command was given. Skipped where the link is already visible (inside
    another bind or a system folder) or where binds lie below it."""
    argv: list[str] = []
    done: set[Path] = set()
    for real, path in given:
        if path == real or path in done or _under_system(path):
            continue
        if any(t == path or t in path.parents or path in t.parents for t in targets):
            continue
        done.add(path)
        argv += ["--symlink", str(real), str(path)]
    return argv


def _refuse_writable_inside(binds: list[tuple[Path, Path, bool]], protected: list[Path]) -> None:
    """A writable bind inside the tool env (or its Python, or another read-only tool folder) would let confined
    code plant a ``.pth`` file that every later tool process runs: refused."""
    for _, target, ro in binds:
        for folder in protected:
            if not ro and (target == folder or folder in target.parents):
                raise EnvironmentFailure(f"refusing to run a command that may write {target}: it lies inside the "
                                         f"tool environment {folder}, which sandboxed commands only read")


def bwrap_argv(
    cmd: list[str],
    *,
    workdir: Path,
    tools_env: Path | None,
    mounts: list[Mount] | None = None,
    executable: str = "bwrap",
    read_only: list[Path] | None = None,
    devices: list[Path] | None = None,
) -> list[str]:
    """The bubblewrap command line that runs ``cmd`` confined (see the module docstring).

    ``read_only`` adds more host folders visible read-only at their own path (e.g. a conda install).
    ``devices`` are device nodes (or folders of them) bound with device access at ``/dev/<name>``,
    with ``/sys`` read-only: the GPUs of :func:`gpu_device_nodes`, for commands that may use them.
    """
    argv = [executable, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc",
            "--unshare-uts"]
    for path in SYSTEM_RO:
        argv += ["--ro-bind-try", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for node in devices or []:  # after --dev: the nodes go onto its fresh tmpfs
        argv += ["--dev-bind", str(node), f"/dev/{Path(node).name}"]
    if devices:
        argv += ["--ro-bind", "/sys", "/sys"]
    protected: list[Path] = []  # the tool env, its Python and the extra read-only folders: never writable
    if tools_env is not None:
        env_real = Path(tools_env).resolve()
        home = _python_home(env_real)
        if home is not None and not _under_system(home.resolve()):
            protected.append(home.resolve())
        protected.append(env_real)
        if Path(tools_env).absolute() != env_real:
            argv += ["--symlink", str(env_real), str(Path(tools_env).absolute())]
    protected += [Path(extra).resolve() for extra in read_only or [] if not _under_system(Path(extra).resolve())]
    wd = Path(workdir).resolve()
    binds = [(wd, wd, False)] + [(p, p, True) for p in dict.fromkeys(protected)]
    given = [(wd, Path(workdir).absolute())]
    for mount in with_hf_blobs(mounts or [], resolve_sources=True):
        source = Path(mount.source).resolve()
        binds.append((source, Path(mount.target) if mount.target is not None else source, mount.read_only))
        if mount.target is None:
            given.append((source, Path(mount.source).absolute()))
    _refuse_writable_inside(binds, protected)
    # Parents before children, so a nested bind stays visible (e.g. a read-only model folder inside a
    # writable workdir, or a writable workdir inside a read-only mount); at one depth read-only last. The tool
    # env is in this order too (issue 39 item 9): a writable folder that contains it (an export's parent
    # folder, a workspace set above the clone) is bound first, and the env's read-only bind covers it after.
    for source, target, ro in sorted(binds, key=lambda b: (len(b[1].parts), b[2])):
        argv += ["--ro-bind" if ro else "--bind", str(source), str(target)]
    argv += _symlinks_to_binds(given, [b[1] for b in binds])
    argv += ["--chdir", str(wd), "--"]
    return argv + list(cmd)
