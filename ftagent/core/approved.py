"""What validation approved, frozen where confined code cannot write, with its content hashes (issue 39 item 2).

The validate step checks files of the loop workspace, which the planner's data script, the trainer and the
evaluator can all write. What it approved is therefore copied out of that tree the moment it is checked, and
only the copies are used afterwards:

``WORKSPACE_PATH/<session>/frozen/loop_<n>/`` (written by ftagent only; no sandbox binds it writable)
    ``code/`` -- the files the debug data run ran (``process_data.py`` ...), copied before it ran;
    ``train.yaml`` -- the config validation approved (its ``dataset_dir`` is the full data run's folder);
    ``train.orig.yaml`` -- the planner's config as written;
    ``validated_run/`` -- the micro-batch run's small files (tokenizer, chat template, model config, loss log):
    the integrity guard's "validated run" reference.
``WORKSPACE_PATH/<session>/data/loop_<n>/`` (the full data run's fresh folder)
    a copy of ``code/``, run there; its ``data.json`` is the training data; nothing else can write it.

:class:`Approved` holds the hashes (it is saved in the validate snapshot, :class:`ftagent.core.types.ValidationReport`):
``frozen`` when validation passes, ``data`` after the full data run, ``model`` after training. The workflow
checks :meth:`Approved.changes` before training and before evaluation; any difference fails the loop with a
message naming what changed.

For the integrity guard and the exporter: :attr:`Approved.validated_run`, :attr:`Approved.data_file`,
:attr:`Approved.config_path`, :attr:`Approved.code_dir` and :meth:`Approved.artefacts` are the paths to read
(never the workspace's copies), and :meth:`Fingerprint.changes` says whether they still hold what was recorded.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, Field

from ftagent.core.untrusted import UnsafeEntry, regular_files, sha256_beneath

CODE_DIR = "code"
CONFIG = "train.yaml"
ORIGINAL_CONFIG = "train.orig.yaml"
VALIDATED_RUN = "validated_run"
DATA_FILE = "data.json"
DATASET_INFO = "dataset_info.json"


class Fingerprint(BaseModel):
    """The SHA-256 of files under one folder, taken at one moment (paths relative to ``root``)."""

    root: str
    files: dict[str, str] = Field(default_factory=dict)
    whole: bool = False  # every regular file of the tree was taken: a file added later is a change too

    @classmethod
    def take(cls, root: Path | str, rels: Iterable[str] | None = None) -> Fingerprint:
        """Hash ``rels`` under ``root`` (None: every regular file of the tree), reading without links.

        Raises:
            UnsafeEntry: a named file is a link or a special file.
            FileNotFoundError: a named file is missing.
        """
        names = regular_files(root) if rels is None else list(rels)
        return cls(root=str(root), files={rel: sha256_beneath(root, rel) for rel in names}, whole=rels is None)

    def changes(self) -> list[str]:
        """What differs on disk from the recorded hashes: ``"train.yaml (changed)"``, ``"... (missing)"``,
        ``"x (added)"`` (a whole-tree fingerprint), ``"logs/a (a symlink: refused)"``; empty when equal."""
        out: list[str] = []
        for rel, digest in sorted(self.files.items()):
            try:
                now = sha256_beneath(self.root, rel)
            except FileNotFoundError:
                out.append(f"{rel} (missing)")
                continue
            except UnsafeEntry as exc:
                out.append(f"{rel} ({exc.strerror})")
                continue
            if now != digest:
                out.append(f"{rel} (changed: sha256 {digest[:12]} -> {now[:12]})")
        if self.whole and Path(self.root).is_dir():
            try:
                added = sorted(set(regular_files(self.root)) - set(self.files))
            except OSError as exc:
                added = [f"the folder cannot be listed: {exc}"]
            out += [f"{rel} (added)" for rel in added]
        return out


class Approved(BaseModel):
    """The frozen copies and hashes of what validation approved (see the module docstring)."""

    frozen: Fingerprint  # root: WORKSPACE_PATH/<session>/frozen/loop_<n>
    data_dir: str  # WORKSPACE_PATH/<session>/data/loop_<n>: the full data run's folder
    data: Fingerprint | None = None  # data.json (+ dataset_info.json) after the full data run
    model: Fingerprint | None = None  # the trained model's folder (top-level files) after training

    @property
    def root(self) -> Path:
        return Path(self.frozen.root)

    @property
    def config_path(self) -> Path:
        """The validated config the trainer runs."""
        return self.root / CONFIG

    @property
    def code_dir(self) -> Path:
        return self.root / CODE_DIR

    @property
    def validated_run(self) -> Path:
        """The micro-batch run's files as validation left them (the integrity guard's reference)."""
        return self.root / VALIDATED_RUN

    @property
    def data_file(self) -> Path:
        """The training data (the full data run's output; the parent's when it was reused)."""
        return Path(self.data_dir) / DATA_FILE

    def changes(self) -> list[str]:
        """Every difference between disk and the recorded hashes, each named by its folder's role."""
        out = [f"frozen/{c}" for c in self.frozen.changes()]
        if self.data is not None:
            out += [f"data/{c}" for c in self.data.changes()]
        if self.model is not None:
            out += [f"model/{c}" for c in self.model.changes()]
        return out

    def artefacts(self) -> dict[str, str]:
        """The experiment's artefact paths that readers use instead of the workspace's files."""
        out: dict[str, str] = {}
        for rel in self.frozen.files:
            head, _, name = rel.partition("/")
            if head == CODE_DIR and name and "/" not in name:  # process_data.py and the coder's other files
                out[name] = str(self.code_dir / name)
        out.update({CONFIG: str(self.config_path), VALIDATED_RUN: str(self.validated_run)})
        if self.data is not None:
            out.update(data=str(self.data_file), data_log=str(Path(self.data_dir) / "logs" / "process_data.log"),
                       **{DATASET_INFO: str(Path(self.data_dir) / DATASET_INFO)})
        return out
