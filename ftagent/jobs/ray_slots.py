"""``FT_SLOT_EXECUTOR=ray``: a session's trials hold their slots as Ray tasks with GPU resources (issue 41).

Ray is the arbiter of the node's GPUs: a trial starts only once a Ray task that reserves its slot's GPUs
(``num_gpus``, or ``FT_RAY_GPU_RESOURCE``, a custom resource) — or, on CPU, its cores (``num_cpus``) — runs
on this node, so two sessions (or a session and other Ray work) never share a GPU, and a trial waits
while Ray has none free. The task (``ftagent-trial:<session>/slot<i>``) is the lease: it writes the GPU
ids Ray gave it (``ray.get_gpu_ids()``) to ``<session>/.slots/<lease>.held`` and returns once the trial
releases it (``<lease>.release``); the trial runs with those GPUs as its ``CUDA_VISIBLE_DEVICES``. The
scheduler is the same (:class:`ftagent.engine.parallel.Scheduler`): this pool only decides when and on
which GPUs a slot is lent (:class:`~ftagent.engine.parallel.SlotPool`).

The lease runs on this node (``NodeAffinitySchedulingStrategy``, not soft): the trial's commands run here.
Its owner is this process (the Ray driver): if the session dies, Ray ends its leases and frees the GPUs.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from ftagent.core.slots import Slot


def _hold(lease_dir: str, name: str, poll_s: float) -> str:
    """The lease task's body: say which GPUs Ray gave it, then wait for the trial to release them."""
    import ray

    ctx = ray.get_runtime_context()
    held = Path(lease_dir) / f"{name}.held"
    tmp = held.with_suffix(".tmp")
    tmp.write_text(json.dumps({"gpus": [str(g) for g in ray.get_gpu_ids()], "node": ctx.get_node_id(),
                               "pid": os.getpid(), "at": time.time()}), encoding="utf-8")
    os.replace(tmp, held)
    release = Path(lease_dir) / f"{name}.release"
    while not release.exists():
        time.sleep(poll_s)
    return name


class RaySlotPool:
    """Lends the planned slots, each only while a Ray lease task holds its resources (see the module docstring)."""

    def __init__(self, slots: list[Slot], *, address: str = "auto", gpu_resource: str = "GPU",
                 lease_dir: Path, poll_s: float = 0.2, tag: str = "") -> None:
        self.slots = list(slots)
        self.address, self.gpu_resource, self.poll_s = address, gpu_resource, poll_s
        self.lease_dir = Path(lease_dir)
        self.lease_dir.mkdir(parents=True, exist_ok=True)
        self.tag = tag or self.lease_dir.parent.name
        self._free = list(self.slots)
        self._pending: dict[int, tuple[Slot, Any, str]] = {}  # slot index -> (slot, ref, lease name)
        self._lent: dict[int, tuple[Slot, Any, str]] = {}
        self._lock = threading.Lock()
        self._remote: Any = None

    @property
    def size(self) -> int:
        return len(self.slots)

    def connect(self) -> None:
        """Join the cluster now (the session's start), not at the first trial."""
        self._ray()

    def _ray(self) -> Any:
        import ray

        if not ray.is_initialized():
            ray.init(address=self.address, namespace="ftagent", log_to_driver=False,
                     logging_level=logging.WARNING, configure_logging=True)
        if self._remote is None:
            self._remote = ray.remote(_hold)
        return ray

    def resources(self, slot: Slot) -> dict[str, Any]:
        """The Ray options of a slot's lease: its GPUs (as ``gpu_resource``) or its cores, on this node."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray = self._ray()
        opts: dict[str, Any] = {"num_cpus": len(slot.cpus) if slot.cpus and not slot.gpus else 0,
                                "max_retries": 0, "name": f"ftagent-trial:{self.tag}/slot{slot.index}",
                                "scheduling_strategy": NodeAffinitySchedulingStrategy(
                                    ray.get_runtime_context().get_node_id(), soft=False)}
        if slot.gpus:
            if self.gpu_resource == "GPU":
                opts["num_gpus"] = len(slot.gpus)
            else:
                opts["resources"] = {self.gpu_resource: len(slot.gpus)}
        return opts

    def acquire(self, preferred: int | None = None) -> Slot | None:
        """A slot whose lease Ray granted (its GPUs those Ray gave), else None — asking Ray for one if none is asked."""
        with self._lock:
            for index, (slot, ref, name) in list(self._pending.items()):
                held = self.lease_dir / f"{name}.held"
                if held.exists():
                    info = json.loads(held.read_text(encoding="utf-8"))
                    del self._pending[index]
                    self._lent[index] = (slot, ref, name)
                    gpus = list(info.get("gpus") or [])  # none for a custom resource: the plan's own GPUs
                    update: dict[str, Any] = {"kind": "ray"}
                    if gpus and slot.gpus:
                        update.update(gpus=gpus, gpu_indices=[int(g) for g in gpus if g.isdigit()] or slot.gpu_indices)
                    return slot.model_copy(update=update)
            if self._free and not self._pending:
                slot = next((s for s in self._free if s.index == preferred), self._free[0])
                self._free.remove(slot)
                name = f"{slot.index}-{uuid.uuid4().hex[:8]}"
                ref = self._remote_for(slot).remote(str(self.lease_dir), name, self.poll_s)
                self._pending[slot.index] = (slot, ref, name)
            return None

    def _remote_for(self, slot: Slot) -> Any:
        opts = self.resources(slot)
        return self._remote.options(**opts)

    def release(self, slot: Slot) -> None:
        """End the slot's lease (its Ray task returns, Ray frees the resources) and lend it again later."""
        with self._lock:
            lent = self._lent.pop(slot.index, None)
            if lent is None:
                return
            planned, _ref, name = lent
            (self.lease_dir / f"{name}.release").write_text("", encoding="utf-8")
            self._free.append(planned)

    def bind(self, slot: Slot) -> None:
        slot.bind()

    def waiting(self) -> bool:
        """A lease was asked for and Ray has not granted it yet."""
        with self._lock:
            return bool(self._pending)

    def close(self) -> None:
        """Release every lease, granted or still asked for (the session ends)."""
        ray = self._ray() if (self._pending or self._lent) else None
        with self._lock:
            for slot, ref, name in [*self._pending.values(), *self._lent.values()]:
                (self.lease_dir / f"{name}.release").write_text("", encoding="utf-8")
                if ray is not None and slot.index in self._pending:
                    ray.cancel(ref, force=True)
                self._free.append(slot)
            self._pending.clear()
            self._lent.clear()
