"""Run a command whose writable tree ftagent reads afterwards, and leave that tree holding only regular files
and folders (issue 39 item 1; the mechanism is :func:`ftagent.core.untrusted.scrub`).

Every command ftagent runs in a loop workspace, a full data run's folder or an evaluation's work folder goes
through :func:`run_scrubbed`: when the runner returns, every process of the command has ended (the sandbox's
PID namespace or container is gone, the process group killed), so removing the links and special files it left
cannot race with it. What was removed is appended to the command's log and to its log tail, where the step's
failure and the planner's feedback show it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ftagent.core.untrusted import UnsafeEntry, open_append, scrub
from ftagent.runners.base import Runner, RunResult

NOTE = "ftagent never follows a link or opens a special file in a folder sandboxed code can write"


def scrub_note(tree: Path, removed: list[str]) -> str:
    """The line that says what :func:`~ftagent.core.untrusted.scrub` removed from ``tree``."""
    shown = ", ".join(removed[:8]) + (f" and {len(removed) - 8} more" if len(removed) > 8 else "")
    return f"[ftagent] removed from {tree}: {shown} ({NOTE})"


def _append(log_file: Path, tree: Path, line: str) -> None:
    path = Path(log_file)
    root = tree if tree in path.parents else path.parent
    try:
        with open_append(root, path.relative_to(root)) as fh:
            fh.write(line + "\n")
    except (UnsafeEntry, OSError):
        pass  # the log is the note's copy for people; the tail below is the one the step reads


def run_scrubbed(runner: Runner, cmd: list[str], *, tree: Path, **kwargs: Any) -> RunResult:
    """``runner.run(cmd, **kwargs)``, then :func:`~ftagent.core.untrusted.scrub` of ``tree`` (the command's
    writable folder that ftagent reads afterwards; never a folder that may hold wanted links, such as a Hub cache)."""
    try:
        result = runner.run(cmd, **kwargs)
    finally:
        removed = scrub(tree)
    if not removed:
        return result
    line = scrub_note(Path(tree), removed)
    if result.log_file:
        _append(Path(result.log_file), Path(tree), line)
    return result.model_copy(update={"log_tail": f"{result.log_tail}\n{line}".strip()})
