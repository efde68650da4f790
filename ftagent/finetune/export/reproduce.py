"""``reproduce/``: the data script, a portable ``train.yaml`` and the commands that rebuild the model
with LLaMA-Factory alone (no ftagent, no host paths, no secrets)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field

from ftagent.finetune.export.facts import ExportFacts

REPRODUCE_DIR = "reproduce"
BASE_MODEL_DIR = "base_model"  # where reproduce/ expects a base model that is not an HF repo id
DATASETS_DIR = "datasets"
MAX_BUNDLED_DATASET_BYTES = 20 * 1024 * 1024  # locally generated raw datasets up to this size are copied
# keys that may hold credentials: never written to a file that is meant to be shared
SECRET_KEY = re.compile(r"(token|secret|password|api_key|apikey|credential)", re.IGNORECASE)
# keys ftagent sets for the host; reproduce/ gives them portable values instead
PORTABLE_KEYS = {"output_dir": "output", "dataset_dir": "."}
HF_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class DatasetNote(BaseModel):
    """How ``reproduce/`` gets one raw dataset."""

    name: str
    repo_id: str | None = None  # an HF dataset repo to download
    bundled: bool = False  # copied into reproduce/datasets/<name>
    license: str = ""


class Reproduction(BaseModel):
    """What :func:`write_reproduce` wrote: the commands and what the card says about them."""

    model_source: str  # model_name_or_path in reproduce/train.yaml
    base_model_note: str = ""  # how to get a base model that is not an HF repo id
    datasets: list[DatasetNote] = Field(default_factory=list)
    dropped_keys: list[str] = Field(default_factory=list)  # config keys left out (credentials, host files)
    commands: list[str] = Field(default_factory=list)


def is_hub_id(name: str) -> bool:
    """True for an HF repo id (``org/name``) that is neither a local path nor a ``builtin/`` model."""
    return bool(HF_REPO_ID.match(name)) and not name.startswith("builtin/") and not Path(name).exists()


def model_source(facts: ExportFacts) -> tuple[str, str]:
    """``model_name_or_path`` for reproduce/train.yaml and, when it is a placeholder folder, how to fill it."""
    if is_hub_id(facts.base_model):
        return facts.base_model, ""
    if facts.base_model.startswith("builtin/"):
        name = facts.base_model.split("/", 1)[1]
        note = (f"`{facts.base_model}` is built locally by ftagent: `ftagent models build {name}` prints the "
                f"folder it wrote; copy that folder to `reproduce/{BASE_MODEL_DIR}/`")
    else:
        note = f"copy the base model (`{Path(facts.base_model).name}`, a local folder) to `reproduce/{BASE_MODEL_DIR}/`"
    return BASE_MODEL_DIR, note


def portable_config(config: dict[str, Any], facts: ExportFacts, source: str) -> tuple[dict[str, Any], list[str]]:
    """The trained config with host paths replaced and credentials left out; returns (config, dropped keys)."""
    out: dict[str, Any] = {}
    dropped: list[str] = []
    hosts = [p for p in (facts.workspace, facts.base_model_path, facts.model_path) if p]
    for key, value in config.items():
        if SECRET_KEY.search(key):
            dropped.append(key)
        elif key == "model_name_or_path":
            out[key] = source
        elif key in PORTABLE_KEYS:
            out[key] = PORTABLE_KEYS[key]
        elif isinstance(value, str) and (value.startswith("/") or any(h in value for h in hosts)):
            dropped.append(key)  # a host file (e.g. a DeepSpeed config): not portable
        else:
            out[key] = value
    return out, dropped


def _dataset_notes(facts: ExportFacts, dataset_root: Path | None, out: Path) -> list[DatasetNote]:
    from ftagent.datasets.registry import get_source

    notes = []
    for name in facts.datasets:
        try:
            spec = get_source(name).spec
        except Exception:  # noqa: BLE001 - a plug-in dataset that is no longer installed
            notes.append(DatasetNote(name=name))
            continue
        note = DatasetNote(name=name, repo_id=spec.repo_id, license=spec.license)
        src = dataset_root / name if dataset_root else None
        if spec.repo_id is None and src is not None and src.is_dir() and _size(src) <= MAX_BUNDLED_DATASET_BYTES:
            shutil.copytree(src, out / DATASETS_DIR / name)
            note.bundled = True
        notes.append(note)
    return notes


def tool_pins() -> str:
    """The tool env's pins (``configs/envs/tools.txt`` + CPU/GPU torch) as one requirements file."""
    from ftagent.core.paths import config_file

    lines = ["# ftagent's tool env pins (configs/envs/tools.txt); torch as trained"]
    for name in ("torch-cpu.txt", "tools.txt"):
        text = config_file("envs", name).read_text(encoding="utf-8")
        lines += [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return "\n".join(lines) + "\n"


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _commands(facts: ExportFacts, datasets: list[DatasetNote]) -> list[str]:
    cmds = ["# once: pip install -r requirements.txt   (LLaMA-Factory and the pins it was trained with)"]
    for note in datasets:
        if note.repo_id and not note.bundled:
            cmds.append(f"hf download {note.repo_id} --repo-type dataset --local-dir {DATASETS_DIR}/{note.name}")
        elif not note.bundled:
            cmds.append(f"# {note.name}: generated by ftagent (`ftagent datasets prepare {note.name}`), "
                        f"copy it to {DATASETS_DIR}/{note.name}")
    cmds += [f"export FT_DATASETS_DIR=$PWD/{DATASETS_DIR}   # raw datasets, one folder each",
            "python process_data.py            # writes data.json (Alpaca rows)",
            "llamafactory-cli train train.yaml # writes output/"]
    if facts.is_lora:
        cmds.append("llamafactory-cli export merge.yaml # LoRA merged into the base model: merged/")
    return cmds


def _write_chain(facts: ExportFacts, target: Path, source: str, note: str, dropped: list[str],
                 dataset_root: Path | None) -> Reproduction:
    """``reproduce/`` of a stage chain: a folder per step, ``run.sh`` running them in order."""
    from ftagent.finetune.export.stages import write_chain

    (target / "train.yaml").write_text(yaml.safe_dump(portable_config(facts.config, facts, source)[0],
                                                      sort_keys=False), encoding="utf-8")  # the last step's
    start = source if is_hub_id(source) else f"../{source}"  # seen from inside a step's folder
    steps = write_chain(facts.stages, target, start, lambda cfg, model: portable_config(cfg, facts, model))
    datasets = _dataset_notes(facts, dataset_root, target)
    (target / "requirements.txt").write_text(tool_pins(), encoding="utf-8")
    head = _commands(facts, datasets)[:-3 if facts.is_lora else -2]  # pins and datasets, not the one-run steps
    if any(step.stage == "grpo" for step in facts.stages):  # the reward is ftagent's (the benchmark's scorer)
        head.append('export FTAGENT_ROOT="${FTAGENT_ROOT:?the folder that holds ftagent/ (a clone or site-packages)}"')
    repro = Reproduction(model_source=source, base_model_note=note, datasets=datasets, dropped_keys=dropped,
                         commands=[*head, *steps])
    script = ["#!/usr/bin/env bash", f"# Rebuild the model: {facts.stage_chain} (LLaMA-Factory 0.9.5, TRL 0.24).",
              "set -euo pipefail", 'cd "$(dirname "$0")"', *repro.commands]
    (target / "run.sh").write_text("\n".join(script) + "\n", encoding="utf-8")
    (target / "run.sh").chmod(0o755)
    return repro


def write_reproduce(facts: ExportFacts, out: Path, dataset_root: Path | None) -> Reproduction:
    """Write ``out/reproduce/`` (script, train.yaml, dataset_info.json, merge.yaml for LoRA, run.sh)."""
    target = Path(out) / REPRODUCE_DIR
    target.mkdir(parents=True)
    workspace = Path(facts.workspace)
    for name in ("process_data.py", "dataset_info.json"):
        src = Path(facts.files.get(name) or workspace / name)  # the frozen copy (issue 39), else the workspace's
        if src.is_file() and not src.is_symlink():
            shutil.copy2(src, target / name)
    source, note = model_source(facts)
    config, dropped = portable_config(facts.config, facts, source)
    if facts.staged:  # issue 40: one folder per run of the weights' chain
        return _write_chain(facts, target, source, note, dropped, dataset_root)
    (target / "train.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    if facts.is_lora:
        merge = {"model_name_or_path": source, "adapter_name_or_path": "output", "template": facts.template,
                 "finetuning_type": "lora", "export_dir": "merged"}
        (target / "merge.yaml").write_text(yaml.safe_dump(merge, sort_keys=False), encoding="utf-8")
    datasets = _dataset_notes(facts, dataset_root, target)
    (target / "requirements.txt").write_text(tool_pins(), encoding="utf-8")
    repro = Reproduction(model_source=source, base_model_note=note, datasets=datasets, dropped_keys=dropped,
                         commands=_commands(facts, datasets))
    script = ["#!/usr/bin/env bash", "# Rebuild the model without ftagent (LLaMA-Factory 0.9.5).",
              "set -euo pipefail", 'cd "$(dirname "$0")"', *repro.commands]
    (target / "run.sh").write_text("\n".join(script) + "\n", encoding="utf-8")
    (target / "run.sh").chmod(0o755)
    return repro
