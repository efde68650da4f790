"""The launch plan of a session and of ``ftagent plan --hardware``: one function, the same inputs.

Issue 42 item 1: the plan printed was not the plan run (the CLI passed no RAM and the vendor's 80 GB, the
session its RAM and NVML's 85.5 GB; 12 of 42 plans differed). Both now call :func:`make_plan`, which
calls :func:`ftagent.tools.launch.plan.launch_plan` with

* the GPUs as NVML counts them (``configs/gpu_profiles.yaml`` holds NVML's reading for a named GPU,
  the session reads NVML itself: :func:`ftagent.tools.launch.profiles.profile_of`);
* the host's RAM (``--ram`` for the CLI, the machine's total for the session; None: unknown, offload not
  considered);
* the offload policy of these settings and this tool env (:func:`offload_of`).

``tests/unit/test_plan_agreement.py`` runs both on every cell of the docs/gpu.md matrix.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ftagent.core.hardware import HardwareInfo
    from ftagent.core.settings import Settings
    from ftagent.tools.launch.offload import OffloadPolicy
    from ftagent.tools.launch.plan import LaunchPlan
    from ftagent.tools.launch.profiles import HardwareProfile
    from ftagent.tools.opencompass.inference import InferenceSettings


def offload_of(settings: Settings) -> OffloadPolicy:
    """ZeRO-3 CPU offload: asked for (``FT_CPU_OFFLOAD``), or DeepSpeed's CPU Adam built in the tool env."""
    from ftagent.runners.toolenv import tools_env_path
    from ftagent.tools.launch.offload import offload_policy

    return offload_policy(asked=settings.ft.cpu_offload, tools_env=tools_env_path(settings))


def host_ram_gb() -> float:
    """This machine's RAM in GB (1e9 bytes)."""
    import psutil

    return float(psutil.virtual_memory().total) / 1e9


def make_plan(model_config: dict[str, Any], profile: HardwareProfile, *, name: str, inference: dict[str, Any],
              cpu_ram_gb: float | None, settings: Settings) -> LaunchPlan:
    """THE plan of ``model_config`` on ``profile``: what the session runs and ``plan --hardware`` prints.

    Raises:
        KeyError, TypeError: the config lacks what the estimate needs.
    """
    from ftagent.tools.launch.plan import launch_plan

    return launch_plan(model_config, profile, name=name, inference=inference, cpu_ram_gb=cpu_ram_gb,
                       offload=offload_of(settings))


def session_plan(model_path: Path, hardware: HardwareInfo, *, name: str, inference: InferenceSettings,
                 cpu_ram_gb: float, settings: Settings) -> LaunchPlan | None:
    """The session's plan for the GPUs NVML reports (none: the CPU); None when ``config.json`` cannot be
    planned (no file, or without hidden_size/num_hidden_layers/vocab_size)."""
    from ftagent.tools.launch.profiles import profile_of
    from ftagent.tools.opencompass.inference import read_model_config

    cfg = read_model_config(model_path)
    if not cfg:
        return None
    try:
        return make_plan(cfg, profile_of(hardware), name=name, inference=inference.values, cpu_ram_gb=cpu_ram_gb,
                         settings=settings)
    except (KeyError, TypeError):
        return None
