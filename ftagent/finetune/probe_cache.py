"""The forecast's measurements, cached under ``FT_FILE_PATH/forecast/probes.json``: a training probe per (model,
method, cutoff, batch, LoRA rank, hardware, CPU count and load band), an evaluation probe per (model, benchmark,
hardware, load), the planner's LLM latency per model. An entry older than ``PROBE_MAX_AGE_S`` (24 h) or made
under another load band is measured again (issue 32 item 5: a probe from a busier machine a minute earlier
made a forecast 68 % high)."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftagent.core.forecast_arithmetic import LOAD_BANDS as BAND_BOUNDS
from ftagent.core.forecast_arithmetic import EvalProbe

if TYPE_CHECKING:
    from ftagent.core.settings import Settings
    from ftagent.core.types import ScenarioInfo

PROBE_MAX_AGE_S = 24 * 3600.0  # a cached probe older than this is measured again (a day: drivers, thermals, load)
# 1-min load average per CPU, upper bounds (core.forecast_arithmetic.LOAD_BANDS owns them: the planner's speed range reads
# the same bands); above the last: overloaded
LOAD_BANDS = tuple((hi, name) for name, (_lo, hi) in BAND_BOUNDS.items() if name != "overloaded")


def forecast_dir(file_path: str | Path) -> Path:
    """``FT_FILE_PATH/forecast``: the probe cache and the probe's scratch workspace."""
    return Path(file_path).absolute() / "forecast"


def _cache_path(file_path: str | Path) -> Path:
    return forecast_dir(file_path) / "probes.json"


def load_cache(file_path: str | Path) -> dict[str, Any]:
    try:
        cached: dict[str, Any] = json.loads(_cache_path(file_path).read_text(encoding="utf-8"))
        return cached
    except (OSError, ValueError):
        return {}


def store(file_path: str | Path, key: str, value: dict[str, Any]) -> None:
    path = _cache_path(file_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cache = load_cache(file_path)
    cache[key] = value
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(cache, indent=1), encoding="utf-8")
    tmp.replace(path)


def _fresh(entry: dict[str, Any] | None, now: float | None = None) -> dict[str, Any] | None:
    """``entry`` when it was measured less than ``PROBE_MAX_AGE_S`` ago (None: absent, expired, undated)."""
    if not entry or not entry.get("measured_at"):
        return None
    age = (time.time() if now is None else now) - float(entry["measured_at"])
    return entry if 0 <= age < PROBE_MAX_AGE_S else None


def cached_probe(file_path: str | Path, key: str) -> dict[str, Any] | None:
    """The cached measurement under ``key`` if still fresh."""
    return _fresh(load_cache(file_path).get(key))


@functools.cache
def machine_load() -> str:
    """The CPUs this process may use and their 1-min load average per CPU, as a band ("2 cpus, busy").

    Sampled once per process, at the start-up's first call (``FinetuneScenario.prepare``), so ``plan``
    and the session after it key the cache by the load they started under, not by their own baseline's.
    """
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        per_cpu = os.getloadavg()[0] / max(1, cpus)
    except OSError:  # no load average on this platform
        return f"{cpus} cpus"
    band = next((name for bound, name in LOAD_BANDS if per_cpu < bound), "overloaded")
    return f"{cpus} cpus, {band}"


def _hardware_key(scenario: ScenarioInfo) -> str:
    gpus = [g.name for g in scenario.hardware.gpus] if scenario.hardware.gpus else []
    where = ",".join(gpus) if gpus else f"cpu, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '?')}"
    return f"{where}; {machine_load()}"


def train_key(scenario: ScenarioInfo, recipe: dict[str, Any]) -> str:
    """The cache key of a training probe: model, method, cutoff, batch, LoRA rank, hardware and load."""
    parts = [scenario.base_model, recipe.get("finetuning_type"), recipe.get("cutoff_len"),
             recipe.get("per_device_train_batch_size"), recipe.get("gradient_accumulation_steps"),
             recipe.get("lora_rank"), _hardware_key(scenario)]
    return "train:" + hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:16]


def eval_key(scenario: ScenarioInfo) -> str:
    """The cache key of an evaluation probe: model, benchmark, hardware and load."""
    parts = [scenario.base_model, scenario.benchmark, _hardware_key(scenario)]
    return "eval:" + hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def cached_eval(settings: Settings, scenario: ScenarioInfo) -> EvalProbe | None:
    cached = cached_probe(settings.ft.file_path, eval_key(scenario))
    return EvalProbe(**cached) if cached else None


def remember_eval(settings: Settings, scenario: ScenarioInfo, probe: EvalProbe) -> None:
    store(settings.ft.file_path, eval_key(scenario), probe.model_dump())
