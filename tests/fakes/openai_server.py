"""A real OpenAI-compatible HTTP server for tests (stdlib ``ThreadingHTTPServer`` on 127.0.0.1).

It speaks ``POST /v1/chat/completions`` (plain JSON and SSE streaming) and ``GET /v1/models``. Replies
are scripted: each chat request takes the next :class:`Reply` from a queue, so a test decides exactly
what the "LLM" says, which HTTP errors it injects (429/500 sequences) and how slowly it answers (to
provoke client timeouts). Every request that reaches the server is recorded, so tests can count what
the client really sent (retries included) and search request bodies for text that must never leave
the agent (test scores, API keys).

Example::

    with FakeOpenAIServer() as srv:
        srv.queue(Reply(status=500), Reply(status=500), "hello")
        ...  # point the client at srv.base_url
        assert len(srv.chat_requests) == 3
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass
class Reply:
    """One scripted answer to one chat request."""

    content: str = ""
    finish_reason: str = "stop"
    status: int = 200  # anything but 200 sends an OpenAI-style error body with this status
    delay: float = 0.0  # seconds to wait before answering (provokes client timeouts)
    usage: tuple[int, int] | None = None  # (prompt_tokens, completion_tokens); None = estimate
    retry_after: str | None = None  # the Retry-After header of an error reply (429 default: "0")

    @classmethod
    def from_file(cls, path: str | Path, *, fence: str | None = None, preface: str = "") -> Reply:
        """A reply whose content is a data file; ``fence="python"`` wraps it in a fenced code block."""
        text = Path(path).read_text(encoding="utf-8")
        if fence:
            text = f"{preface}```{fence}\n{text.rstrip()}\n```\n"
        elif preface:
            text = preface + text
        return cls(content=text)

    @classmethod
    def error(cls, status: int) -> Reply:
        return cls(status=status)


def _as_reply(item: Reply | str | dict[str, Any]) -> Reply:
    if isinstance(item, Reply):
        return item
    if isinstance(item, str):
        return Reply(content=item)
    return Reply(**item)


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    raw: str
    t: float = field(default_factory=time.time)


class FakeOpenAIServer:
    """Scripted OpenAI chat server; use as a context manager or call :meth:`start`/:meth:`stop`."""

    def __init__(self, replies: list[Reply | str | dict[str, Any]] | None = None, *,
                 model_id: str = "fake-model", default: Reply | str | None = None) -> None:
        self.model_id = model_id
        self.default = _as_reply(default) if default is not None else None
        self.requests: list[RecordedRequest] = []
        self._queue: deque[Reply] = deque(_as_reply(r) for r in (replies or []))
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- scripting -------------------------------------------------------------------------------
    def queue(self, *replies: Reply | str | dict[str, Any]) -> None:
        """Append scripted replies, answered in order."""
        with self._lock:
            self._queue.extend(_as_reply(r) for r in replies)

    def fail_next(self, *codes: int) -> None:
        """Put HTTP errors in front of the queue (answered before any scripted reply)."""
        with self._lock:
            for code in reversed(codes):
                self._queue.appendleft(Reply(status=code))

    def load_script(self, path: str | Path) -> None:
        """Queue replies from a JSON file holding a list of strings or Reply fields."""
        self.queue(*json.loads(Path(path).read_text(encoding="utf-8")))

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def _next(self) -> Reply | None:
        with self._lock:
            return self._queue.popleft() if self._queue else self.default

    # --- inspection ------------------------------------------------------------------------------
    @property
    def chat_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def all_request_text(self) -> str:
        """Every recorded request (headers and raw body) as one string, for "never sent" checks."""
        return "\n".join(json.dumps(r.headers) + "\n" + r.raw for r in self.requests)

    # --- life cycle ------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeOpenAIServer:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakeOpenAIServer

    def log_message(self, *args: object) -> None:  # keep test output quiet
        pass

    def _record(self, raw: bytes) -> Any:
        text = raw.decode("utf-8", errors="replace")
        try:
            body = json.loads(text) if text else {}
        except json.JSONDecodeError:
            body = {"_raw": text}
        rec = RecordedRequest(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body, text)
        with self.fake._lock:
            self.fake.requests.append(rec)
        return body

    def _send_json(self, code: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(obj).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
            self.close_connection = True

    def do_GET(self) -> None:  # noqa: N802 (http.server API)
        self._record(b"")
        if self.path.rstrip("/").endswith("/models"):
            self._send_json(200, {"object": "list",
                                  "data": [{"id": self.fake.model_id, "object": "model", "owned_by": "fake"}]})
        else:
            self._send_json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:  # noqa: N802
        body = self._record(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        if not self.path.endswith("/chat/completions"):
            return self._send_json(404, {"error": {"message": "not found"}})
        reply = self.fake._next()
        if reply is None:
            return self._send_json(400, {"error": {"message": "fake server: script exhausted",
                                                   "type": "invalid_request_error"}})
        if reply.delay:
            time.sleep(reply.delay)
        if reply.status != 200:
            after = reply.retry_after if reply.retry_after is not None else ("0" if reply.status == 429 else None)
            headers = {"Retry-After": after} if after is not None else None
            return self._send_json(reply.status, {"error": {"message": f"injected {reply.status}",
                                                            "type": "server_error", "code": reply.status}}, headers)
        prompt = json.dumps(body.get("messages", []))
        usage_pair = reply.usage or (_estimate_tokens(prompt), _estimate_tokens(reply.content))
        usage = {"prompt_tokens": usage_pair[0], "completion_tokens": usage_pair[1],
                 "total_tokens": usage_pair[0] + usage_pair[1]}
        model = body.get("model", self.fake.model_id)
        if body.get("stream"):
            return self._stream(reply, model, usage)
        self._send_json(200, {
            "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply.content},
                         "finish_reason": reply.finish_reason}],
            "usage": usage,
        })

    def _stream(self, reply: Reply, model: str, usage: dict[str, int]) -> None:
        def chunk(delta: dict[str, Any], finish: str | None, extra: dict[str, Any] | None = None) -> bytes:
            obj = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": int(time.time()),
                   "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            obj.update(extra or {})
            return f"data: {json.dumps(obj)}\n\n".encode()

        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            pieces = [reply.content[i:i + 16] for i in range(0, len(reply.content), 16)] or [""]
            for i, piece in enumerate(pieces):
                delta = {"role": "assistant", "content": piece} if i == 0 else {"content": piece}
                self.wfile.write(chunk(delta, None))
                self.wfile.flush()
            self.wfile.write(chunk({}, reply.finish_reason, {"usage": usage}) + b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True
