"""The vllm-server backend end to end on CPU: real OpenCompass (tool env) calling a real OpenAI-compatible
server, the stand-in ``tests/fakes/hf_openai_server.py`` started with exactly the flags ftagent gives
vLLM's api_server. It must score like the HF backend and give the same prediction for every item, for
a full model and for a LoRA adapter served natively; the server must be gone afterwards, and a server
that dies at start must be a StepError carrying its log.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pytest

from ftagent.benchmarks import get_benchmark
from ftagent.core.errors import StepError
from ftagent.core.settings import load_settings
from ftagent.runners.local import LocalRunner
from ftagent.tools.opencompass import parse
from ftagent.tools.opencompass.evaluator import evaluate_model_path
from ftagent.tools.opencompass.runs import evaluate_splits_of_path
from ftagent.tools.opencompass.serving import ServeRequest, VllmServeCommand
from tests.integration.test_evaluation import NOISE

pytestmark = pytest.mark.integration
STAND_IN = Path(__file__).resolve().parents[1] / "fakes" / "hf_openai_server.py"
SPLITS = ("validation", "test")
LORA = """
import shutil, sys, torch
from pathlib import Path
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM
base, out = Path(sys.argv[1]), Path(sys.argv[2])
torch.manual_seed(1)
model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
cfg = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
model = get_peft_model(model, cfg)
with torch.no_grad():
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.mul_(20.0)  # a visible change of the outputs
model.save_pretrained(out)
for f in base.iterdir():
    if f.name.startswith("tokenizer") or f.name in ("chat_template.jinja", "special_tokens_map.json"):
        shutil.copy(f, out / f.name)
"""


class StandInServe:
    """ftagent's own vLLM command line with the stand-in in place of ``python -m vllm...api_server``."""

    def __init__(self, python: Path, **override: str) -> None:
        self.python, self.override = python, override
        self.requests: list[ServeRequest] = []

    def __call__(self, request: ServeRequest) -> list[str]:
        self.requests.append(request)
        request = request.model_copy(update=self.override)
        argv = VllmServeCommand(Path("/nonexistent/vllm"))(request)
        assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
        return [str(self.python), str(STAND_IN), *argv[3:]]


@pytest.fixture(scope="module")
def noisy_model(tools_python, tiny_model, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("noisy") / "tiny-qwen2-noisy"
    subprocess.run([str(tools_python), "-c", NOISE, str(tiny_model), str(out)], check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def adapter(tools_python, noisy_model, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lora") / "adapter"
    subprocess.run([str(tools_python), "-c", LORA, str(noisy_model), str(out)], check=True, capture_output=True)
    return out


def _evaluate(model: Path, backend: str, tmp: Path, tools_env: Path, serve=None, base: Path | None = None):
    settings = load_settings(file_path=tmp / f"ft_{backend}", benchmark_limit=20, eval_backend=backend)
    t0 = time.monotonic()
    out = evaluate_splits_of_path(model, None, benchmark=get_benchmark("demo_add"), splits=SPLITS, settings=settings,
                                  runner=LocalRunner(tools_env, sandbox="none"), work_dir=tmp / f"work_{backend}",
                                  base_path=base, model_name="builtin/tiny-qwen2", timeout=900, serve_command=serve)
    return out, time.monotonic() - t0


def _port_closed(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) != 0


def _no_process_with(port: int) -> bool:
    needle = f"--port\0{port}\0".encode()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if needle in cmdline.read_bytes():
                return False
        except OSError:
            continue
    return True


def _same_results(hf, served) -> set[str]:
    outputs: set[str] = set()
    for split in SPLITS:
        a, b = hf[split], served[split]
        assert (a.score, a.metrics, a.error_samples) == (b.score, b.metrics, b.error_samples), split
        preds_hf = parse.read_predictions(Path(a.run_dir), split)
        preds_srv = parse.read_predictions(Path(b.run_dir), split)
        assert preds_hf == preds_srv and len(preds_srv["demo_add"]) == 20, split
        outputs |= set(preds_srv["demo_add"].values())
    return outputs


@pytest.mark.parametrize("kind", ["full", "lora"])
def test_vllm_server_matches_hf(kind, tools_env, tools_python, noisy_model, adapter, tmp_path):
    model, base = (noisy_model, None) if kind == "full" else (adapter, noisy_model)
    hf, hf_s = _evaluate(model, "hf", tmp_path, tools_env, base=base)
    serve = StandInServe(tools_python)
    served, srv_s = _evaluate(model, "vllm-server", tmp_path, tools_env, serve=serve, base=base)
    outputs = _same_results(hf, served)
    assert len(outputs) > 20  # outputs differ from item to item: the comparison can fail
    cfg = (tmp_path / "work_vllm-server" / "oc_validation_test.py").read_text()
    assert "TrainedFormatOpenAIModel" in cfg and len(serve.requests) == 1  # one server for both splits
    req = serve.requests[0]
    if kind == "lora":
        assert req.lora_modules == {"ft": str(adapter.resolve())} and req.model == str(noisy_model.resolve())
        assert "path='ft'," in cfg
    log = (tmp_path / "work_vllm-server" / "model_server.log").read_text()
    assert "POST /v1/chat/completions" in log and "ignoring unknown" not in log  # every flag understood
    assert _port_closed(req.port) and _no_process_with(req.port)  # the server is gone
    print(f"\n{kind}: HF {hf['validation'].score}/{hf['test'].score} in {hf_s:.1f} s, vllm-server "
          f"{served['validation'].score}/{served['test'].score} in {srv_s:.1f} s")


def test_lora_changes_the_outputs(tools_env, tools_python, noisy_model, adapter, tmp_path):
    """The adapter really is applied by the server (its answers differ from the base model's)."""
    serve = StandInServe(tools_python)
    base_out, _ = _evaluate(noisy_model, "vllm-server", tmp_path / "base", tools_env, serve=serve)
    lora_out, _ = _evaluate(adapter, "vllm-server", tmp_path / "lora", tools_env, serve=serve, base=noisy_model)
    a = parse.read_predictions(Path(base_out["validation"].run_dir), "validation")["demo_add"]
    b = parse.read_predictions(Path(lora_out["validation"].run_dir), "validation")["demo_add"]
    assert a != b


def test_server_dying_at_start_is_a_step_error(tools_env, tools_python, noisy_model, tmp_path):
    serve = StandInServe(tools_python, model=str(tmp_path / "no-such-model"))
    settings = load_settings(file_path=tmp_path / "ft", benchmark_limit=4, eval_backend="vllm-server")
    t0 = time.monotonic()
    with pytest.raises(StepError) as err:
        evaluate_model_path(noisy_model, None, benchmark=get_benchmark("demo_add"), split="validation", settings=settings,
                            runner=LocalRunner(tools_env, sandbox="none"), work_dir=tmp_path / "w",
                            model_name="builtin/tiny-qwen2", timeout=600, serve_command=serve)
    assert time.monotonic() - t0 < 120
    e = err.value
    assert e.error_type.value == "EVAL" and "exited with code" in e.message
    assert "no-such-model" in e.log_tail and "Traceback" in e.log_tail and e.suggestion
    assert not (tmp_path / "w" / "eval").exists()  # OpenCompass never ran


@pytest.mark.parametrize(("override", "expected"), [
    ({"tensor_parallel_size": 3}, "tensor_parallel_size=3 does not divide num_attention_heads=4"),
    ({"max_model_len": 4096}, "max_model_len=4096 is greater than the model's context 512"),
])
def test_flags_vllm_refuses_fail_the_start_with_vllms_message(override, expected, tools_env, tools_python,
                                                                tiny_model, tmp_path):
    """The stand-in applies vLLM's start-up rules (vllm_rules.py): ftagent's start failure carries the reason."""
    serve = StandInServe(tools_python, **override)
    settings = load_settings(file_path=tmp_path / "ft", benchmark_limit=4, eval_backend="vllm-server")
    with pytest.raises(StepError) as err:
        evaluate_model_path(tiny_model, None, benchmark=get_benchmark("demo_add"), split="validation", settings=settings,
                            runner=LocalRunner(tools_env, sandbox="none"), work_dir=tmp_path / "w",
                            model_name="builtin/tiny-qwen2", timeout=600, serve_command=serve)
    assert "exited with code 1" in err.value.message and f"ValueError: {expected}" in err.value.log_tail
    assert "loading" not in err.value.log_tail and not (tmp_path / "w" / "eval").exists()
