"""When a Hugging Face download into a folder is finished (one rule for benchmarks and datasets).

``snapshot_download(local_dir=...)`` keeps its bookkeeping under ``<folder>/.cache/huggingface``: a file
being fetched is ``download/<path>.incomplete`` until it is renamed into place. Offline
(``HF_HUB_OFFLINE=1``) it cannot reach the Hub and returns a non-empty ``local_dir`` as it is, without an
error (huggingface_hub ``_snapshot_download.py``: "Returning existing local_dir ... as remote repo cannot
be accessed"), even half-downloaded. A download is therefore finished only when the call returned, no
``*.incomplete`` file remains and the folder holds files; an interrupted download cannot be finished
offline. Either case is one :class:`EnvironmentFailure` naming the folder and the fix, and the caller
never writes its completion marker (issue 34.2).
"""

from __future__ import annotations

import os
from pathlib import Path

from ftagent.core.errors import EnvironmentFailure

HF_DOWNLOAD_CACHE = Path(".cache") / "huggingface"  # what snapshot_download(local_dir=...) keeps while it works


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` is set (huggingface_hub's own truthy values)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def unfinished_files(folder: Path) -> list[str]:
    """The files the Hub was still fetching into ``folder`` (``*.incomplete``), relative to the folder."""
    cache = Path(folder) / HF_DOWNLOAD_CACHE
    if not cache.is_dir():
        return []
    return sorted(str(p.relative_to(folder)) for p in cache.rglob("*.incomplete"))


def refuse_offline_resume(folder: Path, what: str, fix: str) -> None:
    """Before a download: an interrupted one in ``folder`` (the Hub's cache, no marker) cannot be finished
    offline, and the Hub would hand the half-download back as if complete."""
    if hub_offline() and (Path(folder) / HF_DOWNLOAD_CACHE).exists():
        left = unfinished_files(folder)
        detail = f"; {len(left)} file(s) half-written, e.g. {left[0]}" if left else ""
        raise EnvironmentFailure(
            f"{what}: the download into {folder} was interrupted{detail}, and HF_HUB_OFFLINE is set, so it "
            f"cannot be finished. Fix: {fix}")


def require_finished(folder: Path, what: str, fix: str) -> None:
    """After ``snapshot_download(local_dir=folder)`` returned: raise unless the download is finished."""
    folder = Path(folder)
    left = unfinished_files(folder)
    if left:
        raise EnvironmentFailure(f"{what}: the download into {folder} is unfinished ({len(left)} file(s) "
                                 f"half-written, e.g. {left[0]}). Fix: {fix}")
    if not any(p.is_file() for p in folder.rglob("*") if HF_DOWNLOAD_CACHE.parts[0] not in p.relative_to(folder).parts):
        raise EnvironmentFailure(f"{what}: the download into {folder} returned no files. Fix: {fix}")
