"""Issue 32: the README's commands stay true. Every ``ftagent ...`` line of the docs' code blocks, and every
``ftagent ...`` span of their text (the README's CLI table), names commands and options the CLI has.

Nothing is executed: the commands are walked down the assembled click tree (typer's ``get_command``). A doc that
names a sub-command or a flag the CLI does not have fails here, with the file, the line and the word.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.main import get_command

from ftagent.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "DEVELOPERS.md", ROOT / "job" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CLI = get_command(app)

_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
_SPAN = re.compile(r"`((?:\S*/)?ftagent [^`]+)`")
_PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*$")  # COMMAND, KEY, SESSION_DIR: stands for a value, not a word


def _block_commands(text: str) -> list[tuple[int, str]]:
    """(line number, command) of every ``ftagent`` line in fenced code blocks, a shell comment cut off."""
    out = []
    for block in _FENCE.finditer(text):
        first = text.count("\n", 0, block.start(1)) + 1
        lines = block.group(1).splitlines()
        i = 0
        while i < len(lines):
            start, line = i, lines[i]
            while line.rstrip().endswith("\\") and i + 1 < len(lines):  # a command continued on the next line
                i += 1
                line = line.rstrip()[:-1] + " " + lines[i]
            i += 1
            words = line.strip().removeprefix("$ ").split()
            while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):  # FT_X=1 ftagent ...
                words.pop(0)
            if words and (words[0] == "ftagent" or words[0].endswith("/bin/ftagent")):
                out.append((first + start, " ".join(words)))
    return out


def _span_commands(text: str) -> list[tuple[int, str]]:
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in _SPAN.finditer(text)]


def _tokens(command: str) -> list[str]:
    try:
        words = shlex.split(command, comments=True)
    except ValueError:  # an unbalanced quote in a placeholder: plain words are enough here
        words = command.split("#")[0].split()
    return words[1:]


def _option_names(cmd) -> set[str]:
    names = set()
    for param in cmd.params:
        names.update(getattr(param, "opts", ()))
        names.update(getattr(param, "secondary_opts", ()))
    return names | {"-h", "--help"}


def _flags(word: str) -> list[str]:
    """The option names a doc word holds: ``--merge/--no-merge``, ``[--dry-run``, ``--to=DIR`` (not ``tiny-qwen2``)."""
    return re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", word)


def _problems(command: str) -> list[str]:
    """What in ``command`` the CLI does not have (empty: every word it names exists)."""
    words = [w for w in _tokens(command) if w not in ("…", "...", "[...]", "[FLAGS]")]
    cmd, path = CLI, ["ftagent"]
    candidates = [CLI]
    i = 0
    while i < len(words) and hasattr(cmd, "commands"):
        word = words[i]
        if word.startswith("-"):
            break
        names = [n for n in re.split(r"\\?\|", word.strip("[]")) if n]
        if len(names) == 1 and _PLACEHOLDER.match(names[0]):  # `ftagent COMMAND -h`: any command
            candidates = list(cmd.commands.values())
            i += 1
            break
        missing = [n for n in names if n not in cmd.commands]
        if missing:
            return [f"'{' '.join(path)}' has no command {missing[0]!r} (it has: {', '.join(sorted(cmd.commands))})"]
        candidates = [cmd.commands[n] for n in names]  # `list\|show`: alternatives, each must exist
        cmd = candidates[0]
        path.append(names[0])
        i += 1
    known = set().union(*(_option_names(c) for c in candidates))
    if len(path) > 2:  # `job status\|run [--dry-run]\|cancel`: a later alternative's options are its group's
        group = CLI
        for name in path[1:-1]:
            group = group.commands[name]
        known |= set().union(*(_option_names(c) for c in group.commands.values()))
    return [f"'{' '.join(path)}' has no option {flag!r}" for word in words[i:] for flag in _flags(word)
            if flag not in known]


def _doc_commands() -> list[tuple[str, str]]:
    out = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for line, command in _block_commands(text) + _span_commands(text):
            out.append((f"{doc.relative_to(ROOT)}:{line}", command))
    return out


def test_the_docs_name_ftagent_commands():
    found = _doc_commands()
    where = {w.split(":")[0] for w, _ in found}
    assert {"README.md", "docs/quickstart.md"} <= where, where
    readme = [c for w, c in found if w.startswith("README.md")]
    assert any(c.startswith("ftagent llm_finetune --benchmark aime25") for c in readme), readme


@pytest.mark.parametrize("where, command", _doc_commands())
def test_every_documented_command_exists(where, command):
    assert _problems(command) == [], f"{where}: {command}"


@pytest.mark.parametrize("command, problem", [
    ("ftagent llm_finetune --benchmark gsm8k --base-modle Qwen/Qwen2.5-1.5B", "no option '--base-modle'"),
    ("ftagent env setupp", "has no command 'setupp'"),
    ("ftagent plan --config run.yaml --loops 3", "no option '--loops'"),
    ("ftagent benchmarks list\\|shows KEY", "has no command 'shows'"),
    ("ftagent export SESSION_DIR [--merge/--no-merged]", "no option '--no-merged'"),
    ("ftagent COMMAND --nope", "no option '--nope'"),
    ("ftagent --versions", "no option '--versions'"),
])
def test_a_wrong_command_is_caught(command, problem):
    """The check can fail: a flag, a sub-command or a negative flag the CLI lacks is reported."""
    found = _problems(command)
    assert any(problem in p for p in found), found


def test_a_block_line_is_found_with_its_line_number():
    text = "intro\n\n```bash\ncp a b\nFT_X=1 ftagent doctor   # a comment\n```\n"
    assert _block_commands(text) == [(5, "ftagent doctor # a comment")]
    assert _problems("ftagent doctor # a comment --nope") == []  # a comment is not a flag
