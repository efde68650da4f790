"""A relay "LLM": an OpenAI-compatible server on 127.0.0.1 whose answers are written by someone else.

Every chat request is written to ``<dir>/req_<n>.json`` (``n`` = 1, 2, ...: messages, model and the
other request parameters); the server then waits until ``<dir>/resp_<n>.txt`` appears and answers
with its content (plain JSON, or SSE chunks when the client asked for ``stream``). A person or
another program plays the LLM by reading the requests and writing the answers. After ``--timeout``
seconds without an answer the request gets HTTP 504 (the client's retry then asks again, as
``req_<n+1>.json``).

Run::

    python -m tests.fakes.relay_server --dir /tmp/relay --port 8765 --timeout 1800
    # then: CHAT_MODEL=openai/relay OPENAI_API_BASE=http://127.0.0.1:8765/v1 OPENAI_API_KEY=x \\
    #       ftagent llm_finetune --benchmark demo_add --base-model builtin/tiny-qwen2 --loop-n 3

See docs/llm.md ("Play the LLM yourself").
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class RelayServer:
    """The relay; use as a context manager or :meth:`start` / :meth:`stop`."""

    def __init__(self, folder: str | Path, *, port: int = 0, timeout: float = 1800.0, poll: float = 0.2) -> None:
        self.dir = Path(folder)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port_wanted = port
        self.timeout = timeout
        self.poll = poll
        self._lock = threading.Lock()
        existing = [int(p.stem.split("_", 1)[1]) for p in self.dir.glob("req_*.json") if p.stem.split("_", 1)[1].isdigit()]
        self._n = max(existing, default=0)  # a restarted relay continues the numbering
        self._httpd: ThreadingHTTPServer | None = None

    def next_number(self) -> int:
        with self._lock:
            self._n += 1
            return self._n

    def wait_for(self, n: int) -> str | None:
        """The content of ``resp_<n>.txt`` once it exists (None after the timeout)."""
        path = self.dir / f"resp_{n}.txt"
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if path.is_file():
                time.sleep(self.poll)  # let the writer finish the file
                return path.read_text(encoding="utf-8")
            time.sleep(self.poll)
        return None

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> RelayServer:
        handler = type("Handler", (_Handler,), {"relay": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port_wanted), handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> RelayServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    relay: RelayServer

    def log_message(self, *args: object) -> None:
        pass

    def _json(self, code: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def do_GET(self) -> None:  # noqa: N802 (http.server API)
        if self.path.rstrip("/").endswith("/models"):
            return self._json(200, {"object": "list", "data": [{"id": "relay", "object": "model", "owned_by": "relay"}]})
        self._json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:  # noqa: N802
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode("utf-8", errors="replace")
        if not self.path.endswith("/chat/completions"):
            return self._json(404, {"error": {"message": "not found"}})
        try:
            body = json.loads(raw or "{}")
        except json.JSONDecodeError:
            return self._json(400, {"error": {"message": "the body is not JSON"}})
        n = self.relay.next_number()
        request = {"n": n, "model": body.get("model"), "messages": body.get("messages", []),
                   "params": {k: v for k, v in body.items() if k not in ("messages", "model")},
                   "answer_with": f"resp_{n}.txt"}
        tmp = self.relay.dir / f".req_{n}.json.tmp"
        tmp.write_text(json.dumps(request, ensure_ascii=False, indent=1), encoding="utf-8")
        tmp.replace(self.relay.dir / f"req_{n}.json")
        content = self.relay.wait_for(n)
        if content is None:
            return self._json(504, {"error": {"message": f"relay: no resp_{n}.txt within {self.relay.timeout:.0f} s",
                                              "type": "timeout"}})
        prompt = json.dumps(body.get("messages", []))
        usage = {"prompt_tokens": _tokens(prompt), "completion_tokens": _tokens(content)}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        model = body.get("model") or "relay"
        if body.get("stream"):
            return self._stream(content, model, usage)
        self._json(200, {"id": f"chatcmpl-relay-{n}", "object": "chat.completion", "created": int(time.time()),
                         "model": model, "usage": usage,
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": content}}]})

    def _stream(self, content: str, model: str, usage: dict[str, int]) -> None:
        def chunk(delta: dict[str, Any], finish: str | None, extra: dict[str, Any] | None = None) -> bytes:
            obj = {"id": "chatcmpl-relay", "object": "chat.completion.chunk", "created": int(time.time()),
                   "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **(extra or {})}
            return f"data: {json.dumps(obj)}\n\n".encode()

        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            pieces = [content[i:i + 64] for i in range(0, len(content), 64)] or [""]
            for i, piece in enumerate(pieces):
                self.wfile.write(chunk({"role": "assistant", "content": piece} if i == 0 else {"content": piece}, None))
            self.wfile.write(chunk({}, "stop", {"usage": usage}) + b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="OpenAI-compatible relay: requests to files, answers from files.")
    parser.add_argument("--dir", required=True, help="folder for req_<n>.json / resp_<n>.txt")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds to wait for each answer")
    args = parser.parse_args(argv)
    with RelayServer(args.dir, port=args.port, timeout=args.timeout) as relay:
        print(f"relay on {relay.base_url}; requests in {relay.dir}/req_<n>.json, answers as resp_<n>.txt", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
