"""The full training's own folders and the config it runs (issue 39, red team breaches B1 and B2).

The trainer never binds the loop workspace, where the data script ran. :func:`stage_training` makes its fresh
run folder (:class:`~ftagent.runners.fresh.FreshRun`, ``WORKSPACE_PATH/<session>/train/loop_<n>/``) and stages
in ``inputs/`` (read-only for the trainer) exactly what it reads:

* the training data: ``data.json`` and ``dataset_info.json`` as the full data run left them and ``seal_data``
  hashed them (hard links, so no copy of a large file; a copy where the filesystem cannot link), or, for a
  trainer used on its own, a copy of the validated config's ``dataset_dir/data.json`` read without following a
  link, registered again by ftagent;
* the DeepSpeed file the memory plan chose (a copy);
* ``train.yaml``: the validated config with the run's own paths (``output_dir`` in ``run/output``,
  ``dataset_dir`` the inputs, ``deepspeed`` the copy) and the run's extra keys (the tracker's, the NaN filter
  off, Ray's).

Its one writable folder is ``run/`` (model, caches, ``TMPDIR``). Together with the key allowlist
(:mod:`.planner_keys`) this is why no weights and no rows but the approved ones reach training: no key can name
a path, and no path the data script could write exists in the trainer's sandbox.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ftagent.runners.fresh import OUTPUT, RUN, FreshRun
from ftagent.tools.llamafactory.config import (
    DATA_FILE,
    DATASET_INFO,
    TRAIN_RUN,
    dump_yaml,
    write_dataset_info,
)
from ftagent.tools.llamafactory.defaults import load_lf_defaults

RUN_CONFIG = "train.yaml"


def training_run(workspace: Path) -> FreshRun:
    """The full training's folders for the loop workspace ``workspace`` (not created)."""
    return FreshRun.beside(workspace, TRAIN_RUN)


def run_of_model(model_dir: Path) -> FreshRun:
    """The training run that wrote ``model_dir`` (its ``run/output``, or a ``checkpoint-N`` inside it)."""
    path = Path(model_dir).absolute()
    for folder in (path, *path.parents):
        if folder.name == OUTPUT and folder.parent.name == RUN:
            return FreshRun.of_output(folder)
    raise ValueError(f"{model_dir} is not the output of a training run (<root>/{RUN}/{OUTPUT})")


def stage_training(workspace: Path, config: dict[str, Any], *, sealed_data: Path | None,
                   data_format: str) -> FreshRun:
    """Make the training's run folder fresh and stage its data and DeepSpeed file (see the module docstring).

    ``sealed_data``: the folder whose ``data.json`` and ``dataset_info.json`` the workflow hashed after the full
    data run (None: a trainer used on its own; the config's ``dataset_dir`` ``data.json`` is copied without following
    a link and registered again here, in the stage's row format ``data_format``: ftagent alone writes a
    registration the trainer reads).
    """
    run = training_run(workspace).make()
    if sealed_data is not None:
        for name in (DATA_FILE, DATASET_INFO):
            if (Path(sealed_data) / name).is_file():
                run.stage_link(Path(sealed_data) / name)
        return run
    source = Path(str(config.get("dataset_dir") or workspace))
    if (source / DATA_FILE).is_file():
        run.stage_copy(source, DATA_FILE)
    name = str(config.get("dataset") or load_lf_defaults().dataset_name)
    write_dataset_info(run.inputs, name, data_format=data_format)
    return run


def run_config(run: FreshRun, config: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """The config the trainer runs: ``config`` with the run's own paths, plus ``extra`` keys."""
    out = {**config, **extra, "output_dir": str(run.output), "dataset_dir": str(run.inputs)}
    ds = config.get("deepspeed")
    if isinstance(ds, str) and ds.strip():  # the validated (frozen) copy of the memory plan's DeepSpeed file
        out["deepspeed"] = str(run.stage_copy(Path(ds).parent, Path(ds).name))
    return out


def write_run_config(run: FreshRun, config: dict[str, Any]) -> Path:
    """``inputs/train.yaml`` (read-only for the trainer)."""
    return dump_yaml(config, run.inputs / RUN_CONFIG)
