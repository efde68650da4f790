"""The folders of ``FT_FILE_PATH/models`` that building and downloading share: what counts as a model's folder,
and the staging folders a killed build or download leaves beside it."""

from __future__ import annotations

import shutil
from pathlib import Path


def has_model_files(folder: Path) -> bool:
    """``folder`` holds a model (a ``config.json``): one built, downloaded or copied in by hand."""
    return folder.is_dir() and (folder / "config.json").is_file()


def remove_stale_staging(final: Path, kind: str) -> None:
    """Remove every ``.<name>.<kind>-<pid>`` staging folder beside ``final``; call it holding the folder's lock.

    A staging folder exists only while its builder holds that OS file lock, which a killed process drops:
    whatever the lock holder finds is a killed build's or download's leftover (issue 34.12: before, each
    killed build left its folder for good).
    """
    for stale in final.parent.glob(f".{final.name}.{kind}-*"):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
