"""Does a GPU env's torch work with this machine's NVIDIA driver? (issue 30 finding 6)

The PyPI torch wheels the GPU envs install (``configs/envs/torch-gpu.txt``, ``vllm.txt``) are CUDA 13
builds, which need driver ≥ 580; on an older driver the env imports fine and ``torch.cuda.is_available()``
is False, so every GPU run would fall back to nothing useful. Two halves:

* :data:`CUDA_PROBE`: Python source run inside the env (standard library + torch only): the build's
  CUDA version, ``is_available()``, torch's own warning, the device name and a tiny CUDA op;
* :func:`cuda_verdict`: pure decision from (host driver from NVML, that probe) with the table of
  ``configs/envs/cuda-drivers.yaml`` (NVIDIA's release-notes tables): a mismatch is one message naming
  the driver, the wheel's CUDA version and the exact pip line that installs a build the driver runs.
"""

from __future__ import annotations

import functools
from pathlib import Path

import yaml
from pydantic import BaseModel, Field

from ftagent.core.paths import config_file

PYTORCH_INDEX = "https://download.pytorch.org/whl/"

# Defines _cuda_probe() in the env's script; its result goes into the script's JSON as "cuda_probe".
CUDA_PROBE = '''
def _cuda_probe():
    import warnings
    info = {"torch": None, "cuda": None, "available": None, "device": None, "error": None, "warning": None}
    try:
        import torch
    except Exception as exc:
        info["error"] = f"import torch: {type(exc).__name__}: {str(exc)[:300]}"
        return info
    info["torch"] = str(getattr(torch, "__version__", "?"))
    info["cuda"] = getattr(getattr(torch, "version", None), "cuda", None)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            info["available"] = bool(torch.cuda.is_available())
        if caught:
            info["warning"] = " ".join(str(caught[0].message).split())[:400]
        if info["available"]:
            info["device"] = str(torch.cuda.get_device_name(0))
            value = float((torch.ones(8, device="cuda") * 2).sum().item())
            if value != 16.0:
                info["error"] = f"a CUDA op returned {value}, expected 16.0"
    except Exception as exc:
        text = " ".join(str(exc).split())
        info["error"] = f"CUDA op failed: {type(exc).__name__}: {text[:300]}"
    return info
'''


class CudaProbe(BaseModel):
    """What :data:`CUDA_PROBE` found in an env."""

    torch: str | None = None
    cuda: str | None = None  # torch.version.cuda: None for a CPU build
    available: bool | None = None
    device: str | None = None
    error: str | None = None
    warning: str | None = None  # torch's own warning from is_available() (e.g. "driver too old")


class CudaVerdict(BaseModel):
    """Whether the env's torch can use this machine's GPUs."""

    ok: bool
    summary: str  # one line: what was checked
    message: str = ""  # the problem and its fix (when not ok)
    notes: list[str] = Field(default_factory=list)


class DriverTable(BaseModel):
    """``configs/envs/cuda-drivers.yaml``."""

    toolkit_driver: dict[str, str]
    minor_version_floor: dict[str, str]
    pytorch_indexes: dict[str, str]


@functools.cache
def driver_table(path: Path | None = None) -> DriverTable:
    """The table of ``configs/envs/cuda-drivers.yaml`` (cached)."""
    source = path or config_file("envs") / "cuda-drivers.yaml"
    return DriverTable.model_validate(yaml.safe_load(Path(source).read_text(encoding="utf-8")))


def version_tuple(version: str) -> tuple[int, ...]:
    """``"580.65.06"`` -> ``(580, 65, 6)``; non-numeric parts end the tuple."""
    parts = []
    for part in str(version).strip().split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


def toolkit_driver(cuda: str, table: DriverTable | None = None) -> str | None:
    """The driver NVIDIA lists for CUDA ``cuda`` (the nearest listed version at or below it, same major)."""
    table = table or driver_table()
    want = version_tuple(cuda)
    listed = [(version_tuple(k), v) for k, v in table.toolkit_driver.items()]
    same_major = [(k, v) for k, v in listed if k[:1] == want[:1] and k <= want]
    return max(same_major)[1] if same_major else None


def minor_version_floor(cuda: str, table: DriverTable | None = None) -> str | None:
    """The lowest driver that runs any build of ``cuda``'s major version (CUDA minor version compatibility)."""
    table = table or driver_table()
    parts = version_tuple(cuda)
    return table.minor_version_floor.get(str(parts[0])) if parts else None


def index_for_driver(driver: str, table: DriverTable | None = None) -> tuple[str, str] | None:
    """``(cuda, tag)`` of the newest PyTorch index whose CUDA this driver runs at full support, else the
    oldest it runs through minor version compatibility; None when it runs none of them."""
    table = table or driver_table()
    have = version_tuple(driver)
    indexes = sorted(table.pytorch_indexes.items(), key=lambda kv: version_tuple(kv[0]))
    full = [(c, t) for c, t in indexes if (need := toolkit_driver(c, table)) and have >= version_tuple(need)]
    if full:
        return full[-1]
    compat = [(c, t) for c, t in indexes if (floor := minor_version_floor(c, table)) and have >= version_tuple(floor)]
    return compat[0] if compat else None


def fix_line(python: str, driver: str, packages: tuple[str, ...], table: DriverTable | None = None) -> str:
    """The commands that replace the env's torch with a build ``driver`` runs (or: upgrade the driver)."""
    found = index_for_driver(driver, table)
    if found is None:
        return "upgrade the NVIDIA driver (no PyTorch CUDA build in configs/envs/cuda-drivers.yaml runs on it)"
    cuda, tag = found
    names = " ".join(p.split("==")[0] for p in packages)
    return (f"install torch's CUDA {cuda} build: `{python} -m pip uninstall -y {names} && {python} -m pip install "
            f"--index-url {PYTORCH_INDEX}{tag} {' '.join(packages)}` (or upgrade the NVIDIA driver)")


def cuda_verdict(driver: str | None, probe: CudaProbe, *, python: str = "python",
                 packages: tuple[str, ...] = ("torch",), table: DriverTable | None = None) -> CudaVerdict:
    """Can the env's torch (``probe``) use the GPUs of a machine with NVIDIA driver ``driver``?

    Args:
        driver: the host's driver version from NVML (None: no driver visible, nothing to check against).
        probe: what :data:`CUDA_PROBE` found in the env.
        python: the env's python (named in the fix).
        packages: the pins the fix reinstalls (torch, and torchvision where the env has it).
        table: the driver table (default: ``configs/envs/cuda-drivers.yaml``).
    """
    table = table or driver_table()
    build = f"torch {probe.torch or '?'} (CUDA {probe.cuda})" if probe.cuda else f"torch {probe.torch or '?'}"
    if driver is None:
        return CudaVerdict(ok=True, summary=f"{build}; no NVIDIA driver visible: CUDA not checked",
                           notes=["no NVIDIA driver visible on this machine: the env's CUDA was not checked"])
    if probe.torch is None:
        return CudaVerdict(ok=False, summary=f"driver {driver}: torch does not import",
                           message=f"torch does not import in this env ({probe.error}); run `ftagent env setup`")
    if probe.cuda is None:
        return CudaVerdict(ok=False, summary=f"{build}: a CPU build, driver {driver}",
                           message=f"{build} in this env is a CPU build (torch.version.cuda is None) on a machine "
                                   f"with NVIDIA driver {driver}; {fix_line(python, driver, packages, table)}")
    need, floor = toolkit_driver(probe.cuda, table), minor_version_floor(probe.cuda, table)
    have = version_tuple(driver)
    if (floor and have < version_tuple(floor)) or (need and not floor and have < version_tuple(need)):
        least = floor or need
        return CudaVerdict(
            ok=False, summary=f"{build}, driver {driver}: driver too old",
            message=f"{build} in this env needs NVIDIA driver >= {least} (NVIDIA's CUDA toolkit release notes), "
                    f"this machine's driver is {driver}: CUDA is not usable from this env; "
                    f"{fix_line(python, driver, packages, table)}")
    if not probe.available:
        why = probe.warning or probe.error or "no reason given"
        return CudaVerdict(
            ok=False, summary=f"{build}, driver {driver}: torch.cuda.is_available() is False",
            message=f"{build} with NVIDIA driver {driver}: torch.cuda.is_available() is False ({why}); check "
                    "CUDA_VISIBLE_DEVICES and that /dev/nvidia* are visible to this process")
    if probe.error:
        return CudaVerdict(ok=False, summary=f"{build}, driver {driver}: a CUDA op fails",
                           message=f"{build} with NVIDIA driver {driver} on {probe.device}: {probe.error}")
    notes = []
    if need and have < version_tuple(need):
        notes.append(f"driver {driver} is below {need}, the driver of CUDA {probe.cuda}: it runs through CUDA minor "
                     "version compatibility (kernels that need JIT compilation for a newer PTX may fail)")
    return CudaVerdict(ok=True, summary=f"{build}, driver {driver}: CUDA works on {probe.device}", notes=notes)
