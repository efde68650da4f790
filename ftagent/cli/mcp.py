"""`ftagent mcp`: serve ftagent's tools to MCP clients (Claude Code, Codex, Cursor, scripts); docs/agents.md."""

from __future__ import annotations

import typer

from ftagent.cli.common import prepare_env


def mcp(
    http: str | None = typer.Option(None, "--http", metavar="HOST:PORT",
                                    help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (PORT alone: "
                                         "127.0.0.1; a non-loopback HOST needs FT_MCP_TOKEN)"),
    detach: bool = typer.Option(False, "--detach", help="runs started here go on after the server exits (default: "
                                                        "they end with it, as after Ctrl-C, resumable)"),
) -> None:
    """Serve ftagent as a Model Context Protocol server: plan, start, status, report, eval, export, cancel, resume,
    list_sessions, benchmarks, datasets, models; a session's report and events as resources."""
    prepare_env()
    from ftagent.core.settings import load_settings
    from ftagent.mcp_server.server import serve

    secret = load_settings().ft.mcp_token
    serve(http=http, detach=detach, token=secret.get_secret_value() if secret is not None else None)
