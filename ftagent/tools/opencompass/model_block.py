"""The model block of an OpenCompass config and the judge's settings.

:func:`model_spec` is what OpenCompass gets for the evaluated model (:class:`~.render.ModelSpec`): the model's
inference settings (models.yaml or start-up's), fitted to the backend, the device and the GPUs here.
:func:`judge_block` is the LLM judge's block: its identity for the cache key, or routed through the session's
gateway for the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ftagent.tools.opencompass.inference import (
    InferenceSettings,
    inference_config,
    read_model_config,
    samples,
)
from ftagent.tools.opencompass.render import ModelSpec, template_folder

if TYPE_CHECKING:
    from ftagent.core.settings import Settings

# the judge's "reply" when the gateway answers 402: neither A nor CORRECT, so the item keeps its rule score
JUDGE_BUDGET_NOTE = "not judged: the session's llm budget is spent"


def judge_block(settings: Settings, *, routed: bool = False) -> dict[str, str] | None:
    """The LLM judge's settings: the real model/base/retries (the cache key's part; never the key),
    or with ``routed`` the block OpenCompass gets: the session's judge gateway (``settings.judge_route``,
    URL + token, see :meth:`ftagent.llm.gateway.LLMGateway.for_judge`) in place of the real base."""
    ft = settings.ft
    if ft.judge_api_key is None or not ft.judge_model:
        return None
    judge = {"model": ft.judge_model, "key_env": "ENV", "api_base": ft.judge_api_base or "",
             "retry": str(ft.judge_retry)}
    route = getattr(settings, "judge_route", None)
    if routed and route is not None:
        judge["api_base"] = route.url.rstrip("/") + "/"
        judge["on_budget_spent"] = JUDGE_BUDGET_NOTE  # HTTP 402: this reply, not retries and a crash
    return judge


def model_spec(model_path: Path, base_path: Path | None, model_name: str, gpu_count: int, abbr: str,
               serve_adapter: bool, backend: str = "hf", device: str = "cpu",
               inference: InferenceSettings | None = None) -> ModelSpec:
    """The model block: inference settings of ``model_name`` (``inference``, else models.yaml) on
    ``backend``/``device``."""
    adapter = model_path if serve_adapter else None
    full = base_path if serve_adapter else model_path
    # TP and max_model_len follow the served model's own config.json (vllm_rules, issue 30)
    memory_gb, capability, gpu_name = _gpu_facts(gpu_count)
    inf = inference_config(model_name, gpu_count, inference=inference, model_config=read_model_config(full),
                           per_gpu_memory_gb=memory_gb, compute_capability=capability, gpu_name=gpu_name)
    cpu = backend == "hf" and device == "cpu"
    return ModelSpec(
        backend=backend, device=device, abbr=abbr, path=str(Path(full).resolve()),  # type: ignore[arg-type]
        adapter_path=str(Path(adapter).resolve()) if adapter else None,
        tokenizer_path=str(template_folder(model_path, base_path)),
        max_seq_len=int(inf["max_seq_len"]), max_out_len=int(inf["max_out_len"]),
        batch_size=int(inf.get("cpu_batch_size", 8) if cpu else inf["batch_size"]),
        temperature=float(inf["temperature"]), top_p=float(inf["top_p"]), top_k=int(inf["top_k"]),
        do_sample=samples(inf["temperature"], backend),
        tensor_parallel_size=int(inf["tensor_parallel_size"]),
        gpu_memory_utilization=float(inf["gpu_memory_utilization"]), dtype=str(inf["dtype"]),
        max_lora_rank=int(inf.get("max_lora_rank", 64)), enable_thinking=bool(inf["enable_thinking"]),
    )


def _gpu_facts(gpu_count: int) -> tuple[float, tuple[int, int] | None, str]:
    """GB per GPU (TP choice, KV cache), compute capability (vLLM dtype) and the GPU's name (vLLM's batch
    defaults) from NVML; (0, None, "") without GPUs."""
    if gpu_count <= 0:
        return 0.0, None, ""
    from ftagent.core.hardware import detect_gpus
    from ftagent.tools.launch.profiles import profile_of

    profile = profile_of(detect_gpus())
    return profile.memory_gb, profile.compute_capability if profile.gpu_count else None, profile.gpu_name
