"""Issue 30 finding 11a: a DoRA adapter (adapter_config.json ``use_dora: true``) is merged into its base
before vLLM serves it (vLLM refuses DoRA: vllm/lora/peft_helper.py, "vLLM does not yet support DoRA.")."""

from __future__ import annotations

import json
from pathlib import Path

from ftagent.benchmarks import get_benchmark
from ftagent.core.settings import load_settings
from ftagent.runners.base import RunResult
from ftagent.tools.opencompass.merge import merge_reasons
from ftagent.tools.opencompass.runs import evaluate_splits_of_path
from tests.helpers.weights import safetensors_bytes
from tests.unit.test_oc_vllm_server import HostOpenCompass, MiniServe


class MergingHost(HostOpenCompass):
    """The host fake OpenCompass, which also runs the merge command (writes a merged model folder)."""

    def __init__(self) -> None:
        super().__init__()
        self.merges: list[list[str]] = []

    def run(self, cmd, **kwargs):
        if cmd[:2] == ["python", "-c"]:  # merge_command: python -c MERGE_SCRIPT base adapter out
            self.merges.append(cmd[3:])
            out = Path(cmd[5])
            out.mkdir(parents=True, exist_ok=True)
            (out / "config.json").write_text("{}")
            (out / "model.safetensors").write_bytes(safetensors_bytes(b"merged"))
            return RunResult(exit_code=0, duration_s=0.1)
        return super().run(cmd, **kwargs)


def _adapter(tmp_path: Path, **cfg) -> Path:
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 8, **cfg}))
    (adapter / "adapter_model.safetensors").write_bytes(safetensors_bytes(b"lora"))
    (adapter / "chat_template.jinja").write_text("{{ messages }}")
    return adapter


def test_dora_needs_a_merge_for_vllm_only(tmp_path):
    adapter = _adapter(tmp_path, use_dora=True)
    assert any("DoRA" in r for r in merge_reasons(adapter, backend="vllm"))
    assert merge_reasons(adapter, backend="hf") == []


def test_dora_adapter_is_served_merged_not_with_enable_lora(tmp_path, monkeypatch):
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text("{}")
    (base / "chat_template.jinja").write_text("{{ messages }}")
    adapter = _adapter(tmp_path, use_dora=True)
    monkeypatch.setenv("FT_EVAL_BACKEND", "vllm-server")
    runner, serve = MergingHost(), MiniServe()
    evaluate_splits_of_path(adapter, None, benchmark=get_benchmark("demo_add"), settings=load_settings(
        file_path=tmp_path / "ft", benchmark_limit=4), runner=runner, work_dir=tmp_path / "w", base_path=base,
        model_name="builtin/tiny-qwen2", serve_command=serve)
    assert runner.merges == [[str(base), str(adapter), str(tmp_path / "w" / "merged_model")]]
    req = serve.requests[0]
    assert req.model == str((tmp_path / "w" / "merged_model").resolve())
    assert req.lora_modules == {}  # no --enable-lora / --lora-modules
    assert req.tokenizer == str(adapter.resolve())  # the training chat template stays the adapter's
