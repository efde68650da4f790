"""A loop's folders under ``WORKSPACE_PATH/<session>/`` and a fork's copy of them.

``loop_<n>/`` is the loop workspace (the coder's files, the data script's debug run); beside it, written by ftagent or
by one confined run each (docs/trust.md, rules 2 and 8): ``frozen/loop_<n>/`` (what validation approved),
``data/loop_<n>/`` (the full data run), ``train/loop_<n>/`` (the training: its inputs, its model)
(:mod:`ftagent.finetune.approval`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ftagent.finetune.approval import data_run_dir, frozen_dir, training_dir
from ftagent.finetune.state import FinetuneLoop, FinetuneSessionState


def workspace_dir(root: Path, session_id: str, loop: int) -> Path:
    """``WORKSPACE_PATH/<session>/loop_<n>``: where a loop's files are written."""
    return Path(root) / session_id / f"loop_{loop}"


def fork_workspace(state: FinetuneSessionState, workspace_root: Path, old_session_id: str) -> None:
    """Give a forked session its own copy of the current loop's workspace (paths rewritten).

    Without this a fork resumed mid-loop would validate, train and save over the original
    session's files. Earlier loops keep pointing at the original (they are only read).
    """
    loop = state.current
    if loop is None:
        return
    text = loop.model_dump_json()
    # the workspace, what validation froze, the data and the training's folder (its model)
    for folder in (workspace_dir, frozen_dir, data_run_dir, training_dir):
        old = folder(workspace_root, old_session_id, loop.index)
        new = folder(workspace_root, state.session_id, loop.index)
        if old.is_dir():
            shutil.copytree(old, new, dirs_exist_ok=True, symlinks=True)  # a link is copied as a link, never followed
        text = text.replace(str(old), str(new))
    state.current = FinetuneLoop.model_validate_json(text)
