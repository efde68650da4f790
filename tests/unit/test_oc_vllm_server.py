"""The vllm-server backend (issue 15): backend choice, the OpenAI model block, the server's life cycle,
and the wiring through ``evaluate_splits_of_path`` with a trivial HTTP server standing in for vLLM."""

from __future__ import annotations

import ast
import json
import os
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ftagent.benchmarks import get_benchmark
from ftagent.core.errors import ErrorType, StepError, UserInputError
from ftagent.core.settings import load_settings
from ftagent.tools.opencompass import backend, serving
from ftagent.tools.opencompass.backend import ServerCheck, choose_backend, runs_on_host
from ftagent.tools.opencompass.model_block import model_spec
from ftagent.tools.opencompass.render import ModelSpec, render_config
from ftagent.tools.opencompass.runs import evaluate_splits_of_path
from ftagent.tools.opencompass.serving import ServeRequest, VllmServeCommand, model_server, served_model
from tests.helpers.weights import safetensors_bytes
from tests.unit.test_oc_backend import _probe
from tests.unit.test_oc_render import BLOCK
from tests.unit.test_oc_splits import FakeOpenCompass

# A trivial OpenAI-ish server: GET /v1/models lists argv[2:]; "--exit N" exits at once with a message.
MINI_SERVER = r"""
import json, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
args = sys.argv[1:]
if args[0] == "--exit":
    print("loading model ...\nRuntimeError: CUDA out of memory (stand-in)", flush=True)
    sys.exit(int(args[1]))
if args[0] == "--hang":
    time.sleep(600)
port, names = int(args[0]), args[1:]
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        data = json.dumps({"data": [{"id": n} for n in names]}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(data))); self.end_headers()
        self.wfile.write(data)
    def log_message(self, *a):
        pass
import os
print("serving", port, names, "env:", " ".join(sorted(os.environ)), flush=True)
ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
"""


@pytest.fixture(autouse=True)
def _fresh_cache():
    backend.clear_probe_cache()
    yield
    backend.clear_probe_cache()


class LocalRunner:  # a host runner: it declares so (runners/base.py capabilities), its name decides nothing
    tools_env = "/envs/tools"
    runs_on_host = True


class DockerRunner:
    image = "ftagent-tools:gpu"


class Wrapper:
    def __init__(self, inner):
        self.inner = inner


def _server(available: bool, calls: list | None = None):
    def check():
        if calls is not None:
            calls.append(1)
        return ServerCheck(available=available, detail="" if available else "no vLLM env at /x/vllm")
    return check


# --- choose_backend ------------------------------------------------------------------------------


def test_no_gpu_is_hf_cpu_and_probes_nothing():
    fake, seen = _probe(False)
    calls: list = []
    choice = choose_backend(0, LocalRunner(), probe=fake, server=_server(True, calls))
    assert (choice.backend, choice.device, choice.warning) == ("hf", "cpu", None) and seen == calls == []


def test_gpu_with_vllm_in_the_eval_env_stays_in_process():
    fake, _ = _probe(True)
    calls: list = []
    choice = choose_backend(1, LocalRunner(), probe=fake, server=_server(True, calls))
    assert (choice.backend, choice.warning) == ("vllm", None) and calls == []


def test_gpu_with_the_vllm_env_and_a_host_runner_serves():
    fake, _ = _probe(False)
    choice = choose_backend(2, Wrapper(LocalRunner()), probe=fake, server=_server(True))
    assert (choice.backend, choice.device, choice.warning) == ("vllm-server", "cuda", None)


def test_gpu_without_a_usable_vllm_env_falls_back_with_the_reason():
    fake, _ = _probe(False)
    choice = choose_backend(1, LocalRunner(), probe=fake, server=_server(False))
    assert (choice.backend, choice.device) == ("hf", "cuda")
    assert "no vLLM env at /x/vllm" in choice.warning and "ftagent env setup --gpu" in choice.warning


def test_docker_runner_keeps_hf_and_says_why():
    fake, _ = _probe(False)
    calls: list = []
    choice = choose_backend(1, DockerRunner(), probe=fake, server=_server(True, calls))
    assert (choice.backend, choice.device) == ("hf", "cuda") and calls == []
    assert "DockerRunner" in choice.warning and "host venv" in choice.warning


def test_runs_on_host():
    assert runs_on_host(Wrapper(Wrapper(LocalRunner()))) and not runs_on_host(DockerRunner())
    assert not runs_on_host(object())

    class Plugin:
        runs_on_host = True
    assert runs_on_host(Plugin())


def test_forced_backends():
    fake_no, _ = _probe(False)
    assert choose_backend(2, LocalRunner(), probe=fake_no, forced="hf").backend == "hf"
    assert choose_backend(0, LocalRunner(), forced="hf").device == "cpu"
    no_gpu = choose_backend(0, LocalRunner(), forced="vllm-server", server=_server(True))
    assert (no_gpu.backend, no_gpu.device, no_gpu.warning) == ("vllm-server", "cpu", None)
    with pytest.raises(StepError) as err:
        choose_backend(1, LocalRunner(), probe=fake_no, forced="vllm")
    assert err.value.error_type == ErrorType.ENV and "vllm-server" in err.value.suggestion
    with pytest.raises(StepError) as err:
        choose_backend(1, LocalRunner(), probe=fake_no, forced="vllm-server", server=_server(False))
    assert "no vLLM env at /x/vllm" in err.value.message and "FT_EVAL_BACKEND=auto" in err.value.suggestion
    with pytest.raises(StepError) as err:
        choose_backend(1, DockerRunner(), probe=fake_no, forced="vllm-server", server=_server(True))
    assert "DockerRunner" in err.value.message and "FT_ENV_TYPE=local" in err.value.suggestion


def test_eval_backend_setting(monkeypatch):
    assert load_settings().ft.eval_backend == "auto"
    monkeypatch.setenv("FT_EVAL_BACKEND", "vllm-server")
    assert load_settings().ft.eval_backend == "vllm-server"
    monkeypatch.setenv("FT_EVAL_BACKEND", "sglang")
    with pytest.raises(UserInputError, match="FT_EVAL_BACKEND=sglang"):
        load_settings()


# --- the model block -------------------------------------------------------------------------------


SERVER_SPEC = ModelSpec(backend="vllm-server", device="cuda", abbr="ft-demo_add", path="/m/full",
                        tokenizer_path="/m/full", max_out_len=16, batch_size=16,
                        api_base="http://127.0.0.1:4242/v1/", served_name="ft-model")


def _model_call(src: str) -> dict:
    tree = ast.parse(src)
    models = next(n.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "models")
    call = models.elts[0]
    return {kw.arg: kw.value for kw in call.keywords}


def test_render_vllm_server_block():
    src = render_config([BLOCK], SERVER_SPEC, benchmark="demo_add", split="validation", in_process=True)
    kw = _model_call(src)
    assert "from ftagent.tools.opencompass.oc_ext import TrainedFormatOpenAIModel" in src
    assert "VLLMwithChatTemplate" not in src and "TrainedFormatChatModel" not in src
    assert ast.literal_eval(kw["openai_api_base"]) == "http://127.0.0.1:4242/v1/"
    assert ast.literal_eval(kw["path"]) == "ft-model" and ast.literal_eval(kw["key"]) == "EMPTY"
    assert ast.literal_eval(kw["tokenizer_path"]) == "/m/full"
    assert ast.literal_eval(kw["temperature"]) == 0.0  # greedy
    assert "extra_body=dict(skip_special_tokens=False)," in src  # decoded as the HF backend decodes
    assert ast.literal_eval(kw["max_workers"]) == 16 and ast.literal_eval(kw["batch_size"]) == 16
    assert ast.literal_eval(kw["max_out_len"]) == 16 and "num_gpus=0" in src
    assert "chat_template=" not in src and "meta_template" not in src


def test_render_vllm_server_sampling_and_thinking():
    spec = SERVER_SPEC.model_copy(update={"do_sample": True, "temperature": 0.6, "top_p": 0.95, "top_k": 20,
                                          "enable_thinking": True})
    src = render_config([BLOCK], spec, benchmark="demo_add", split="validation")
    kw = _model_call(src)
    assert ast.literal_eval(kw["temperature"]) == 0.6
    assert "top_k=20" in src and "chat_template_kwargs=dict(enable_thinking=True)" in src
    assert "extract-non-reasoning-content" in src


def test_render_vllm_server_needs_a_running_server():
    with pytest.raises(ValueError, match="api_base"):
        render_config([BLOCK], SERVER_SPEC.model_copy(update={"api_base": None}), benchmark="b", split="v")


def test_model_spec_for_the_server(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    (model / "chat_template.jinja").write_text("{{ messages }}")
    spec = model_spec(model, None, "Qwen/Qwen3-8B", 1, "ft-x", serve_adapter=False, backend="vllm-server",
                      device="cuda")
    assert spec.batch_size == 16 and spec.do_sample and spec.enable_thinking and spec.api_base is None


# --- the server's command line and life cycle ------------------------------------------------------------


def test_vllm_serve_command(tmp_path):
    cmd = VllmServeCommand(tmp_path / "vllm")
    argv = cmd(ServeRequest(model="/base", tokenizer="/adapter", port=1234, lora_modules={"ft": "/adapter"},
                            max_model_len=4096, max_lora_rank=64, dtype="bfloat16"))
    assert argv[0] == str(tmp_path / "vllm" / "bin" / "python") and "vllm.entrypoints.openai.api_server" in argv
    joined = " ".join(argv)
    for part in ("--model /base", "--port 1234", "--host 127.0.0.1", "--served-model-name ft-model",
                 "--tokenizer /adapter", "--max-model-len 4096", "--enable-lora --lora-modules ft=/adapter",
                 "--max-lora-rank 64", "--dtype bfloat16"):
        assert part in joined
    check = cmd.check()
    assert not check.available and "no vLLM env" in check.detail


def test_serve_request_of_an_adapter():
    spec = SERVER_SPEC.model_copy(update={"path": "/base", "adapter_path": "/lora", "tokenizer_path": "/lora"})
    req = serving.serve_request(spec, 99)
    assert req.lora_modules == {"ft": "/lora"} and req.model == "/base" and req.tokenizer == "/lora"
    assert serving.serve_request(SERVER_SPEC, 99).lora_modules == {}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_server_starts_answers_and_is_killed(tmp_path):
    port = serving.free_port()
    log = tmp_path / "server.log"
    with model_server([sys.executable, "-c", MINI_SERVER, str(port), "ft-model"], base_url=f"http://127.0.0.1:{port}",
                      served_name="ft-model", log_file=log, start_timeout=30) as handle:
        assert handle.api_base == f"http://127.0.0.1:{port}/v1/" and handle.start_s < 30
        with urllib.request.urlopen(f"{handle.base_url}/v1/models", timeout=5) as resp:
            assert json.loads(resp.read())["data"][0]["id"] == "ft-model"
        pid = handle.pid
        assert _alive(pid)
    assert not _alive(pid) and "serving" in log.read_text()


def test_server_env_holds_no_secret_and_no_ftagent_python_path(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    monkeypatch.setenv("PYTHONPATH", "/somewhere/ftagent")
    port = serving.free_port()
    log = tmp_path / "server.log"
    with model_server([sys.executable, "-c", MINI_SERVER, str(port), "ft-model"], base_url=f"http://127.0.0.1:{port}",
                      served_name="ft-model", log_file=log, start_timeout=30):
        pass
    names = log.read_text().split("env:", 1)[1].split()
    assert "OPENAI_API_KEY" not in names and "PYTHONPATH" not in names
    assert {"PATH", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"} <= set(names)


def test_server_is_killed_when_the_body_raises(tmp_path):
    port = serving.free_port()
    with pytest.raises(RuntimeError), model_server(
            [sys.executable, "-c", MINI_SERVER, str(port), "m"], base_url=f"http://127.0.0.1:{port}",
            served_name="m", log_file=tmp_path / "s.log", start_timeout=30) as handle:
        pid = handle.pid
        raise RuntimeError("opencompass crashed")
    assert not _alive(pid)


def test_server_that_exits_is_a_step_error_with_its_log(tmp_path):
    t0 = time.monotonic()
    with pytest.raises(StepError) as err, model_server(
            [sys.executable, "-c", MINI_SERVER, "--exit", "3"], base_url="http://127.0.0.1:9",
            served_name="m", log_file=tmp_path / "s.log", start_timeout=60):
        pass
    assert time.monotonic() - t0 < 20  # fails fast, not at the deadline
    e = err.value
    assert e.error_type == ErrorType.EVAL and "exited with code 3" in e.message
    assert "CUDA out of memory (stand-in)" in e.log_tail and "FT_EVAL_BACKEND=hf" in e.suggestion


def test_server_that_never_answers_times_out_and_is_killed(tmp_path, monkeypatch):
    started = []
    real_popen = serving.subprocess.Popen

    def popen(*args, **kwargs):
        started.append(real_popen(*args, **kwargs))
        return started[-1]
    monkeypatch.setattr(serving.subprocess, "Popen", popen)
    with pytest.raises(StepError) as err, model_server(
            [sys.executable, "-c", MINI_SERVER, "--hang"], base_url=f"http://127.0.0.1:{serving.free_port()}",
            served_name="m", log_file=tmp_path / "s.log", start_timeout=1.5):
        pass
    assert err.value.details["timed_out"] and started[0].poll() is not None


def test_server_with_the_wrong_model_is_an_error(tmp_path):
    port = serving.free_port()
    with pytest.raises(StepError, match="not 'ft'"), model_server(
            [sys.executable, "-c", MINI_SERVER, str(port), "other"], base_url=f"http://127.0.0.1:{port}",
            served_name="ft", log_file=tmp_path / "s.log", start_timeout=30):
        pass


def test_a_command_that_cannot_start_is_a_step_error(tmp_path):
    with pytest.raises(StepError, match="could not be started"), model_server(
            [str(tmp_path / "no-such-python")], base_url="http://127.0.0.1:9", served_name="m",
            log_file=tmp_path / "s.log"):
        pass


def test_served_model_passes_other_backends_through(tmp_path):
    spec = SERVER_SPEC.model_copy(update={"backend": "hf", "api_base": None})
    with served_model(spec, lambda req: ["false"], tmp_path) as got:
        assert got is spec


# --- wiring: evaluate_splits_of_path with a server -------------------------------------------------------


class HostOpenCompass(FakeOpenCompass):
    """The fake OpenCompass on a host runner; checks that the configured server answers during the run."""

    runs_on_host = True

    def __init__(self) -> None:
        super().__init__()
        self.served: list[list[str]] = []

    def run(self, cmd, **kwargs):
        cfg = Path(cmd[1]).read_text(encoding="utf-8")
        if "TrainedFormatOpenAIModel" in cfg:
            base = ast.literal_eval(_model_call(cfg)["openai_api_base"])
            with urllib.request.urlopen(f"{base}models", timeout=5) as resp:
                self.served.append([m["id"] for m in json.loads(resp.read())["data"]])
        return super().run(cmd, **kwargs)


class MiniServe:
    """A serve command: the trivial server, serving the requested names."""

    def __init__(self) -> None:
        self.requests: list[ServeRequest] = []

    def __call__(self, request: ServeRequest) -> list[str]:
        self.requests.append(request)
        return [sys.executable, "-c", MINI_SERVER, str(request.port), request.served_name, *request.lora_modules]


@pytest.fixture
def model(tmp_path) -> Path:
    m = tmp_path / "model"
    m.mkdir()
    (m / "config.json").write_text("{}")
    (m / "chat_template.jinja").write_text("{{ messages }}")
    return m


def test_one_server_for_both_splits_and_separate_cache_keys(model, tmp_path, monkeypatch):
    settings = load_settings(file_path=tmp_path / "ft", benchmark_limit=4)
    kwargs = dict(benchmark=get_benchmark("demo_add"), settings=settings, work_dir=tmp_path / "work",
                  model_name="builtin/tiny-qwen2")
    hf_runner = HostOpenCompass()
    evaluate_splits_of_path(model, None, runner=hf_runner, **kwargs)
    assert len(hf_runner.runs) == 1 and "TrainedFormatChatModel" in hf_runner.configs[0]

    monkeypatch.setenv("FT_EVAL_BACKEND", "vllm-server")
    settings = load_settings(file_path=tmp_path / "ft", benchmark_limit=4)
    kwargs.update(settings=settings, work_dir=tmp_path / "work_server")
    runner, serve = HostOpenCompass(), MiniServe()
    phases: list[str] = []
    out = evaluate_splits_of_path(model, None, runner=runner, serve_command=serve,
                                  on_progress=lambda p, d, t: phases.append(p), **kwargs)
    assert len(runner.runs) == 1 and len(serve.requests) == 1  # no cache hit of the HF run; one server
    assert out["validation"].score == 50.0 and out["test"].score == 25.0
    assert runner.served == [["ft-model"]] and "TrainedFormatOpenAIModel" in runner.configs[0]
    assert phases[0] == "serve" and phases[-1] == "done"
    req = serve.requests[0]
    assert req.tokenizer == str(model.resolve()) and req.max_model_len == 512 and req.lora_modules == {}
    log = (tmp_path / "work_server" / "model_server.log").read_text()
    assert "serving" in log
    again = evaluate_splits_of_path(model, None, runner=runner, serve_command=serve, **kwargs)
    assert again["validation"].cached and len(serve.requests) == 1  # cached: no server started


def test_adapter_is_served_natively(model, tmp_path, monkeypatch):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 8}))
    (adapter / "adapter_model.safetensors").write_bytes(safetensors_bytes(b"lora"))
    (adapter / "chat_template.jinja").write_text("{{ messages }}")
    monkeypatch.setenv("FT_EVAL_BACKEND", "vllm-server")
    runner, serve = HostOpenCompass(), MiniServe()
    evaluate_splits_of_path(adapter, None, benchmark=get_benchmark("demo_add"), settings=load_settings(
        file_path=tmp_path / "ft", benchmark_limit=4), runner=runner, work_dir=tmp_path / "w", base_path=model,
        model_name="builtin/tiny-qwen2", serve_command=serve)
    req = serve.requests[0]
    assert req.model == str(model.resolve()) and req.lora_modules == {"ft": str(adapter.resolve())}
    assert runner.served == [["ft-model", "ft"]] and "path='ft'," in runner.configs[0]


def test_server_that_fails_is_a_step_error_of_the_call(model, tmp_path, monkeypatch):
    monkeypatch.setenv("FT_EVAL_BACKEND", "vllm-server")
    runner = HostOpenCompass()
    with pytest.raises(StepError) as err:
        evaluate_splits_of_path(model, None, benchmark=get_benchmark("demo_add"), runner=runner, work_dir=tmp_path / "w",
                                settings=load_settings(file_path=tmp_path / "ft", benchmark_limit=4),
                                serve_command=lambda req: [sys.executable, "-c", MINI_SERVER, "--exit", "1"])
    assert "CUDA out of memory (stand-in)" in err.value.log_tail and runner.runs == []
