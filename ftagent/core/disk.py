"""A full disk is the environment's fault, not the loop's: it stops the session with what to free.

Training, evaluation and data scripts write checkpoints, predictions and data to the workspace and
``FT_FILE_PATH``. When the disk fills, the tool dies with ``No space left on device`` (``ENOSPC``) or
``Disk quota exceeded`` (``EDQUOT``). Treated as a loop failure, the next loop would fill the disk again
and fail the same way; so :func:`check_disk_full` turns it into one :class:`EnvironmentFailure` naming the
free space of the folders involved and what can be deleted.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterable
from pathlib import Path

from ftagent.core.errors import EnvironmentFailure

DISK_FULL = re.compile(r"No space left on device|Errno 28\b|ENOSPC|Disk quota exceeded|Errno 122\b|EDQUOT"
                       r"|not enough free disk space|There is not enough space on the disk", re.IGNORECASE)


def is_disk_full(text: str) -> bool:
    """True when a tool's log says the disk (or the quota) is full."""
    return bool(DISK_FULL.search(text or ""))


def _free(path: Path) -> str:
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        usage = shutil.disk_usage(probe)
    except OSError:
        return f"{path}: free space unknown"
    return f"{path}: {usage.free / 2**30:.2f} GiB free of {usage.total / 2**30:.1f} GiB"


def check_disk_full(text: str, what: str, folders: Iterable[Path | str]) -> None:
    """Raise :class:`EnvironmentFailure` when ``text`` (a log tail) reports a full disk.

    Args:
        text: the failing tool's log (or its tail).
        what: the step that failed, e.g. ``"training"``.
        folders: where the step writes (the workspace, ``FT_FILE_PATH``); their free space is reported.
    """
    if not is_disk_full(text):
        return
    places = "; ".join(_free(Path(f)) for f in folders)
    raise EnvironmentFailure(
        f"{what} stopped: the disk is full ({places}). Free space before resuming with --path: delete the "
        "models and checkpoints of loops that are not the best (WORKSPACE_PATH/<session>/train/loop_<n>), old "
        "sessions' workspaces, FT_FILE_PATH/eval_cache, or merged models (…/merged); or point WORKSPACE_PATH "
        "at a larger disk.")
