"""The CLI's help surface: value names instead of typer's ``<bool>``/``<str>``, full option names, ``-h``.

typer 0.29 labels every option with its Python type (``<str>``, and ``<bool>`` beside flags, which take no
value), and rich renders help at the terminal's width, or 80 columns when output is not a terminal, which
cuts long option names (``--benchmark-desc…``). :func:`tidy_help` walks the assembled app once and gives every
command and group the classes below; :data:`HELP_WIDTH` is the least width help is rendered at.
"""

from __future__ import annotations

import os
import shutil

import typer
from typer.core import TyperCommand, TyperGroup

HELP_WIDTH = 120  # the longest option (--benchmark-description) and its value name fit beside their help
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}  # inherited by every sub-command's context


_VALUE_NAMES = {"str": "TEXT", "int": "INTEGER", "int range": "INTEGER", "float": "NUMBER",
                "float range": "NUMBER", "path": "PATH", "file": "PATH", "directory": "PATH"}


def _value_name(param) -> str:
    """What an option's value is, as click names it (TEXT, INTEGER, PATH), or its choices (a|b)."""
    label = param.display_type(None).strip("<>")  # typer's label: str, int range, path, a|b
    return _VALUE_NAMES.get(label, label)


def _tidy(params: list) -> None:
    # typer 0.29 vendors click (typer._click): its options are recognised by kind, not by click's classes
    for param in params:
        kind = getattr(param, "param_type_name", None)
        if kind == "argument":  # its metavar is its name; only the type column changes (PATH, not <path>)
            label = _value_name(param)
            param.display_type_rich = lambda ctx, label=label: label
            continue
        if kind != "option":
            continue
        if param.is_flag:
            param.metavar = ""  # a flag takes no value: nothing to show
        elif param.metavar is None:
            param.metavar = _value_name(param)


class _TidyHelp:
    """Help that names values (TEXT, INTEGER, PATH) and shows nothing beside flags (commands and groups)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        _tidy(self.params)  # type: ignore[attr-defined]

    def get_help_option(self, ctx):
        option = super().get_help_option(ctx)  # type: ignore[misc]
        if option is not None:
            _tidy([option])
        return option


class Command(_TidyHelp, TyperCommand):
    """A command whose help names values (TEXT, INTEGER, PATH) and shows nothing beside flags."""


class Group(_TidyHelp, TyperGroup):
    """A command group with the same help as :class:`Command`."""


def tidy_help(app: typer.Typer) -> None:
    """Give every command and group of ``app`` (recursively) the classes above, and widen rendered help."""
    from typer import rich_utils

    app.info.cls = Group
    for info in app.registered_commands:
        if info.cls in (None, TyperCommand):
            info.cls = Command
    for group in app.registered_groups:
        group.cls = Group
        if group.typer_instance is not None:
            tidy_help(group.typer_instance)
    if not os.environ.get("TERMINAL_WIDTH"):  # typer's own knob wins when the user sets it
        rich_utils.MAX_WIDTH = max(shutil.get_terminal_size((80, 24)).columns, HELP_WIDTH)
