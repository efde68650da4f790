"""Decoys: what a confined data script tried to read outside its sandbox, recorded outside it (issue 39 item 7).

**Guaranteed by construction** (:mod:`ftagent.runners.sandbox`): a data script sees the system folders, the
tool env, its own loop workspace, the raw datasets and the base model's folder. Benchmark items
(``FT_FILE_PATH/benchmarks``: every split, every session's frozen copy), the baseline's and every loop's
saved predictions (``FT_FILE_PATH/baseline``, ``FT_FILE_PATH/eval_cache``, ``WORKSPACE_PATH``: other loops'
and other sessions' ``output/oc``), the session logs (``LOG_PATH``: events hold test error samples) are not
bound, so no read can return them, whatever the script does.

**Detected** (this module): bubblewrap does not log a denied read. So each of those folders is made to
exist inside the sandbox as a *decoy*: a read-only bind of a private folder that mirrors the real one's
names (folders and empty files, at most :data:`MAX_ENTRIES`, shallow first), mounted over the real path.
Opening a decoy file or listing a decoy folder is seen by an inotify watch (``IN_OPEN``/``IN_ACCESS``,
through the maintained ``inotify_simple`` package) held by ftagent's own process, outside the sandbox, on
the decoy's host inodes: the confined code cannot remove, mute or forge it, and nothing but the sandboxed
command can reach the decoys (a fresh ``0700`` folder, bound only into that one command). Every event is
therefore an attempt; a full event queue counts as one too. What it cannot see: ``stat``/``exists``
checks and ``readlink`` (no inotify event), a path outside the mirrored names (``ENOENT`` before any open),
names past :data:`MAX_ENTRIES`, and any folder not listed as forbidden. Those are still not *visible*: the
guarantee above does not depend on the detector. A decoy is never placed where it would cover a folder the
command needs (a forbidden root holding a bound path, other than the loop workspace mounted inside it).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import deque
from pathlib import Path

from ftagent.runners.base import Mount

MAX_ENTRIES = 5000  # names mirrored per forbidden folder (shallow first)


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


class Decoys:
    """Decoy mounts for ``forbidden`` folders and the watch that records reads of them.

    Use as a context manager around one confined command: ``mounts`` go into the command's mounts;
    :attr:`attempts` holds what the command opened, after the ``with`` block.

    Args:
        forbidden: host folders the command must not read (absent ones are skipped).
        bound: the folders the command is given (its workdir, datasets, model ...): a forbidden folder
            that holds one of them gets no decoy (it would cover it), unless the bound folder is the
            ``workdir``, which is mounted inside the decoy as on the host.
        workdir: the command's writable workspace.
    """

    def __init__(self, forbidden: list[Path], *, bound: list[Path], workdir: Path) -> None:
        self.workdir = Path(workdir).absolute()
        bound = [Path(b).absolute() for b in bound]
        self.roots: list[Path] = []
        for root in dict.fromkeys(Path(f).absolute() for f in forbidden):
            if not root.is_dir() or any(_inside(root, b) for b in bound):
                continue  # absent, or already visible through a bound folder (nothing to hide there)
            if any(_inside(b, root) and b != self.workdir for b in bound):
                continue  # covering it would hide a folder the command needs
            self.roots.append(root)
        self.attempts: list[str] = []
        self.unwatched = 0  # mirrored folders no watch could be added for (the kernel's watch limit)
        self._scratch: Path | None = None
        self._watch = None
        self._wds: dict[int, tuple[Path, Path]] = {}  # watch -> (decoy folder, the real folder it stands for)

    @property
    def mounts(self) -> list[Mount]:
        assert self._scratch is not None, "use Decoys as a context manager"
        return [Mount(source=self._scratch / str(i), target=root, read_only=True) for i, root in enumerate(self.roots)]

    def __enter__(self) -> Decoys:
        from inotify_simple import INotify, flags

        self._scratch = Path(tempfile.mkdtemp(prefix="ftagent-decoys-"))  # 0700: only this user
        watch = self._watch = INotify(nonblocking=True)
        mask = flags.OPEN | flags.ACCESS
        for i, root in enumerate(self.roots):
            decoy = self._scratch / str(i)
            for real, mirror in self._mirror(root, decoy):
                try:
                    self._wds[watch.add_watch(str(mirror), mask)] = (mirror, real)
                except OSError:  # fs.inotify.max_user_watches reached: deeper folders are hidden, not watched
                    self.unwatched += 1
        return self

    def _mirror(self, root: Path, decoy: Path) -> list[tuple[Path, Path]]:
        """Mirror ``root``'s names under ``decoy`` (empty files, no links followed); the folders made."""
        decoy.mkdir()
        folders = [(root, decoy)]
        queue, entries = deque([(root, decoy)]), 0
        while queue and entries < MAX_ENTRIES:
            real, mirror = queue.popleft()
            try:
                children = sorted(real.iterdir())
            except OSError:
                continue
            for child in children:
                if entries >= MAX_ENTRIES:
                    break
                entries += 1
                target = mirror / child.name
                if _inside(self.workdir, child):  # the loop's own workspace: only its mount point
                    target.mkdir(parents=True, exist_ok=True)
                    if child != self.workdir:
                        queue.append((child, target))
                        folders.append((child, target))
                elif child.is_dir() and not child.is_symlink():
                    target.mkdir()
                    folders.append((child, target))
                    queue.append((child, target))
                else:
                    target.touch()
        return folders

    def _drain(self) -> None:
        from inotify_simple import flags

        if self._watch is None:
            return
        for event in self._watch.read(timeout=0):
            if event.mask & flags.Q_OVERFLOW:
                self.attempts.append("the watch's event queue overflowed: many reads of decoy files")
                continue
            mirror, real = self._wds.get(event.wd, (None, None))
            if real is None:
                continue
            what = real / event.name if event.name else real
            verb = "listed" if event.mask & flags.ISDIR else "opened"
            line = f"{verb} {what}"
            if line not in self.attempts:
                self.attempts.append(line)

    def __exit__(self, *exc: object) -> None:
        try:
            self._drain()
        finally:
            if self._watch is not None:
                self._watch.close()
                self._watch = None
            if self._scratch is not None:
                shutil.rmtree(self._scratch, ignore_errors=True)


ATTEMPTS_DIR = ".sandbox"  # beside the loop workspaces: no confined command can write there


def attempts_file(workspace: Path) -> Path:
    """Where the data script runs' recorded attempts of ``workspace`` are kept (outside any sandbox)."""
    workspace = Path(workspace).absolute()
    return workspace.parent / ATTEMPTS_DIR / f"{workspace.name}.json"


def record_attempts(workspace: Path, run: str, attempts: list[str]) -> None:
    """Add one run's recorded reads of decoys (``run``: debug | full) to :func:`attempts_file` (atomically)."""
    path = attempts_file(workspace)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        found = {}
    found.setdefault(run, [])
    found[run] = list(dict.fromkeys([*found[run], *attempts]))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(found, indent=1), encoding="utf-8")
    os.replace(tmp, path)


def read_attempts(workspace: Path) -> dict[str, list[str]] | None:
    """The recorded attempts per run, or None when no confined run recorded any file (not watched)."""
    try:
        return json.loads(attempts_file(workspace).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
