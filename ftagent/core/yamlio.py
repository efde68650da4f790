"""The one safe loader for every YAML file a user (or an LLM) hands to ftagent (issue 34 item 10).

``yaml.safe_load`` constructs only plain data, but bounds nothing: a 60 MB ``description`` is copied
into every snapshot, and a few hundred bytes of nested aliases (a "billion laughs" file: 9 aliases of 9
aliases ... = 9^9 strings) load as a small shared graph that explodes the first time anything walks it
(a JSON dump, a deep copy, pydantic). So every input YAML goes through :func:`load_yaml_file` /
:func:`load_yaml_text`, which

- refuse a file larger than :data:`MAX_YAML_BYTES` (checked before reading it);
- refuse text that is not UTF-8, naming the byte offset (no ``UnicodeDecodeError`` traceback);
- allow anchors and aliases (``&a`` / ``*a``, merge keys), but refuse a document whose fully expanded
  tree has more than :data:`MAX_YAML_NODES` nodes, or a recursive alias: checked on the composed node
  graph before any Python object is built, in time linear in the file's size.

Every problem is one :class:`~ftagent.core.errors.UserInputError` (exit code 2) naming the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ftagent.core.errors import UserInputError

MAX_YAML_BYTES = 1_000_000  # 1 MB: far above any benchmark file (the largest built-in is under 2 kB)
MAX_YAML_NODES = 100_000  # scalars + collections after alias expansion (a built-in file has under 200)


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that measures the expanded size of each document before constructing it."""

    def compose_document(self) -> yaml.Node | None:
        node = super().compose_document()
        if node is not None:
            _expanded_size(node, {}, set())
        return node


class _Limit(Exception):
    pass


def _expanded_size(node: yaml.Node, memo: dict[int, int], active: set[int]) -> int:
    # an alias is the same node object reached twice: count it once per reach (expanded), compute it once
    key = id(node)
    if key in memo:
        return memo[key]
    if key in active:
        raise _Limit("a recursive alias (an anchor used inside itself)")
    active.add(key)
    if isinstance(node, yaml.MappingNode):
        children = [n for pair in node.value for n in pair]
    elif isinstance(node, yaml.SequenceNode):
        children = node.value
    else:
        children = []
    total = 1
    for child in children:
        total += _expanded_size(child, memo, active)
        if total > MAX_YAML_NODES:
            raise _Limit(f"it holds more than {MAX_YAML_NODES:,} values once its aliases (*name) are expanded")
    active.discard(key)
    memo[key] = total
    return total


def load_yaml_text(text: str, where: str) -> Any:
    """Parse one YAML document with the alias bound; ``where`` names the source in messages.

    Raises:
        UserInputError: bad YAML (line and column), more than :data:`MAX_YAML_BYTES` characters, too many
            values after alias expansion, a recursive alias.
    """
    if len(text) > MAX_YAML_BYTES:
        raise UserInputError(f"{where}: {len(text):,} characters, more than the {MAX_YAML_BYTES:,} limit of a "
                             "YAML input")
    try:
        return yaml.load(text, Loader=_BoundedLoader)  # noqa: S506 - a SafeLoader subclass
    except _Limit as exc:
        raise UserInputError(f"{where}: refused: {exc} (the limit of a YAML input)") from None
    except RecursionError:
        raise UserInputError(f"{where}: refused: nested too deeply") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserInputError(f"{where}: not valid YAML{at}: {problem}") from exc


def read_text_limited(path: Path, where: str, max_bytes: int = MAX_YAML_BYTES) -> str:
    """The UTF-8 text of ``path``, refusing files over ``max_bytes`` before reading them.

    Raises:
        UserInputError: unreadable, too large, or not UTF-8 (with the offset of the first bad byte).
    """
    try:
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)  # a FIFO or /dev/zero has no size: read one byte past the limit
    except OSError as exc:
        raise UserInputError(f"{where}: cannot read it ({exc.strerror or exc})") from exc
    if len(data) > max_bytes:
        size = Path(path).stat().st_size if Path(path).is_file() else len(data)
        raise UserInputError(f"{where}: {size:,} bytes, more than the {max_bytes:,}-byte limit of a YAML input "
                             "(docs/benchmarks.md: keep data in data files, not in the YAML)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserInputError(f"{where}: not UTF-8 text (byte {exc.start}: {data[exc.start:exc.start + 1]!r}); "
                             "save it as UTF-8") from None


def load_yaml_file(path: Path | str, where: str | None = None, max_bytes: int = MAX_YAML_BYTES) -> Any:
    """Read and parse one YAML input file within the size, encoding and alias limits.

    Raises:
        UserInputError: see :func:`read_text_limited` and :func:`load_yaml_text`.
    """
    where = where or f"YAML file {path}"
    return load_yaml_text(read_text_limited(Path(path), where, max_bytes), where)
