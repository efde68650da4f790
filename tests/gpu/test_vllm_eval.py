"""vLLM evaluation (GPU only): the rendered VLLMwithChatTemplate config runs and scores demo_add."""

from __future__ import annotations

import subprocess

import pytest

from ftagent.core.hardware import detect_gpus

pytestmark = pytest.mark.gpu


def test_vllm_demo_add(tools_env, tiny_model, tmp_path):
    if subprocess.run([str(tools_env / "bin" / "python"), "-c", "import vllm"], capture_output=True).returncode:
        pytest.skip("vLLM is not installed in the tool env (pip install vllm there on a GPU machine)")
    from ftagent.core.settings import load_settings
    from ftagent.runners.local import LocalRunner
    from ftagent.tools.opencompass.evaluator import evaluate_model_path

    settings = load_settings(file_path=tmp_path / "ft", benchmark_limit=20)
    result = evaluate_model_path(tiny_model, None, benchmark="demo_add", split="validation", settings=settings,
                                 runner=LocalRunner(tools_env), work_dir=tmp_path / "w",
                                 model_name="builtin/tiny-qwen2", gpu_count=detect_gpus().gpu_count)
    assert result.score is not None and "VLLMwithChatTemplate" in (tmp_path / "w" / "oc_validation.py").read_text()
