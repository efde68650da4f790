"""Slots: the share of the machine one trial runs on when a session runs K trials at once (issue 41).

A slot is a set of GPUs (a launch plan's worth: ``tools.launch.slots.plan_slots``) or, without GPUs, a
share of the CPU cores, plus the ports its trial's processes bind: torchrun's ``MASTER_PORT`` and the
vLLM server's. One trial holds a slot at a time, so two trials never share a GPU, a core or a port.

What a slot changes for its trial (each by one mechanism):

* GPUs: the trial's scenario names only the slot's GPUs (``ScenarioInfo.hardware``, its
  ``cuda_visible_devices``), so every command gets ``CUDA_VISIBLE_DEVICES`` = those and the memory
  estimate is the slot's (``finetune.slots.slot_scenario``);
* cores: the trial's worker thread is pinned to the slot's cores (:meth:`Slot.bind`: Linux
  ``sched_setaffinity`` of the calling thread), and a process inherits the affinity of the thread that
  starts it, so every tool process of the trial runs on those cores; ``OMP_NUM_THREADS`` is the number
  of cores (:meth:`Slot.env`, set by the trial's runner, ``runners.slot.SlotRunner``);
* ports: ``MASTER_PORT`` for every command (:meth:`Slot.env`); the vLLM server of its evaluation
  listens on ``vllm_port``.
"""

from __future__ import annotations

import os

from pydantic import BaseModel, Field

MASTER_PORT_BASE = 29500  # torch.distributed's default MASTER_PORT; slot i takes 29500 + i
VLLM_PORT_BASE = 18000  # slot i's vLLM servers: 18000 + 100 × i (room for a server per GPU of the slot)


class Slot(BaseModel):
    """One trial's share of the machine (see the module docstring)."""

    index: int = Field(ge=0)
    gpus: list[str] = Field(default_factory=list, description="CUDA_VISIBLE_DEVICES ids (UUIDs or indices)")
    gpu_indices: list[int] = Field(default_factory=list, description="the NVML indices of those GPUs")
    cpus: list[int] = Field(default_factory=list, description="cores the trial is pinned to (empty: not pinned)")
    threads: int | None = Field(None, description="OMP_NUM_THREADS of its processes (None: the runner's default)")
    master_port: int = MASTER_PORT_BASE
    vllm_port: int = VLLM_PORT_BASE
    kind: str = Field("local", description="who lent the slot: local, or ray (a Ray task holds its GPUs)")

    @property
    def label(self) -> str:
        """``slot 1 (GPU 2,3)``, ``slot 0 (core 0)``, ``slot 0`` (the whole machine)."""
        if self.gpu_indices:
            return f"slot {self.index} (GPU {','.join(str(g) for g in self.gpu_indices)})"
        if self.cpus:
            return f"slot {self.index} ({'core' if len(self.cpus) == 1 else 'cores'} {_ranges(self.cpus)})"
        return f"slot {self.index}"

    def env(self) -> dict[str, str]:
        """The variables every command of the slot's trial gets (``CUDA_VISIBLE_DEVICES`` goes by ``gpus``)."""
        out = {"MASTER_PORT": str(self.master_port)}
        if self.threads is not None:
            out["OMP_NUM_THREADS"] = str(self.threads)
        return out

    def bind(self) -> None:
        """Pin the calling thread (and so every process it starts) to the slot's cores; no-op without any."""
        if self.cpus and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, self.cpus)  # pid 0: the calling thread (Linux)


def _ranges(values: list[int]) -> str:
    """``0-3,6``: integers as sorted ranges."""
    groups: list[list[int]] = []
    for v in sorted(values):
        if groups and groups[-1][1] == v - 1:
            groups[-1][1] = v
        else:
            groups.append([v, v])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in groups)
