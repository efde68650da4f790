"""A real stand-in for vLLM's OpenAI-compatible api_server, for CPU tests (run with the tool env's python).

It takes the command-line flags ftagent passes to ``vllm.entrypoints.openai.api_server``
(``--model --host --port --served-model-name --tokenizer --max-model-len --tensor-parallel-size --dtype
--enable-lora --lora-modules name=path ... --max-lora-rank``; ``--gpu-memory-utilization`` and ``--seed``
are accepted and ignored), refuses to start where vLLM would, and otherwise serves
``GET /v1/models`` and ``POST /v1/chat/completions`` with transformers generation of the real model:
the tokenizer's chat template with ``add_generation_prompt`` (``chat_template_kwargs`` passed on),
no extra special tokens, greedy when ``temperature`` is 0, ``max_tokens`` new tokens at most, the
model's EOS tokens and the request's ``stop`` strings end the answer, special tokens are skipped in
the text unless the request says ``skip_special_tokens: false`` (vLLM's default and extra parameter).
A request whose ``model`` is a ``--lora-modules`` name runs with that PEFT adapter; the served model
name runs the base model. Each replica answers one request at a time; ``--data-parallel-size N`` loads N
replicas behind the one server, as vLLM's data parallelism does, and sends each request to the replica with
the fewest in flight; ``GET /stats`` gives each replica's busy seconds and the requests' times (the
evaluation's wave measurement, docs/gpu.md).

Refusals (issue 30): before any model is loaded, the model's ``config.json`` and each adapter's
``adapter_config.json`` (``r``, ``use_dora``) are checked with ftagent's own copy of vLLM's start-up
rules, ``ftagent/tools/opencompass/vllm_rules.py`` (loaded by path: it is stdlib only, and this file's
env has no ftagent; ``FT_VLLM_RULES`` names another file): a tensor parallel size that does not divide
the heads, a ``--max-model-len`` above the model's context, an unknown dtype (bf16 on a GPU below
compute capability 8.0, given by ``FT_STANDIN_COMPUTE_CAPABILITY=7.5`` since the stand-in has no GPU),
a LoRA rank above ``--max-lora-rank``, a DoRA adapter. Each refusal is a ``ValueError: ...`` line on
stderr, as vLLM's start-up error ends, and the exit code is 1: the CPU tests of the vllm-server backend
fail where vLLM would.

Standalone on purpose (stdlib + torch + transformers + peft): the tool env has no ftagent.

    python tests/fakes/hf_openai_server.py --model /m --port 8000 --served-model-name ft-model
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

# the one owner of vLLM's refusal rules, in this repository (tests/fakes/ -> ftagent/tools/opencompass/)
RULES_FILE = Path(__file__).resolve().parents[2] / "ftagent" / "tools" / "opencompass" / "vllm_rules.py"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--served-model-name", nargs="+", default=None)
    p.add_argument("--tokenizer", default=None)
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--enable-lora", action="store_true")
    p.add_argument("--lora-modules", nargs="+", default=[])
    p.add_argument("--max-lora-rank", type=int, default=None)  # None: vLLM's default (vllm_rules)
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--data-parallel-size", "-dp", type=int, default=1)  # replicas behind this server (issue 41)
    p.add_argument("--data-parallel-rpc-port", type=int, default=None)  # vLLM's DP messaging port: no use here
    p.add_argument("--stats-file", default=None)  # the stand-in's own: /stats written there after each request
    p.add_argument("--dtype", default="auto")
    for gpu_only in ("--gpu-memory-utilization", "--seed"):
        p.add_argument(gpu_only, default=None)
    args, unknown = p.parse_known_args(argv)
    if unknown:
        print(f"ignoring unknown arguments: {unknown}", flush=True)
    if args.lora_modules and not args.enable_lora:
        p.error("--lora-modules needs --enable-lora")
    return args


def load_rules(path: str | Path | None = None):
    """``vllm_rules.py`` as a module, loaded by path (``FT_VLLM_RULES`` or :data:`RULES_FILE`)."""
    path = Path(path or os.environ.get("FT_VLLM_RULES") or RULES_FILE)
    spec = importlib.util.spec_from_file_location("ftagent_vllm_rules", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load vLLM rules from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _compute_capability() -> tuple[int, int] | None:
    """The GPU the stand-in plays (``FT_STANDIN_COMPUTE_CAPABILITY=7.5``); None: no GPU, no bf16 rule."""
    value = os.environ.get("FT_STANDIN_COMPUTE_CAPABILITY", "").strip()
    if not value:
        return None
    major, _, minor = value.partition(".")
    return int(major), int(minor or 0)


def refusals(args: argparse.Namespace, rules=None) -> list[str]:
    """Why vLLM would refuse these flags for this model and these adapters ([] = it starts).

    A model folder without a readable ``config.json`` is left to the model load (its own error).
    """
    rules = rules or load_rules()
    config = _read_json(Path(args.model) / "config.json")
    if config is None:
        return []
    common = dict(tensor_parallel_size=args.tensor_parallel_size, max_model_len=args.max_model_len,
                  dtype=args.dtype, compute_capability=_compute_capability())
    lora = dict(max_lora_rank=args.max_lora_rank) if args.enable_lora else {}
    out = list(rules.refusals(config, **common, **lora))
    for spec in args.lora_modules:
        name, _, path = spec.partition("=")
        adapter = _read_json(Path(path) / "adapter_config.json")
        if adapter is None:
            out.append(f"LoRA adapter {name!r}: no adapter_config.json in {path}")
            continue
        found = rules.refusals(config, **common, **lora, lora_rank=int(adapter.get("r") or 0),
                               use_dora=bool(adapter.get("use_dora")))
        out += [f"LoRA adapter {name!r}: {msg}" for msg in found if msg not in out]
    return out


class Engine:
    """The model, its adapters and greedy/sampled generation (one request at a time)."""

    def __init__(self, args: argparse.Namespace) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or args.model)
        self.model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
        self.max_model_len = args.max_model_len or int(getattr(self.model.config, "max_position_embeddings", 2048))
        self.name = (args.served_model_name or [args.model])[0]
        self.adapters: dict[str, str] = {}
        for spec in args.lora_modules:
            name, _, path = spec.partition("=")
            self.adapters[name] = path
        if self.adapters:
            from peft import PeftModel

            first, *rest = self.adapters.items()
            self.model = PeftModel.from_pretrained(self.model, first[1], adapter_name=first[0]).eval()
            for name, path in rest:
                self.model.load_adapter(path, adapter_name=name)
        try:
            gen = GenerationConfig.from_pretrained(args.model)
        except OSError:
            gen = GenerationConfig()
        eos = gen.eos_token_id if gen.eos_token_id is not None else self.tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}
        self.lock = threading.Lock()
        self.spans: list[tuple[float, float]] = []  # (start, end) of each generation

    def models(self) -> list[str]:
        return [self.name, *self.adapters]

    def chat(self, body: dict) -> tuple[int, dict]:
        model = body.get("model", self.name)
        if model not in self.models():
            return 404, _error(f"The model `{model}` does not exist.", "NotFoundError")
        kwargs = body.get("chat_template_kwargs") or {}
        text = self.tokenizer.apply_chat_template(body["messages"], add_generation_prompt=True, tokenize=False,
                                                  **kwargs)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        if len(ids) + max_tokens > self.max_model_len:
            return 400, _error(f"This model's maximum context length is {self.max_model_len} tokens. However, you "
                               f"requested {len(ids) + max_tokens} tokens ({len(ids)} in the messages, "
                               f"{max_tokens} in the completion).", "BadRequestError")
        with self.lock:  # the replica's generation: its busy time (GET /stats), not a request's wait for it
            started = time.time()
            out = self._generate(ids, max_tokens, body, model)
            self.spans.append((started, time.time()))
        completion = self._cut(out, body.get("stop"), bool(body.get("skip_special_tokens", True)))
        return 200, {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                     "model": model, "choices": [{"index": 0, "finish_reason": completion[1],
                                                  "message": {"role": "assistant", "content": completion[0]}}],
                     "usage": {"prompt_tokens": len(ids), "completion_tokens": len(out),
                               "total_tokens": len(ids) + len(out)}}

    def _generate(self, ids: list[int], max_tokens: int, body: dict, model: str) -> list[int]:
        torch = self.torch
        temperature = float(body.get("temperature") or 0.0)
        sample = dict(do_sample=True, temperature=temperature, top_p=float(body.get("top_p") or 1.0),
                      top_k=int(body.get("top_k") or 0)) if temperature > 0 else dict(do_sample=False)
        if self.adapters and model in self.adapters:
            self.model.set_adapter(model)
        inputs = torch.tensor([ids])
        with torch.no_grad(), (self.model.disable_adapter() if self.adapters and model not in self.adapters
                               else _nullcontext()):
            if "seed" in body:
                torch.manual_seed(int(body["seed"]))
            generated = self.model.generate(input_ids=inputs, attention_mask=torch.ones_like(inputs),
                                            max_new_tokens=max_tokens, eos_token_id=sorted(self.eos_ids),
                                            pad_token_id=self.tokenizer.pad_token_id or sorted(self.eos_ids)[0],
                                            **sample)
        return generated[0, len(ids):].tolist()

    def _cut(self, out: list[int], stop: list[str] | str | None, skip_special: bool) -> tuple[str, str]:
        reason = "length"
        for i, tok in enumerate(out):
            if tok in self.eos_ids:
                out, reason = out[:i], "stop"
                break
        text = self.tokenizer.decode(out, skip_special_tokens=skip_special)
        for s in [stop] if isinstance(stop, str) else (stop or []):
            if s and s in text:
                text, reason = text.split(s, 1)[0], "stop"
        return text, reason


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _error(message: str, kind: str) -> dict:
    return {"object": "error", "message": message, "type": kind, "param": None, "code": None}


class Replicas:
    """``--data-parallel-size`` engines behind the server: the least busy takes a request; busy time is kept."""

    def __init__(self, engines: list[Engine], stats_file: str | None = None) -> None:
        self.engines = engines
        self.stats_file = stats_file
        self.inflight = [0] * len(engines)
        self.lock = threading.Lock()

    def models(self) -> list[str]:
        return self.engines[0].models()

    def chat(self, body: dict) -> tuple[int, dict]:
        with self.lock:
            i = min(range(len(self.engines)), key=lambda k: self.inflight[k])
            self.inflight[i] += 1
        try:
            return self.engines[i].chat(body)
        finally:
            with self.lock:
                self.inflight[i] -= 1
            if self.stats_file:
                tmp = f"{self.stats_file}.{threading.get_ident()}.tmp"
                Path(tmp).write_text(json.dumps(self.stats()), encoding="utf-8")
                os.replace(tmp, self.stats_file)

    def stats(self) -> dict:
        """Each replica's generating seconds and every generation's (replica, start, end)."""
        spans = [(i, a, b) for i, e in enumerate(self.engines) for a, b in list(e.spans)]
        return {"replicas": len(self.engines), "busy_s": [sum(b - a for a, b in list(e.spans)) for e in self.engines],
                "requests": len(spans), "spans": spans}


def make_handler(engine: Replicas) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # one line per request, like vLLM's access log
            print(f"{self.address_string()} - {fmt % args}", flush=True)

        def _send(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802
            if self.path.rstrip("/") == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "ftagent-test"}
                                                            for m in engine.models()]})
            elif self.path == "/health":
                self._send(200, {})
            elif self.path == "/stats":
                self._send(200, engine.stats())
            else:
                self._send(404, _error(f"no route {self.path}", "NotFoundError"))

        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, _error(f"no route {self.path}", "NotFoundError"))
                return
            if body.get("stream"):
                self._send(400, _error("streaming is not supported by the stand-in", "BadRequestError"))
                return
            try:
                status, payload = engine.chat(body)
            except Exception as exc:  # noqa: BLE001 - a bad request answers 500, the server stays up
                status, payload = 500, _error(f"{type(exc).__name__}: {exc}", "InternalServerError")
            self._send(status, payload)

    return Handler


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    refused = refusals(args)
    if refused:  # vLLM raises at start-up (ValueError / pydantic ValidationError) and exits non-zero
        for msg in refused:
            print(f"ValueError: {msg}", file=sys.stderr, flush=True)
        return 1
    print(f"stand-in api_server: loading {args.model}", flush=True)
    engine = Replicas([Engine(args) for _ in range(max(1, args.data_parallel_size))], args.stats_file)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(engine))
    print(f"INFO: Uvicorn running on http://{args.host}:{args.port} (models: {engine.models()})", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
