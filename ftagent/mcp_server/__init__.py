"""``ftagent mcp``: ftagent as a Model Context Protocol server, an entry point beside the CLI (docs/agents.md).

:mod:`.server` (the SDK's ``MCPServer``, transports, the bearer token), :mod:`.tools` (each tool calls the function
its CLI command calls), :mod:`.runs` (runs started in the background), :mod:`.doc` (docs/agents.md's tool list).
"""
