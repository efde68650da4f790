"""Backend choice (issue 15): vLLM only where the eval env imports it, else HF with one warning."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from ftagent.runners.base import RunResult
from ftagent.tools.opencompass import backend
from ftagent.tools.opencompass.backend import VllmProbe, choose_backend, env_identity, probe_vllm, warn_once
from ftagent.tools.opencompass.model_block import model_spec
from ftagent.tools.opencompass.render import render_config
from tests.unit.test_oc_render import BLOCK


@pytest.fixture(autouse=True)
def _fresh_cache():
    backend.clear_probe_cache()
    yield
    backend.clear_probe_cache()


class ProbeRunner:
    """Answers the ``import vllm`` probe; counts the calls."""

    name = "probe"

    def __init__(self, ok: bool, tools_env: str = "/envs/tools") -> None:
        self.ok, self.tools_env, self.calls = ok, tools_env, []

    def run(self, cmd, **kwargs):
        self.calls.append((cmd, kwargs))
        if self.ok:
            return RunResult(exit_code=0, duration_s=0.1, log_tail="INFO noise\nvllm 0.10.1")
        return RunResult(exit_code=1, duration_s=0.1, log_tail="Traceback\nModuleNotFoundError: No module named 'vllm'")


def _probe(available: bool):
    seen = []

    def fake(runner):
        seen.append(runner)
        return VllmProbe(env="fake", available=available, version="0.9" if available else None,
                         detail="" if available else "No module named 'vllm'")
    return fake, seen


def test_no_gpu_is_hf_on_cpu_without_probing():
    fake, seen = _probe(True)
    choice = choose_backend(0, ProbeRunner(True), probe=fake)
    assert (choice.backend, choice.device, choice.warning) == ("hf", "cpu", None) and seen == []


def test_gpu_with_vllm_uses_vllm():
    fake, seen = _probe(True)
    choice = choose_backend(2, ProbeRunner(True), probe=fake)
    assert (choice.backend, choice.device, choice.warning) == ("vllm", "cuda", None) and len(seen) == 1


def test_gpu_without_vllm_falls_back_to_hf_on_gpu_with_warning():
    fake, _ = _probe(False)
    choice = choose_backend(1, ProbeRunner(False), probe=fake)
    assert (choice.backend, choice.device) == ("hf", "cuda")
    assert "vLLM is not importable" in choice.warning and "No module named" in choice.warning


def test_probe_runs_once_per_env_and_reads_the_version():
    runner = ProbeRunner(True)
    first, second = probe_vllm(runner), probe_vllm(runner)
    assert first.available and first.version == "0.10.1" and second is first and len(runner.calls) == 1
    cmd, kwargs = runner.calls[0]
    assert cmd[:2] == ["python", "-c"] and "import vllm" in cmd[2] and kwargs["tool"] == "eval"
    other = ProbeRunner(False, tools_env="/envs/other")  # another env is probed on its own
    assert not probe_vllm(other).available and len(other.calls) == 1
    assert "No module named" in probe_vllm(other).detail


def test_probe_of_a_runner_that_raises_means_no_vllm():
    class Broken:
        name, tools_env = "broken", "/x"

        def run(self, cmd, **kwargs):
            raise OSError("cannot start")
    assert not probe_vllm(Broken()).available


def test_env_identity_unwraps_recording_runners():
    inner = SimpleNamespace(tools_env=Path("/envs/tools"))
    wrapped = SimpleNamespace(inner=inner, name="recording")
    assert env_identity(wrapped) == env_identity(inner) == "SimpleNamespace:/envs/tools"
    assert env_identity(SimpleNamespace(inner=None, env_name="ftagent-tools")).endswith(":ftagent-tools")

    class Docker:
        @property
        def image(self):
            return "ftagent-tools:cpu-abc123"

    class Broken:
        @property
        def image(self):
            raise RuntimeError("no spec")
    assert env_identity(Docker()) == "Docker:ftagent-tools:cpu-abc123"
    assert env_identity(Broken()).startswith("Broken:")


def test_warning_is_reported_once_per_env():
    fake, _ = _probe(False)
    choice = choose_backend(1, ProbeRunner(False), probe=fake)
    got = []
    warn_once(choice, "env-a", got.append)
    warn_once(choice, "env-a", got.append)
    warn_once(choice, "env-b", got.append)
    assert len(got) == 2


def _spec(tmp_path: Path, gpu_count: int, backend_name: str, device: str):
    model = tmp_path / "m"
    model.mkdir(exist_ok=True)
    (model / "chat_template.jinja").write_text("{{ messages }}")
    return model_spec(model, None, "Qwen/Qwen2.5-7B-Instruct", gpu_count, "ft-x", serve_adapter=False,
                      backend=backend_name, device=device)


@pytest.mark.parametrize("gpus,tp", [(1, 1), (2, 2), (3, 2), (4, 2), (8, 2)])
def test_tensor_parallel_size_follows_visible_gpus(tmp_path, monkeypatch, gpus, tp):
    """TP auto: the smallest size that divides Qwen2.5-7B's 28 heads and fits 24 GB GPUs (issue 30: it
    was the largest power of two, 8, which vLLM refuses)."""
    import shutil

    from ftagent.tools.opencompass import model_block

    (tmp_path / "m").mkdir(exist_ok=True)
    shutil.copy(Path(__file__).parents[1] / "fixtures/model_configs/Qwen__Qwen2.5-7B/config.json", tmp_path / "m")
    monkeypatch.setattr(model_block, "_gpu_facts", lambda n: (24.0, (8, 6), "NVIDIA A10G"))
    spec = _spec(tmp_path, gpus, "vllm", "cuda")
    assert spec.tensor_parallel_size == tp
    src = render_config([BLOCK], spec, benchmark="demo_add", split="validation", in_process=True)
    assert f"tensor_parallel_size={tp}" in src and f"num_gpus={tp}" in src and "VLLMwithChatTemplate" in src


def test_hf_on_gpu_renders_a_cuda_model(tmp_path):
    spec = _spec(tmp_path, 2, "hf", "cuda")
    assert spec.batch_size == 16 and not spec.do_sample  # the GPU batch size; HF stays greedy
    src = render_config([BLOCK], spec, benchmark="demo_add", split="validation", in_process=True)
    assert "device_map='auto'" in src and "torch_dtype='torch.bfloat16'" in src and "num_gpus=1" in src
    assert "VLLMwithChatTemplate" not in src
    cpu = _spec(tmp_path, 0, "hf", "cpu")
    assert cpu.batch_size == 8
    src = render_config([BLOCK], cpu, benchmark="demo_add", split="validation")
    assert "device_map='cpu'" in src and "num_gpus=0" in src
