"""`ftagent prompts`: print exactly what the LLM planner would be sent (placeholder group)."""

from __future__ import annotations

import typer

app = typer.Typer(help="Show the prompts the LLM planner is sent.", no_args_is_help=True)
