"""How many trials run at once and on what: the slot plan (``FT_PARALLEL_TRIALS``, issue 41).

* **GPUs** — a slot holds the GPUs one trial's launch plan needs (:func:`~ftagent.tools.launch.plan.launch_plan`
  for that many GPUs of the same kind): the smallest count ``g`` dividing the GPUs whose plan the
  preflight does not refuse (weights that vLLM can serve with a TP that fits, a method that fits).
  ``auto`` makes the most slots, ``N // g`` (8×H100 and a 7B LoRA plan on 1 GPU → 8 slots; a 14B on
  24 GB GPUs needs TP 2 to serve → slots of 2); the method is that plan's (4-bit LoRA where a 24 GB GPU
  holds nothing larger), so for fewer, larger trials set ``K``. ``K`` gives each trial ``N // K`` GPUs
  and is refused (exit 2) when that is fewer than ``g`` or when its plan is refused — the refusal names
  the largest K that fits. The per-slot plan's preflight is the slot's preflight; its memory estimate
  is the trial's (``finetune.slots.slot_scenario``).
* **CPU** — a slot is a share of the cores the process may use (``sched_getaffinity``): ``K`` slots of
  ``cores // K`` cores each, the trial pinned to them with ``OMP_NUM_THREADS`` = its cores. ``auto``
  takes one core per trial, fewer trials when the RAM share of one would not fit the model
  (``fits(ram_share_gb)``, the memory estimate on CPU). ``K`` above the core count is refused.
* ``1`` (the default) is one trial at a time on the whole machine: today's loop, no slot at all.

Ports: slot ``i`` gets ``MASTER_PORT`` 29500 + i and the vLLM port 18000 + 100 i (:mod:`ftagent.core.slots`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from ftagent.core.errors import UserInputError
from ftagent.core.slots import MASTER_PORT_BASE, VLLM_PORT_BASE, Slot
from ftagent.tools.launch.offload import OffloadPolicy
from ftagent.tools.launch.plan import LaunchPlan, launch_plan
from ftagent.tools.launch.profiles import HardwareProfile


class SlotPlan(BaseModel):
    """The slots of a session: what ``ftagent plan`` shows and the scheduler lends out."""

    requested: str = Field(description="FT_PARALLEL_TRIALS as given: 1, K or auto")
    slots: list[Slot] = Field(default_factory=list)
    gpus_per_slot: int = 0
    cores_per_slot: int = 0
    method: str | None = Field(None, description="the per-slot launch plan's method (GPU slots)")
    tensor_parallel_size: int | None = None
    note: str = Field("", description="how K was chosen")
    idle: list[str] = Field(default_factory=list, description="GPUs no slot uses (N not a multiple of K)")

    @property
    def k(self) -> int:
        return len(self.slots)

    def lines(self) -> list[str]:
        """One line per slot, then how K was chosen (``ftagent plan``, the console)."""
        out = [f"{self.k} trial(s) at once (FT_PARALLEL_TRIALS={self.requested}): {self.note}"]
        out += [f"  {s.label}: MASTER_PORT {s.master_port}, vLLM port {s.vllm_port}"
                + (f", OMP_NUM_THREADS {s.threads}" if s.threads else "") for s in self.slots]
        if self.idle:
            out.append(f"  idle: GPU {','.join(self.idle)} (not a whole slot)")
        return out


def parse_parallel(value: str | int) -> str:
    """``auto`` or a whole number ≥ 1, as text (UserInputError otherwise)."""
    text = str(value).strip().lower()
    if text == "auto" or (text.isdigit() and int(text) >= 1):
        return text
    raise UserInputError(f"FT_PARALLEL_TRIALS={value!r}: expected a whole number >= 1 or auto")


def _slot(index: int, **kw: Any) -> Slot:
    return Slot(index=index, master_port=MASTER_PORT_BASE + index, vllm_port=VLLM_PORT_BASE + 100 * index, **kw)


def gpus_one_trial_needs(profile: HardwareProfile, model_config: dict[str, Any], *, name: str,
                         inference: dict[str, Any] | None, cpu_ram_gb: float | None,
                         offload: OffloadPolicy | None = None) -> tuple[int, LaunchPlan]:
    """The fewest GPUs (a divisor of the profile's count) whose plan is not refused, with that plan; the whole
    profile and its (refused) plan when none is."""
    n = profile.gpu_count
    plan = None
    for g in (d for d in range(1, n + 1) if n % d == 0):
        plan = launch_plan(model_config, _sized(profile, g), name=name, inference=inference, cpu_ram_gb=cpu_ram_gb,
                           offload=offload)
        if not plan.refused:
            return g, plan
    assert plan is not None  # n >= 1: the loop ran at least once (g = n last)
    return n, plan


def _sized(profile: HardwareProfile, g: int) -> HardwareProfile:
    return profile.model_copy(update={"gpu_count": g, "spec": f"{g}x {profile.gpu_name or profile.spec}"})


def plan_gpu_slots(requested: str, profile: HardwareProfile, model_config: dict[str, Any] | None, *, name: str = "",
                   inference: dict[str, Any] | None = None, cpu_ram_gb: float | None = None,
                   gpu_ids: list[str] | None = None, gpu_indices: list[int] | None = None,
                   offload: OffloadPolicy | None = None) -> SlotPlan:
    """GPU slots (the module docstring). ``gpu_ids``/``gpu_indices``: the detected GPUs' CUDA ids and NVML
    indices (default: 0 .. N-1, a ``--hardware`` profile); ``cpu_ram_gb``/``offload``: as the session's plan
    (``finetune.hardware_plan.make_plan``) has them, so a slot's plan is the one its trial runs.

    Raises:
        UserInputError: K above the GPU count, fewer GPUs per trial than its plan needs, or a refused plan.
    """
    requested = parse_parallel(requested)
    n = profile.gpu_count
    indices = list(gpu_indices if gpu_indices is not None else range(n))
    ids = list(gpu_ids if gpu_ids is not None else [str(i) for i in indices])
    if requested == "1":
        return SlotPlan(requested=requested, slots=[_slot(0, gpus=ids, gpu_indices=indices)], gpus_per_slot=n,
                        note="one trial at a time on every GPU")
    if model_config is None:
        if requested == "auto":
            return SlotPlan(requested=requested, slots=[_slot(0, gpus=ids, gpu_indices=indices)], gpus_per_slot=n,
                            note="one slot: the model's config.json could not be planned")
        need, plan = 1, None
    else:
        need, plan = gpus_one_trial_needs(profile, model_config, name=name, inference=inference, cpu_ram_gb=cpu_ram_gb,
                                          offload=offload)
    if requested == "auto":
        g, why = need, f"one trial's plan needs {need} GPU(s)"
    else:
        k = int(requested)
        if k > n:
            raise UserInputError(f"FT_PARALLEL_TRIALS={k}: this machine has {n} GPU(s); at most {n // need} trial(s) "
                                 f"at once fit (each needs {need}), or use auto")
        g, why = n // k, f"{n} GPU(s) / {k}"
        if g < need:
            raise UserInputError(f"FT_PARALLEL_TRIALS={k} gives each trial {g} GPU(s), but one trial's plan needs "
                                 f"{need} ({plan.method if plan else '?'}): at most {n // need} at once, or use auto")
        if model_config is not None:
            plan = launch_plan(model_config, _sized(profile, g), name=name, inference=inference, cpu_ram_gb=cpu_ram_gb,
                               offload=offload)
            if plan.refused:
                raise UserInputError(f"FT_PARALLEL_TRIALS={k}: the plan for {g} GPU(s) per trial is refused: "
                                     + "; ".join(f"{v.setting}: {v.message}" for v in plan.refused))
    k = n // g if requested == "auto" else int(requested)
    slots = [_slot(i, gpus=ids[i * g:(i + 1) * g], gpu_indices=indices[i * g:(i + 1) * g]) for i in range(k)]
    method = plan.method if plan else None
    return SlotPlan(requested=requested, slots=slots, gpus_per_slot=g, method=method,
                    tensor_parallel_size=plan.tensor_parallel_size if plan else None,
                    note=f"{why}; {k} slot(s) of {g} GPU(s)" + (f", {method} in each" if method else ""),
                    idle=[str(i) for i in indices[k * g:]])


def plan_cpu_slots(requested: str, cores: list[int], *, ram_gb: float,
                   fits: Callable[[float], bool] | None = None) -> SlotPlan:
    """CPU slots (the module docstring): ``cores`` the process may use, ``fits(ram share in GB)`` whether one
    trial fits in that much RAM (None: always).

    Raises:
        UserInputError: K above the core count.
    """
    requested = parse_parallel(requested)
    cores = sorted(cores) or [0]
    if requested == "1":
        return SlotPlan(requested=requested, slots=[_slot(0)], note="one trial at a time (no GPU)")
    if requested == "auto":
        k = len(cores)
        while k > 1 and fits is not None and not fits(ram_gb / k):
            k -= 1
        why = f"{len(cores)} core(s), one per trial" + ("" if k == len(cores) else f", RAM for {k}")
    else:
        k = int(requested)
        if k > len(cores):
            raise UserInputError(f"FT_PARALLEL_TRIALS={k}: this process may use {len(cores)} core(s) "
                                 f"({','.join(map(str, cores))}); at most {len(cores)} trial(s) at once on CPU")
        why = f"{len(cores)} core(s) / {k}"
    c = len(cores) // k
    slots = [_slot(i, cpus=cores[i * c:(i + 1) * c], threads=c) for i in range(k)]
    return SlotPlan(requested=requested, slots=slots, cores_per_slot=c,
                    note=f"{why}: {k} slot(s) of {c} core(s), {ram_gb / k:.0f} GB RAM each, threads pinned")


def slot_lines(slots: dict[str, Any]) -> list[str]:
    """``ftagent plan --hardware``'s slots (``finetune.plan.hardware_slots``) as text: the requested K's slots, or
    why it is refused, and what ``auto`` would make."""
    out = []
    for key in ("requested", "auto"):
        found = slots.get(key) or {}
        if "refused" in found:
            out.append(f"FT_PARALLEL_TRIALS={found['requested']}: refused: {found['refused']}")
            continue
        sp = SlotPlan.model_validate(found)
        if key == "requested":
            out += sp.lines()
        elif sp.requested != (slots.get("requested") or {}).get("requested"):
            out.append(f"auto would make {sp.k} slot(s): {sp.note}")
    return out
