"""vLLM evaluation (GPU only): the rendered VLLMwithChatTemplate config runs and scores demo_add."""

from __future__ import annotations

import shutil

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or shutil.which("nvidia-smi") is None,
                                reason="needs a CUDA GPU and vLLM in the tool env")


def test_vllm_demo_add(tools_env, tiny_model, tmp_path):
    from ftagent.evaluate.opencompass import evaluate_model_path
    from ftagent.runners.local import LocalRunner
    from ftagent.settings import load_settings

    settings = load_settings(file_path=tmp_path / "ft", benchmark_limit=20)
    result = evaluate_model_path(tiny_model, None, benchmark="demo_add", split="validation", settings=settings,
                                 runner=LocalRunner(tools_env), work_dir=tmp_path / "w",
                                 model_name="builtin/tiny-qwen2", gpu_count=torch.cuda.device_count())
    assert result.score is not None and "VLLMwithChatTemplate" in (tmp_path / "w" / "oc_validation.py").read_text()
