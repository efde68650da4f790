"""Mounts that a folder needs beyond itself: the Hugging Face cache's ``blobs``.

A model (or dataset) folder in the Hub cache layout is ``<repo>/snapshots/<rev>/``, and every file
in it is a relative symlink to ``../../blobs/<hash>`` (huggingface_hub ``file_download.py``,
``_create_symlink``). Binding only the snapshot folder into bubblewrap or a container leaves every
link dangling: ``config.json`` "does not exist". :func:`with_hf_blobs` adds the repo's ``blobs``
folder, read-only, where the links point.

Only that one folder, found from the mount's own path (an ancestor named ``snapshots``), is added;
symlinks are not followed in general. A symlink planted by confined code in a writable mount would
otherwise make the next command's sandbox bind whatever it points to (``~/.ssh``, the benchmarks).
"""

from __future__ import annotations

import os
from pathlib import Path

from ftagent.runners.base import Mount

SNAPSHOTS = "snapshots"
BLOBS = "blobs"


def hf_blobs_dir(folder: Path) -> Path | None:
    """The ``blobs`` folder of the Hub-cache repo that holds ``folder`` (``snapshots`` itself, a
    ``snapshots/<rev>`` folder or anything inside one), else None. Paths are resolved."""
    real = Path(folder).resolve()
    for candidate in (real, *real.parents):
        if candidate.name == SNAPSHOTS:
            blobs = candidate.parent / BLOBS
            # a real folder beside snapshots/, never a link: that could lead anywhere on the host
            return blobs if blobs.is_dir() and not blobs.is_symlink() else None
    return None


def with_hf_blobs(mounts: list[Mount], *, resolve_sources: bool) -> list[Mount]:
    """``mounts`` plus, for each one inside a Hub-cache snapshot, its repo's ``blobs`` (read-only).

    The extra mount appears where the snapshot's relative links lead from where the mount appears:
    its ``target``, else its host path: resolved (``resolve_sources``, as bubblewrap binds) or as
    given (as Docker binds a path through a symlinked folder).
    """
    out = list(mounts)
    seen = {(Path(m.source).resolve(), m.target) for m in mounts}
    for mount in mounts:
        blobs = hf_blobs_dir(Path(mount.source))
        if blobs is None:
            continue
        real = Path(mount.source).resolve()
        shown = mount.target if mount.target is not None else real if resolve_sources else Path(mount.source).absolute()
        where = Path(os.path.normpath(Path(shown) / os.path.relpath(blobs, real)))
        target = None if where == blobs else where
        if (blobs, target) not in seen:
            seen.add((blobs, target))
            out.append(Mount(source=blobs, target=target, read_only=True))
    return out
