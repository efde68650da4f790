"""A session's slots (``FT_PARALLEL_TRIALS``) and each slot's view of the scenario (issue 41).

:func:`session_slots` plans the slots for the GPUs the scenario found (or the CPU cores this process may
use) with :mod:`ftagent.tools.launch.slots`; :func:`slot_scenario` is what a trial on one slot sees: only
the slot's GPUs (so every command gets ``CUDA_VISIBLE_DEVICES`` = those, the validator's deepspeed and
torchrun settings are for that many) and the memory estimate for that many GPUs, or for the slot's share
of the RAM on CPU, so the planner sizes its recipe for the slot. ``ftagent plan --hardware`` shows the
slots of a described machine (:func:`ftagent.finetune.plan.hardware_slots`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ftagent.core.hardware import HardwareInfo
from ftagent.core.slots import Slot
from ftagent.core.types import ScenarioInfo
from ftagent.tools.launch.slots import SlotPlan

if TYPE_CHECKING:
    from ftagent.core.settings import Settings


def usable_cores() -> list[int]:
    """The cores this process may run on (its affinity: a container's or a job's share)."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def ram_gb() -> float:
    from ftagent.finetune.hardware_plan import host_ram_gb

    return host_ram_gb()


def session_slots(settings: Settings, hardware: HardwareInfo, model_path: Path | str, *, name: str = "",
                  inference: dict[str, Any] | None = None) -> SlotPlan:
    """The slots of this session: FT_PARALLEL_TRIALS on these GPUs, else on this process's cores.

    Raises:
        UserInputError: a K the machine cannot hold (exit 2, before any trial).
    """
    from ftagent.tools.launch.profiles import profile_of
    from ftagent.tools.launch.slots import plan_cpu_slots, plan_gpu_slots
    from ftagent.tools.opencompass.inference import read_model_config

    requested = settings.ft.parallel_trials
    if hardware.gpu_count:
        ids = [g.uuid for g in hardware.gpus]
        if not all(ids):  # indices mean NVML's order only with CUDA_DEVICE_ORDER=PCI_BUS_ID (docs/distributed.md)
            ids = [str(g.index) for g in hardware.gpus]
        try:
            config = read_model_config(Path(model_path))
        except (OSError, ValueError):
            config = None
        from ftagent.finetune.hardware_plan import offload_of

        return plan_gpu_slots(requested, profile_of(hardware), config or None, name=name, inference=inference,
                              cpu_ram_gb=ram_gb(), gpu_ids=ids, gpu_indices=[g.index for g in hardware.gpus],
                              offload=offload_of(settings))
    return plan_cpu_slots(requested, usable_cores(), ram_gb=ram_gb(), fits=lambda share: _fits_cpu(model_path, share))


def check_slots(settings: Settings, prepared: Any, run: Any) -> None:
    """Plan the slots once before a new session exists (UserInputError, exit 2, for a K this machine cannot
    hold); ``prepared``: what the start-up prepared (its ``model_path``), ``run``: its ``ResolvedRun``."""
    if settings.ft.slot_executor == "ray":
        import importlib.util

        from ftagent.core.errors import UserInputError

        if importlib.util.find_spec("ray") is None:
            raise UserInputError("FT_SLOT_EXECUTOR=ray needs Ray in ftagent's environment: pip install 'ftagent[ray]'")
    if settings.ft.parallel_trials == "1":
        return
    from ftagent.core.hardware import detect_gpus

    session_slots(settings, detect_gpus(), prepared.model_path, name=run.model.name,
                  inference=run.model.inference.values)


def end_tool_processes() -> None:
    """Trials at once, interrupted: end every running tool process of this session (the trials' workers then
    leave their steps: :mod:`ftagent.engine.parallel`)."""
    from ftagent.runners import reaper

    reaper.kill_running_groups()


def slot_pricing(settings: Settings, scenario: ScenarioInfo) -> tuple[int, float, str]:
    """For the forecast: ``(slots, a trial's training time on its slot ÷ the probe's, the assumption)``.
    The probe trains on every GPU of the scenario; a slot of g of N GPUs is taken to train N/g times as long
    (data parallelism scaling linearly). One slot: ``(1, 1.0, "")``; an impossible K is priced as one slot."""
    from ftagent.core.errors import UserInputError

    try:
        plan = session_slots(settings, scenario.hardware, scenario.base_model_path, name=scenario.base_model)
    except UserInputError:
        return 1, 1.0, ""
    if plan.k <= 1:
        return 1, 1.0, ""
    n = scenario.hardware.gpu_count
    scale = n / plan.gpus_per_slot if n and plan.gpus_per_slot else 1.0
    on = (f"{plan.gpus_per_slot} of {n} GPUs: {scale:g}× the probe's training time (linear data parallelism "
          "assumed)" if scale != 1.0 else f"{plan.cores_per_slot} core(s), as the probe")
    return plan.k, scale, f"{plan.k} trials at once (FT_PARALLEL_TRIALS={plan.requested}), each on {on}; the " \
                          "loops' wall time is their schedule over the slots"


def _fits_cpu(model_path: Path | str, share_gb: float) -> bool:
    from ftagent.tools.llamafactory.memory import estimate_memory, model_spec

    try:
        report = estimate_memory(model_spec(Path(model_path)), share_gb, 1, device="cpu")
    except (OSError, KeyError, ValueError):
        return True  # no estimate: trust the user's K
    return any(m.fits for m in report.methods if m.method != "qlora")


def slot_scenario(scenario: ScenarioInfo, slot: Slot, slots: int, *, settings: Settings, inference: Any) -> ScenarioInfo:
    """The scenario a trial on ``slot`` sees (the module docstring): the slot's GPUs, and the session's plan
    (``finetune.hardware_plan.session_plan``) made for them — its memory table, the plan every train.yaml of the
    trial is checked against — or, on CPU, for the slot's share of the RAM. ``slots``: how many the session has;
    ``inference``: the model's InferenceSettings as the start-up resolved them."""
    from ftagent.finetune.hardware_plan import session_plan

    hw = scenario.hardware
    if hw.gpu_count:
        mine = [g for g in hw.gpus if g.index in slot.gpu_indices]
        hardware = hw.model_copy(update={"gpus": mine, "cuda_visible_devices": ",".join(slot.gpus)})
        ram = ram_gb()
    else:
        hardware, ram = hw, ram_gb() / max(1, slots)
    update: dict[str, Any] = {"hardware": hardware, "slot": slot}
    plan = session_plan(Path(scenario.base_model_path), hardware, name=scenario.base_model, inference=inference,
                        cpu_ram_gb=ram, settings=settings)
    if plan is not None:
        update.update(memory=plan.memory.model_dump(mode="json"), memory_report=plan.memory.to_markdown(),
                      launch_plan=plan.model_dump(mode="json"))
    return scenario.model_copy(update=update)


class TrialsAtOnce(NamedTuple):
    """What a session with K trials at once runs on: the slot plan, a slot's components and guard (built on the
    slot's scenario and runner), the pool (``ONE_AT_A_TIME``: no plan, no pool: one loop at a time)."""

    plan: SlotPlan | None
    for_slot: Callable[[Slot], tuple[Any, Any]] | None
    pool: Any

    @property
    def k(self) -> int:
        return self.plan.k if self.plan is not None else 1


ONE_AT_A_TIME = TrialsAtOnce(None, None, None)


def trials_at_once(settings: Settings, scenario: ScenarioInfo, runner: Any, *, in_flight: bool,
                   make_components: Callable[[ScenarioInfo, Any], Any],
                   make_forgetting: Callable[[ScenarioInfo, Any], Any], inference: Any,
                   emit: Callable[[Any], None] | None = None, session_dir: Path | None = None) -> TrialsAtOnce | None:
    """The slots of a session, the pool that lends them (``FT_SLOT_EXECUTOR``: this machine's, or Ray's) and how
    a slot's components are built: on the slot's scenario and a runner that gives its commands the slot's GPUs,
    cores and ports (:class:`~ftagent.runners.slot.SlotRunner`). None for one trial at a time
    (FT_PARALLEL_TRIALS=1 and no trial in flight from an earlier run).

    Raises:
        UserInputError: a K the machine cannot hold (exit 2).
    """
    from ftagent.engine.events import ScenarioStage
    from ftagent.runners.slot import SlotRunner

    if settings.ft.parallel_trials == "1" and not in_flight:
        return None
    plan = session_slots(settings, scenario.hardware, scenario.base_model_path, name=scenario.base_model,
                         inference=inference.values)

    def for_slot(slot: Slot) -> tuple[Any, Any]:
        mine = slot_scenario(scenario, slot, plan.k, settings=settings, inference=inference)
        slot_runner = SlotRunner(runner, slot)
        return make_components(mine, slot_runner), make_forgetting(mine, slot_runner)

    if emit is not None:
        emit(ScenarioStage(stage="slots", status="done", detail={
            "k": plan.k, "requested": plan.requested, "note": plan.note, "slots": [s.label for s in plan.slots],
            "gpus_per_slot": plan.gpus_per_slot, "cores_per_slot": plan.cores_per_slot,
            "executor": settings.ft.slot_executor}))
    return TrialsAtOnce(plan, for_slot, slot_pool(settings, plan, session_dir))


def slot_pool(settings: Settings, plan: SlotPlan, session_dir: Path | None) -> Any:
    """``FT_SLOT_EXECUTOR``: ``local`` lends this machine's slots; ``ray`` lends each only while a Ray task holds its
    GPUs (or cores) on this node (:mod:`ftagent.jobs.ray_slots`)."""
    from ftagent.engine.parallel import LocalSlotPool

    if settings.ft.slot_executor != "ray":
        return LocalSlotPool(plan.slots)
    from ftagent.core.errors import EnvironmentFailure
    from ftagent.jobs.ray_slots import RaySlotPool

    pool = RaySlotPool(plan.slots, address=settings.ft.ray_address, gpu_resource=settings.ft.ray_gpu_resource,
                       lease_dir=Path(session_dir or ".") / ".slots")
    try:
        pool.connect()
    except Exception as exc:  # noqa: BLE001 - no cluster at that address, a version mismatch: one clear line
        raise EnvironmentFailure(f"FT_SLOT_EXECUTOR=ray: cannot join the Ray cluster at FT_RAY_ADDRESS="
                                 f"{settings.ft.ray_address}: {type(exc).__name__}: {exc}"[:800]) from exc
    return pool
