"""Parity tier: one session-wide :class:`~tests.parity.harness.ParityTable`, printed at the end."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.integration.conftest import tools_env, tools_python  # noqa: F401 (shared fixtures)
from tests.parity.harness import ParityTable

_TABLE = ParityTable()


@pytest.fixture(scope="session")
def parity() -> ParityTable:
    """The session's agreement table; tests call ``parity.record(...)``."""
    return _TABLE


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _TABLE.rows:
        return
    text = _TABLE.markdown()
    terminalreporter.write_sep("=", "parity: ftagent vs the reference on the same model outputs")
    terminalreporter.write_line(text)
    out = os.environ.get("FTAGENT_PARITY_TABLE")
    if out:
        Path(out).write_text(text + "\n", encoding="utf-8")
