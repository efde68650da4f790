"""A confined tool run's own folders: read-only inputs ftagent staged, and one fresh, empty writable folder
(issue 39, red team breaches B1 and B2).

The loop workspace is where the planner's data script ran: anything in it may have been planted (a checkpoint
for ``resume_from_checkpoint``, a ``datasets`` cache entry keyed by a future file's path and mtime, a module or a
config file a library picks up from its working folder). So a run that follows the data script (the template
check, the micro-batch, the full training of every stage, the tracker's commands) never binds it. It gets:

* ``<root>/inputs/`` — what ftagent staged for it (the config it runs, the training data, a DeepSpeed file):
  written by ftagent only, bound read-only;
* ``<root>/run/`` — its working folder, created empty by ftagent right before it starts, the only folder it can
  write besides a tracker's: ``output/`` (the model), ``cache/`` (``HF_HOME``, ``HF_DATASETS_CACHE``, Triton's and
  TorchInductor's caches, ``XDG_CACHE_HOME``) and ``tmp/`` (``TMPDIR``);
* the read-only folders its caller names: the start weights (the base model, or a parent's approved weights),
  ftagent's package for a script of its own.

The root lies beside the loop workspaces, ``WORKSPACE_PATH/<session>/<kind>/loop_<n>/`` (:meth:`FreshRun.beside`),
like ``frozen/`` and ``data/``: no sandbox binds it but this run's. Nothing earlier survives in it: :meth:`make`
empties the whole root (``shutil.rmtree`` never follows a link) before creating the folders again.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ftagent.core.untrusted import copy_beneath, open_beneath
from ftagent.runners.base import Mount

INPUTS = "inputs"
RUN = "run"
OUTPUT = "output"
#: where each cache a tool run may fill lives, below ``run/`` (the variables the libraries read)
CACHE_VARS = {"HF_HOME": "cache/huggingface", "HF_DATASETS_CACHE": "cache/datasets",
              "TRITON_CACHE_DIR": "cache/triton", "TORCHINDUCTOR_CACHE_DIR": "cache/torchinductor",
              "XDG_CACHE_HOME": "cache", "TMPDIR": "tmp"}
SCRATCH = ("cache", "tmp")  # removed after the run (:meth:`FreshRun.drop_scratch`): nothing reads them


@dataclass(frozen=True)
class FreshRun:
    """The folders of one confined tool run (see the module docstring)."""

    root: Path

    @classmethod
    def beside(cls, workspace: Path, kind: str, part: str = "") -> FreshRun:
        """``<workspace's parent>/<kind>/<workspace's name>[/<part>]``: for ``WORKSPACE_PATH/<session>/loop_<n>``,
        ``WORKSPACE_PATH/<session>/train/loop_<n>`` or ``.../validate/loop_<n>/micro``."""
        workspace = Path(workspace).absolute()
        root = workspace.parent / kind / workspace.name
        return cls(root=root / part if part else root)

    @classmethod
    def of_output(cls, output: Path) -> FreshRun:
        """The run whose ``output/`` folder ``output`` is."""
        return cls(root=Path(output).absolute().parent.parent)

    @property
    def inputs(self) -> Path:
        return self.root / INPUTS

    @property
    def work(self) -> Path:
        """The run's working folder: the one it can write."""
        return self.root / RUN

    @property
    def output(self) -> Path:
        return self.work / OUTPUT

    def make(self) -> FreshRun:
        """Empty the root of whatever an earlier run left there and create the folders. The root is emptied, not
        removed: it may be a mount point (a volume, the tmpfs of a disk-full test)."""
        if self.root.is_symlink() or (self.root.exists() and not self.root.is_dir()):
            self.root.unlink()
        self.root.mkdir(parents=True, exist_ok=True)
        for entry in os.scandir(self.root):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)  # never follows a link (shutil.rmtree.avoids_symlink_attacks on Linux)
            else:
                os.unlink(entry.path)
        for folder in (self.inputs, self.output, *(self.work / rel for rel in CACHE_VARS.values())):
            folder.mkdir(parents=True, exist_ok=True)
        return self

    def env(self) -> dict[str, str]:
        """The cache and temporary-file variables, all inside the run's own folder."""
        return {name: str(self.work / rel) for name, rel in CACHE_VARS.items()}

    def mounts(self, *others: Mount) -> list[Mount]:
        """The run's working folder (writable), its staged inputs (read-only) and ``others`` as they are."""
        return [Mount(source=self.work, read_only=False), Mount(source=self.inputs), *others]

    def stage_copy(self, root: Path, rel: str, name: str | None = None) -> Path:
        """Copy ``root/rel`` into the inputs without following a link on the way (a tree confined code wrote)."""
        dest = self.inputs / (name or Path(rel).name)
        copy_beneath(root, rel, dest)
        return dest

    def stage_link(self, source: Path, name: str | None = None) -> Path:
        """Hard-link a file of a tree no confined command can write any more (the sealed training data) into the
        inputs; a copy where the filesystem cannot link. A link or special file at ``source`` is refused."""
        source = Path(source)
        dest = self.inputs / (name or source.name)
        os.close(open_beneath(source.parent, source.name))  # a regular file, reached without following a link
        try:
            os.link(source, dest, follow_symlinks=False)
        except OSError:
            copy_beneath(source.parent, source.name, dest)
        return dest

    def drop_scratch(self) -> None:
        """Remove the caches and temporary files (a datasets cache is as large as the data)."""
        for name in SCRATCH:
            shutil.rmtree(self.work / name, ignore_errors=True)
