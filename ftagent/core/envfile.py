"""Load and validate ``.env`` before any settings are read.

python-dotenv only warns about lines it cannot parse and carries on; ftagent treats a malformed
``.env`` as a user error (exit code 2), naming the file and line, so a typo never silently drops a key.
Values are put into the process environment without overriding it (the environment wins).
"""

from __future__ import annotations

import os
from pathlib import Path

from dotenv.main import DotEnv
from dotenv.parser import parse_stream

from ftagent.core.errors import UserInputError

_loaded: dict[str, str] = {}  # key → digest of the value .env put into this process's environment
# the same, handed to child processes (an MCP server's run, a job's task): "KEY:digest,..."; a key counts only
# while its value is still the one .env gave (a parent that sets LOG_PATH for its child made it the environment's)
MARK = "FTAGENT_DOTENV_KEYS"


def _digest(value: str) -> str:
    import hashlib

    return hashlib.sha256(value.encode()).hexdigest()[:12]


def dotenv_keys() -> frozenset[str]:
    """The variables ``.env`` put into this process's environment (:func:`load_env_file`, here or in a parent):
    a run file overrides those, not the others (docs/configuration.md, "A run described by one file")."""
    given = dict(_loaded)
    for item in os.environ.get(MARK, "").split(","):
        key, _, digest = item.partition(":")
        given.setdefault(key, digest)
    return frozenset(k for k, digest in given.items() if k in os.environ and _digest(os.environ[k]) == digest)


def load_env_file(path: Path | None = None) -> dict[str, str]:
    """Validate and load ``path`` (default ``./.env``); return the keys it set. Missing file: no-op.

    Raises:
        UserInputError: when a line is not ``KEY=VALUE`` (comments and blank lines are fine).
    """
    path = Path(path) if path is not None else Path.cwd() / ".env"
    if not path.is_file():
        return {}
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UserInputError(f"{path} is not UTF-8 text: {exc}") from exc
    import io

    for binding in parse_stream(io.StringIO(text)):
        if binding.error:
            line = binding.original.line
            snippet = binding.original.string.strip().splitlines()[0] if binding.original.string.strip() else ""
            raise UserInputError(f"{path}:{line}: cannot parse '{snippet}' (expected KEY=VALUE)")
        if binding.key is not None and binding.value is None and binding.original.string.strip():
            raise UserInputError(
                f"{path}:{binding.original.line}: '{binding.key}' has no value (expected KEY=VALUE)"
            )
    values = {k: v for k, v in DotEnv(path, interpolate=True).dict().items() if v is not None}
    loaded = {}
    for key, value in values.items():
        if key not in os.environ:
            os.environ[key] = value
            loaded[key] = value
            _loaded[key] = _digest(value)
    if loaded:
        os.environ[MARK] = ",".join(f"{k}:{_digest(os.environ[k])}" for k in sorted(dotenv_keys()))
    return loaded
