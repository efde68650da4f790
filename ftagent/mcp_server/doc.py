"""docs/agents.md's tool and resource list, generated from the server itself (what an MCP client's ``tools/list``
returns): ``python -m ftagent.mcp_server.doc`` rewrites it; ``tests/unit/test_mcp_server.py`` checks it is current."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "agents.md"
START, END = "<!-- mcp-tools:start -->", "<!-- mcp-tools:end -->"


def _params(schema: dict[str, Any]) -> str:
    required = set(schema.get("required") or [])
    names = [f"`{name}`" + ("" if name in required else "?") for name in schema.get("properties") or {}]
    return ", ".join(names) or "–"


async def _listing() -> tuple[list[Any], list[Any]]:
    from mcp import Client

    from ftagent.mcp_server.runs import RunManager
    from ftagent.mcp_server.server import build_server

    async with Client(build_server(RunManager())) as client:
        tools = (await client.list_tools()).tools
        templates = (await client.list_resource_templates()).resource_templates
    return tools, templates


def render() -> str:
    """The generated block: one row per tool (name, parameters, its description's first sentence) and resource."""
    tools, templates = anyio.run(_listing)
    lines = ["| tool | parameters (`?`: optional) | what it does |", "|---|---|---|"]
    for t in tools:
        first = " ".join((t.description or "").split()).split(". ")[0].rstrip(".")
        lines.append(f"| `{t.name}` | {_params(t.input_schema)} | {first} |")
    lines += ["", "| resource | type | what it is |", "|---|---|---|"]
    for r in templates:
        lines.append(f"| `{r.uri_template}` | {r.mime_type} | {r.description} |")
    return "\n".join(lines)


def main() -> None:
    text = DOC.read_text(encoding="utf-8")
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    DOC.write_text(f"{head}{START}\n{render()}\n{END}{tail}", encoding="utf-8")


if __name__ == "__main__":
    main()
