"""A real stand-in for vLLM's OpenAI-compatible api_server, for CPU tests (run with the tool env's python).

It takes the command-line flags ftagent passes to ``vllm.entrypoints.openai.api_server``
(``--model --host --port --served-model-name --tokenizer --max-model-len --enable-lora --lora-modules
name=path ... --max-lora-rank``; the GPU-only ones — ``--tensor-parallel-size``,
``--gpu-memory-utilization``, ``--dtype``, ``--seed`` — are accepted and ignored) and serves
``GET /v1/models`` and ``POST /v1/chat/completions`` with transformers generation of the real model:
the tokenizer's chat template with ``add_generation_prompt`` (``chat_template_kwargs`` passed on),
no extra special tokens, greedy when ``temperature`` is 0, ``max_tokens`` new tokens at most, the
model's EOS tokens and the request's ``stop`` strings end the answer, special tokens are skipped in
the text unless the request says ``skip_special_tokens: false`` (vLLM's default and extra parameter).
A request whose ``model`` is a ``--lora-modules`` name runs with that PEFT adapter; the served model
name runs the base model. Requests are answered one at a time.

Standalone on purpose (stdlib + torch + transformers + peft): the tool env has no ftagent.

    python tests/fakes/hf_openai_server.py --model /m --port 8000 --served-model-name ft-model
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


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
    p.add_argument("--max-lora-rank", type=int, default=16)
    for gpu_only in ("--tensor-parallel-size", "--gpu-memory-utilization", "--dtype", "--seed"):
        p.add_argument(gpu_only, default=None)
    args, unknown = p.parse_known_args(argv)
    if unknown:
        print(f"ignoring unknown arguments: {unknown}", flush=True)
    if args.lora_modules and not args.enable_lora:
        p.error("--lora-modules needs --enable-lora")
    return args


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
        with self.lock:
            out = self._generate(ids, max_tokens, body, model)
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


def make_handler(engine: Engine) -> type[BaseHTTPRequestHandler]:
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
    print(f"stand-in api_server: loading {args.model}", flush=True)
    engine = Engine(args)
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
