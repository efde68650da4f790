"""``ftagent mcp``: ftagent as a Model Context Protocol server (the official ``mcp`` SDK's ``MCPServer``).

stdio by default; ``--http HOST:PORT`` serves streamable HTTP at ``/mcp``, bound to 127.0.0.1 unless told
otherwise, and any bind beyond the loopback requires a bearer token (``FT_MCP_TOKEN``) that every request must
carry (``Authorization: Bearer ...``; the SDK's bearer middleware with a constant-time check). Tools:
:mod:`ftagent.mcp_server.tools`; resources: a session's report and its events (``ftagent://sessions/{id}/...``).
docs/agents.md says how to register it with an MCP client; its tool list is generated from this server
(``python -m ftagent.mcp_server.doc``; a test keeps the two the same).
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.types import ToolAnnotations

from ftagent.core.errors import UserInputError
from ftagent.mcp_server.runs import RunManager
from ftagent.mcp_server.tools import FtagentTools

EVENTS_TAIL_BYTES = 2_000_000  # the events resource: at most the last 2 MB, cut at a line
INSTRUCTIONS = (
    "ftagent fine-tunes an LLM for a benchmark with real LLaMA-Factory training and OpenCompass evaluation, loop "
    "after loop (propose, code, validate, train, evaluate, feedback). Typical use: `benchmarks`/`models` to choose, "
    "write a run file (YAML of llm_finetune's options and settings by name), `plan` it, `start` it, poll `status` "
    "until its state is not running, read `report` (scores with 95 % intervals), then `export` the best model. "
    "`cancel` ends a run like Ctrl-C; `resume` continues it. A started run dies with this server unless detached.")

# read-only tools never change anything; start/resume/cancel/export act (cancel ends a run: destructive)
_READ_ONLY = ("status", "report", "list_sessions", "benchmarks", "datasets", "models")


def build_server(runs: RunManager, *, token: str | None = None, url: str | None = None) -> MCPServer:
    """The server with its tools and resources (``token``: the bearer token HTTP requests must carry)."""
    from importlib.metadata import version

    auth = verifier = None
    if token is not None:
        auth = AuthSettings(issuer_url=url or "http://127.0.0.1", resource_server_url=None)
        verifier = StaticToken(token)

    @asynccontextmanager
    async def lifespan(_server: MCPServer) -> AsyncIterator[None]:
        try:
            yield
        finally:
            runs.stop_attached()

    server = MCPServer("ftagent", version=version("ftagent"), instructions=INSTRUCTIONS, lifespan=lifespan,
                       auth=auth, token_verifier=verifier, log_level="WARNING")
    tools = FtagentTools(runs)
    for name in ("plan", "start", "status", "report", "eval", "export", "cancel", "resume", "list_sessions",
                 "benchmarks", "datasets", "models"):
        server.add_tool(getattr(tools, name), name=name, annotations=ToolAnnotations(
            read_only_hint=name in _READ_ONLY, destructive_hint=name == "cancel", open_world_hint=False))
    _add_resources(server)
    return server


def _add_resources(server: MCPServer) -> None:
    @server.resource("ftagent://sessions/{session_id}/report", mime_type="text/markdown",
                     description="a session's report.md (as `ftagent report`), read from its events")
    def session_report(session_id: str) -> str:
        from ftagent.views.report import build_report, render_markdown

        return render_markdown(build_report(_find(session_id)))

    @server.resource("ftagent://sessions/{session_id}/events", mime_type="application/x-ndjson",
                     description="a session's events.jsonl (typed events, one JSON object a line; the last 2 MB)")
    def session_events(session_id: str) -> str:
        path = _find(session_id) / "events.jsonl"
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - EVENTS_TAIL_BYTES))
            data = handle.read()
        if size > EVENTS_TAIL_BYTES:
            data = data[data.find(b"\n") + 1:]
        return data.decode("utf-8", errors="replace")


def _find(session_id: str) -> Path:
    from ftagent.core.settings import load_settings
    from ftagent.views.lookup import find_session

    try:
        return find_session(session_id, Path(load_settings().paths.log_path))
    except UserInputError as exc:
        raise ResourceNotFoundError(str(exc)) from None


class StaticToken:
    """The SDK's ``TokenVerifier`` for one bearer token (``FT_MCP_TOKEN``), compared in constant time."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

    async def verify_token(self, token: str) -> AccessToken | None:
        if hmac.compare_digest(token.encode(), self._token):
            return AccessToken(token="", client_id="ftagent-mcp", scopes=[])
        return None


def parse_bind(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (or ``PORT``: 127.0.0.1) for ``--http``.

    Raises:
        UserInputError: not HOST:PORT with a port in 1..65535.
    """
    host, sep, port = value.rpartition(":")
    host = host.strip("[]") if sep else "127.0.0.1"
    port = port if sep else value
    if not port.isdigit() or not 0 < int(port) < 65536 or not host:
        raise UserInputError(f"--http {value}: expected HOST:PORT (127.0.0.1:8765) or PORT")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(*, http: str | None, detach: bool, token: str | None) -> None:
    """Run the server until its client goes (stdio) or it is stopped (HTTP); then end the runs not detached.

    Raises:
        UserInputError: a bad ``--http``, or a bind beyond the loopback without a token (exit 2).
    """
    runs = RunManager(detach=detach)
    try:
        if http is None:
            build_server(runs).run("stdio")
            return
        host, port = parse_bind(http)
        if not is_loopback(host) and not token:
            raise UserInputError(f"--http {http} listens beyond this machine: set FT_MCP_TOKEN to a secret "
                                 "(clients send it as 'Authorization: Bearer <token>')")
        url = f"http://{host}:{port}"
        build_server(runs, token=token, url=url).run("streamable-http", host=host, port=port)
    finally:
        runs.stop_attached()
