"""A Runner wrapper that runs every command of one trial on its slot (K trials at once, issue 41).

Each slot's components get a :class:`SlotRunner` around the session's runner: every command gets the
slot's ``MASTER_PORT`` (torchrun of a multi-GPU training) and, for a CPU slot, ``OMP_NUM_THREADS`` = its
cores (over the runner's default of 1), and a command that uses the GPUs (training, the micro-batch,
evaluation: :func:`~ftagent.runners.base.tool_uses_gpu`) and names none gets the slot's GPUs. The cores
themselves are pinned by the trial's thread (:meth:`ftagent.core.slots.Slot.bind`); a process inherits them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ftagent.core.slots import Slot
from ftagent.runners.base import Mount, Runner, RunResult, ToolEnv, tool_uses_gpu


class SlotRunner:
    """Delegates to ``inner`` with the slot's variables and GPUs (see the module docstring)."""

    def __init__(self, inner: Runner, slot: Slot) -> None:
        self.inner = inner
        self.slot = slot
        self.name = getattr(inner, "name", type(inner).__name__)

    def __getattr__(self, item: str) -> Any:  # the inner runner's extras (tools_env, bin_dir, capabilities ...)
        return getattr(self.inner, item)

    def run(self, cmd: list[str], *, tool: ToolEnv, workdir: Path, env: dict[str, str] | None = None,
            mounts: list[Mount] | None = None, gpus: str | None = None, timeout: float | None = None,
            log_file: Path | None = None, **extra: Any) -> RunResult:
        merged = {**(env or {}), **self.slot.env()}  # the slot's port and thread count win
        if gpus is None and self.slot.gpus and tool_uses_gpu(tool):
            gpus = ",".join(self.slot.gpus)
        return self.inner.run(cmd, tool=tool, workdir=workdir, env=merged, mounts=mounts, gpus=gpus,
                              timeout=timeout, log_file=log_file, **extra)
