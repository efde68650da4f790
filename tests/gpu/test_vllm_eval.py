"""GPU evaluation (GPU only): the backend the envs allow (issue 15).

* the eval env imports vllm → in-process ``VLLMwithChatTemplate``;
* else the vLLM env (``FT_VLLM_ENV``, default ``FT_FILE_PATH/envs/vllm``) imports vllm → ``vllm-server``:
  vLLM's OpenAI server from the vLLM env, OpenCompass (tool env) calling it, the server gone afterwards;
* else HF on the GPU with one warning, never a crash.

Whichever it is, validation + test run in one OpenCompass process and score the tiny model.
"""

from __future__ import annotations

import pytest

from ftagent.benchmarks import get_benchmark
from ftagent.core.hardware import detect_gpus

pytestmark = pytest.mark.gpu


def _evaluate(tools_env, tiny_model, tmp_path, warnings):
    from ftagent.core.settings import load_settings
    from ftagent.runners.local import LocalRunner
    from ftagent.tools.opencompass.backend import clear_probe_cache
    from ftagent.tools.opencompass.runs import evaluate_splits_of_path

    clear_probe_cache()
    settings = load_settings(file_path=tmp_path / "ft", benchmark_limit=20)
    return evaluate_splits_of_path(tiny_model, None, benchmark=get_benchmark("demo_add"), splits=("validation", "test"),
                                   settings=settings, runner=LocalRunner(tools_env), work_dir=tmp_path / "w",
                                   model_name="builtin/tiny-qwen2", gpu_count=detect_gpus().gpu_count,
                                   on_warning=warnings.append)


def _vllm_env_usable(monkeypatch) -> bool:
    """Whether the machine's vLLM env imports vllm; pins FT_VLLM_ENV to it (the evaluation below has
    its own FT_FILE_PATH, whose default envs/vllm does not exist)."""
    from ftagent.core.settings import load_settings
    from ftagent.runners.vllmenv import vllm_available, vllm_env_path

    env = vllm_env_path(load_settings())
    monkeypatch.setenv("FT_VLLM_ENV", str(env))
    return vllm_available(env)


def test_gpu_evaluation_uses_the_backend_the_env_has(tools_env, tiny_model, tmp_path, monkeypatch):
    # the device check's env (run_device_check.sh, from the wheelhouse) carries LLaMA-Factory only
    if not (tools_env / "bin" / "opencompass").exists():
        pytest.skip(f"the tool env {tools_env} has no OpenCompass (the device check's wheelhouse has LLaMA-Factory only)")
    from ftagent.runners.local import LocalRunner
    from ftagent.tools.opencompass.backend import clear_probe_cache, probe_vllm

    clear_probe_cache()
    has_vllm = probe_vllm(LocalRunner(tools_env)).available
    has_vllm_env = _vllm_env_usable(monkeypatch) and not has_vllm
    warnings: list[str] = []
    out = _evaluate(tools_env, tiny_model, tmp_path, warnings)
    assert out["validation"].score is not None and out["test"].score is not None
    cfg = (tmp_path / "w" / "oc_validation_test.py").read_text()
    if has_vllm:
        assert "VLLMwithChatTemplate" in cfg and not warnings
    elif has_vllm_env:
        assert "TrainedFormatOpenAIModel" in cfg and "openai_api_base='http://127.0.0.1:" in cfg and not warnings
        assert "Uvicorn running" in (tmp_path / "w" / "model_server.log").read_text()
    else:
        assert "TrainedFormatChatModel" in cfg and "device_map='auto'" in cfg
        assert len(warnings) == 1 and "vLLM is not importable" in warnings[0]
