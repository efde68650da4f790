"""Freezing what validation approved and checking it before train and evaluate (issue 39 item 2).

The workflow calls, in this order (the layout and the hashes are :mod:`ftagent.core.approved`'s):

1. :func:`freeze_code` when the validate step starts, before the debug data run: the coder's files are copied to
   ``frozen/loop_<n>/code/`` (what the debug run runs is what the full run will run: a script that rewrites
   itself while it runs changes only the workspace's copy).
2. :func:`approve` when validation passed: the validated config (its ``dataset_dir`` set to the full data run's
   folder), the planner's original and the micro-batch run's small files join the frozen copy, and every frozen
   file is hashed into :class:`~ftagent.core.approved.Approved` (saved in the validate snapshot).
3. :func:`prepare_data_run` when the train step starts: the hashes are checked (:func:`require_unchanged`), and
   ``data/loop_<n>/`` is made fresh and given a copy of ``code/``; the full data run runs there, so it can write
   its own output and nothing else (not ``train.yaml``, not ``debug/``, not ``output/``).
4. :func:`seal_data` after the full data run: ``dataset_info.json`` is written and the data hashed.
5. :func:`seal_model` after training: the model folder must hold only weight files the trainer writes, and its
   top-level files are hashed.
6. :func:`require_unchanged` before evaluation: any difference is a loop failure naming what changed.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import yaml

from ftagent.core.approved import (
    CODE_DIR,
    CONFIG,
    DATA_FILE,
    DATASET_INFO,
    ORIGINAL_CONFIG,
    VALIDATED_RUN,
    Approved,
    Fingerprint,
)
from ftagent.core.errors import ErrorType, StepError
from ftagent.core.types import CodeResult, ValidationReport
from ftagent.core.untrusted import UnsafeEntry, read_bytes, regular_files, scrub
from ftagent.runners.fresh import FreshRun
from ftagent.runners.scrubbed import scrub_note
from ftagent.tools.llamafactory.config import TRAIN_RUN
from ftagent.tools.llamafactory.validation import MICRO_RUN, VALIDATE_RUN

DATA_SCRIPT = "process_data.py"
#: the largest file the coder's code, a config or a validated-run file may be (a tokenizer.json is ~10 MB)
FILE_LIMIT = 64 << 20
_DEBUG_OUTPUT = ("debug", "output")  # the LLaMA-Factory validator's micro-batch output (validator.DEBUG_DIR)
# files a trainer writes into a model folder: HF Trainer's training_args.bin is not weights
TRAINER_BOOKKEEPING = frozenset({"training_args.bin"})


def frozen_dir(workspace_root: Path, session_id: str, loop: int) -> Path:
    """``WORKSPACE_PATH/<session>/frozen/loop_<n>``: written by ftagent only, bound by no sandbox but read-only."""
    return Path(workspace_root) / session_id / "frozen" / f"loop_{loop}"


def data_run_dir(workspace_root: Path, session_id: str, loop: int) -> Path:
    """``WORKSPACE_PATH/<session>/data/loop_<n>``: the full data run's own folder."""
    return Path(workspace_root) / session_id / "data" / f"loop_{loop}"


def training_dir(workspace_root: Path, session_id: str, loop: int) -> Path:
    """``WORKSPACE_PATH/<session>/train/loop_<n>``: the full training's own folder (the model is in ``run/output``;
    :mod:`ftagent.tools.llamafactory.train_run`)."""
    return Path(workspace_root) / session_id / TRAIN_RUN / f"loop_{loop}"


def scrub_workspace(workspace: Path, ctx: Any) -> None:
    """Remove the links and special files a sandboxed command left in the loop workspace (when a step starts: a
    resumed session may find what a killed command left; see :mod:`ftagent.core.untrusted`); a warning says what."""
    from ftagent.engine.events import Message

    removed = scrub(workspace)
    if removed:
        ctx.emit(Message(level="warning", text=scrub_note(workspace, removed)[:1000]))


def _changed(what: str, changes: list[str]) -> StepError:
    shown = "; ".join(changes[:6]) + (f"; and {len(changes) - 6} more" if len(changes) > 6 else "")
    return StepError(f"{what} changed after validation approved it: {shown}", error_type=ErrorType.ENV,
                     suggestion="Not caused by the plan: no sandboxed command can write these folders, so another "
                                "process changed them. The loop's result would not be the validated experiment.",
                     details={"changed": changes})


def freeze_code(code: CodeResult, frozen: Path) -> None:
    """Copy the coder's files (``process_data.py`` and any other file it named, not the config) to
    ``frozen/code/``, replacing an earlier round's copy.

    Raises:
        StepError: DATA when a named file is a link, a special file or over :data:`FILE_LIMIT` bytes.
    """
    workspace = Path(code.workspace)
    names = {Path(p).name for p in code.files.values() if Path(p).parent == workspace} | {DATA_SCRIPT}
    names -= {CONFIG, ORIGINAL_CONFIG}
    shutil.rmtree(frozen, ignore_errors=True)
    (frozen / CODE_DIR).mkdir(parents=True)
    for name in sorted(names):
        try:
            data = read_bytes(workspace, name, limit=FILE_LIMIT)
        except FileNotFoundError:
            continue
        except UnsafeEntry as exc:
            raise StepError(f"the code step's {name}: {exc.strerror}", error_type=ErrorType.DATA,
                            suggestion=f"Write {name} as a regular file.") from exc
        (frozen / CODE_DIR / name).write_bytes(data)


def _frozen_config(workspace: Path, report: ValidationReport, frozen: Path, data_dir: Path) -> dict[str, Any]:
    path = Path(report.config_path or workspace / CONFIG)
    config = yaml.safe_load(read_bytes(path.parent, path.name, limit=FILE_LIMIT)) or {}
    if "dataset_dir" in config:  # the training data is the full data run's output (a system-managed path key)
        config["dataset_dir"] = str(data_dir)
    ds = config.get("deepspeed")
    if isinstance(ds, str) and Path(ds).parent == workspace:  # the memory plan's DeepSpeed file (launch.py)
        (frozen / Path(ds).name).write_bytes(read_bytes(workspace, Path(ds).name, limit=FILE_LIMIT))
        config["deepspeed"] = str(frozen / Path(ds).name)
    return config


def approve(code: CodeResult, report: ValidationReport, frozen: Path, data_dir: Path) -> Approved:
    """Freeze the validated config, the planner's original and the validated run; hash every frozen file."""
    workspace = Path(code.workspace)
    config = _frozen_config(workspace, report, frozen, data_dir)
    (frozen / CONFIG).write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True), encoding="utf-8")
    try:
        (frozen / ORIGINAL_CONFIG).write_bytes(read_bytes(workspace, ORIGINAL_CONFIG, limit=FILE_LIMIT))
    except (FileNotFoundError, UnsafeEntry):
        pass  # a plug-in validator may keep no original
    run = Path(report.micro_batch.get("output_dir") or workspace.joinpath(*_DEBUG_OUTPUT))
    target = frozen / VALIDATED_RUN
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    micro = FreshRun.beside(workspace, VALIDATE_RUN, MICRO_RUN).output  # the validator's own run (runners/fresh.py)
    if run.is_dir() and (run == micro or workspace in run.parents):
        for rel in regular_files(run):
            try:
                data = read_bytes(run, rel, limit=FILE_LIMIT)
            except UnsafeEntry:  # weights were dropped; a stray big file is no reference
                continue
            dest = target / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
    rels = regular_files(frozen)
    return Approved(frozen=Fingerprint.take(frozen, rels), data_dir=str(data_dir))


def require_unchanged(approved: Approved | None, before: str) -> None:
    """Raise the loop's failure when anything frozen or hashed differs now (``before``: "training" ...)."""
    if approved is None:
        return
    changes = approved.changes()
    if changes:
        raise _changed(f"what was frozen for {before}", changes)


def prepare_data_run(code: CodeResult, approved: Approved) -> CodeResult:
    """A fresh ``data/loop_<n>/`` holding a copy of the frozen code; the returned :class:`CodeResult` runs there."""
    data_dir = Path(approved.data_dir)
    shutil.rmtree(data_dir, ignore_errors=True)  # a killed earlier run's leftovers (rmtree never follows links)
    shutil.copytree(approved.code_dir, data_dir)
    return code.model_copy(update={"workspace": str(data_dir),
                                   "files": {name: str(data_dir / name) for name in os.listdir(data_dir)}})


def seal_data(approved: Approved, data_format: str = "alpaca") -> None:
    """Register the full run's ``data.json`` for LLaMA-Factory (in the loop stage's row format: alpaca, pairwise,
    kto; issue 40) and hash both files into ``approved.data``."""
    from ftagent.tools.llamafactory.config import write_dataset_info
    from ftagent.tools.llamafactory.defaults import load_lf_defaults

    data_dir = Path(approved.data_dir)
    write_dataset_info(data_dir, load_lf_defaults().dataset_name, data_format=data_format)
    # a plug-in data step may write no data.json (the trainer then fails on its own): hash what is there
    approved.data = Fingerprint.take(data_dir, [n for n in (DATA_FILE, DATASET_INFO) if (data_dir / n).is_file()])


def foreign_weights(model_dir: Path) -> list[str]:
    """Weight files at the top of ``model_dir`` that the model's own format does not name (the trainer writes
    ``model.safetensors``, the shards its index names, ``adapter_model.*``, ``pytorch_model.bin``)."""
    from ftagent.tools.llamafactory.debug_output import is_weight_file

    root = Path(model_dir)
    named = {"model.safetensors", "pytorch_model.bin", "adapter_model.safetensors", "adapter_model.bin",
             *TRAINER_BOOKKEEPING}
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        try:
            data = json.loads(read_bytes(root, index, limit=FILE_LIMIT))
        except (FileNotFoundError, UnsafeEntry, ValueError):
            continue
        named.add(index)
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        named.update(str(v) for v in (weight_map or {}).values())
    return sorted(name for name in os.listdir(root) if is_weight_file(name) and name not in named)


def seal_model(approved: Approved | None, model_dir: Path) -> None:
    """Refuse a model folder holding weight files the trainer did not write; hash its top-level files.

    Raises:
        StepError: ENV naming the foreign weight files.
    """
    if not Path(model_dir).is_dir():
        return  # nothing trained there: the evaluation fails on its own
    foreign = foreign_weights(model_dir)
    if foreign:
        raise StepError(f"the trained model's folder {model_dir} holds weight files the trainer did not write: "
                        f"{', '.join(foreign[:5])}; refused", error_type=ErrorType.ENV,
                        suggestion="Not caused by the config: training starts from a fresh output folder. Another "
                                   "process wrote these files.", details={"foreign_weights": foreign})
    if approved is not None:
        root = Path(model_dir)
        approved.model = Fingerprint.take(root, sorted(n for n in os.listdir(root) if (root / n).is_file()
                                                       and not (root / n).is_symlink()))
