"""Build the LLaMA-Factory config ftagent runs: filter the planner's keys, inject system-managed ones.

The planner writes ``train.yaml``; before any run the validator (``ftagent.tools.llamafactory.validator``) passes it
through :func:`filter_config` (drop keys LLaMA-Factory does not know, and values of the wrong shape)
and :func:`manage_config` (paths, caching, reporting, CPU speed settings, warmup conversion). The
system-managed values are data: ``configs/llamafactory/defaults.yaml``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field

from ftagent.core.hardware import HardwareInfo
from ftagent.runners.fresh import FreshRun
from ftagent.tools.launch.profiles import precision_config, profile_of
from ftagent.tools.llamafactory.catalogue import LFCatalogue
from ftagent.tools.llamafactory.defaults import LFDefaults, load_lf_defaults
from ftagent.tools.llamafactory.planner_keys import EMPTY_REASON, REFUSED_REASON, is_empty, planner_may_set

DATASET_INFO = "dataset_info.json"
DATA_FILE = "data.json"
TRAIN_RUN = "train"  # the full training's own folder: WORKSPACE_PATH/<session>/train/loop_<n>/ (train_run.py)
#: keys removed from the planner's config: the system manages data and model paths
REMOVED_KEYS = ("eval_dataset", "tokenized_path", "adapter_name_or_path")
#: a path the session's tracker sets in the full run (tracking.CONFIG_KEYS): the planner's is removed
TRACKER_PATH_KEYS = ("logging_dir",)
#: the path keys :func:`manage_config` computes for each run, and what they point at (for the prompt)
PATH_KEYS = {"model_name_or_path": "the weights the loop starts from: the base model, or the parent loop's",
             "output_dir": "the loop's output folder",
             "dataset_dir": "the loop's workspace", "dataset": "this experiment's data.json"}


#: path keys the config prompt names as refused (every key that names a file, a folder or an account is:
#: planner_keys.py); written with a value, validation fails with CONFIG
REFUSED_SHOWN = ("resume_from_checkpoint", "adapter_name_or_path", "tokenized_path", "cache_dir")
REFUSED_WORDS = "(refused: a path)"
REFUSED_RULE = "(refused: a path; so is every key naming a file, a folder or an account: validation fails)"
#: the words for `stage`; the config prompt names the experiment's own stage in their place (relay round r2: a list
#: of every stage LLaMA-Factory has, "sft, dpo, kto; orpo and simpo", beside a session whose stages were sft, dpo, grpo)
STAGE_WORDS = "(the experiment's stage, from its proposal)"


class DroppedKey(BaseModel):
    """A key removed from the planner's config, and why."""

    key: str
    reason: str
    refused: bool = False  # a path (or account) key written with a value: validation fails with CONFIG

    def __str__(self) -> str:
        return f"{self.key} ({self.reason})"


def _shape_ok(value: Any, accepts_mapping: bool, accepts_list: bool) -> bool:
    if isinstance(value, dict):
        return accepts_mapping
    if isinstance(value, list):
        # LLaMA-Factory takes comma-separated strings for its own list-like keys; a flat list of
        # scalars is joined later, nested lists are junk.
        return accepts_list or all(isinstance(v, (str, int, float)) for v in value)
    return True


def training_output(workspace: Path) -> Path:
    """Where the full training of the loop workspace ``workspace`` writes its model (never inside it)."""
    return FreshRun.beside(workspace, TRAIN_RUN).output


def system_keys(defaults: LFDefaults) -> frozenset[str]:
    """The keys the system sets or removes in every LLaMA-Factory run (the filter passes them; manage_config
    replaces or removes them): the paths, the DeepSpeed config, defaults.yaml's ``system_managed``,
    ``eval_dataset``, the tracker's ``logging_dir``."""
    return frozenset({*PATH_KEYS, "deepspeed", "eval_dataset", *TRACKER_PATH_KEYS, *defaults.system_managed})


def filter_config(config: dict[str, Any], catalogue: LFCatalogue,
                  defaults: LFDefaults | None = None) -> tuple[dict[str, Any], list[DroppedKey]]:
    """Keep only keys LLaMA-Factory knows, that a plan may set, with values of an acceptable shape.

    A key that names a file, a folder or an account (every string-typed key that is neither a system key nor
    one of defaults.yaml's ``text_keys``: :mod:`~ftagent.tools.llamafactory.planner_keys`) is dropped, marked
    ``refused`` when it has a value (the validator then fails with CONFIG).

    Returns:
        ``(kept, dropped)``. Flat lists of scalars for string parameters become comma-separated strings
        (``lora_target: [q_proj, v_proj]`` → ``"q_proj,v_proj"``).
    """
    defaults = defaults or load_lf_defaults()
    text, system = frozenset(defaults.text_keys), system_keys(defaults)
    kept: dict[str, Any] = {}
    dropped: list[DroppedKey] = []
    for key, value in config.items():
        name = str(key)
        param = catalogue.parameters.get(name)
        if param is None:
            dropped.append(DroppedKey(key=name, reason="unknown to LLaMA-Factory"))
            continue
        if not planner_may_set(name, param, text_keys=text, system_keys=system):
            empty = is_empty(value)
            dropped.append(DroppedKey(key=name, reason=EMPTY_REASON if empty else REFUSED_REASON, refused=not empty))
            continue
        if not _shape_ok(value, param.accepts_mapping, param.accepts_list):
            kind = "mapping" if isinstance(value, dict) else "nested list"
            dropped.append(DroppedKey(key=name, reason=f"a {kind} is not valid for type {param.type}"))
            continue
        if isinstance(value, list) and not param.accepts_list:
            value = ",".join(str(v) for v in value)
        kept[name] = value
    return kept, dropped


def system_env(hardware: HardwareInfo, defaults: LFDefaults | None = None) -> dict[str, str]:
    """Environment variables of every LLaMA-Factory run (plus the CPU ones when there is no GPU)."""
    defaults = defaults or load_lf_defaults()
    env = dict(defaults.env)
    if hardware.gpu_count == 0:
        env.update({k: str(v) for k, v in defaults.cpu.get("env", {}).items()})
    return env


def estimate_total_steps(config: dict[str, Any], n_samples: int, n_devices: int = 1) -> int:
    """Optimizer steps of a run: ``max_steps`` when set, else epochs × ceil(samples / global batch)."""
    if int(config.get("max_steps", -1) or -1) > 0:
        return int(config["max_steps"])
    if config.get("max_samples"):
        n_samples = min(n_samples, int(config["max_samples"]))
    val = float(config.get("val_size") or 0.0)
    n_train = n_samples - (int(val) if val >= 1 else n_samples * val)
    batch = int(config.get("per_device_train_batch_size", 8)) * int(config.get("gradient_accumulation_steps", 1))
    batch *= max(1, n_devices)
    epochs = float(config.get("num_train_epochs", 3.0))
    return max(1, math.ceil(math.ceil(max(1.0, n_train) / batch) * epochs))


def convert_warmup(config: dict[str, Any], total_steps: int) -> dict[str, Any]:
    """Replace ``warmup_ratio`` by ``warmup_steps`` (the ratio is deprecated in transformers 5).

    An explicit ``warmup_steps`` wins; the ratio is dropped either way.
    """
    config = dict(config)
    ratio = config.pop("warmup_ratio", None)
    if ratio is not None and not config.get("warmup_steps"):
        config["warmup_steps"] = int(math.ceil(float(ratio) * total_steps))
    return config


def write_dataset_info(workspace: Path, dataset_name: str, data_file: str = DATA_FILE,
                       data_format: str = "alpaca") -> Path:
    """Register the workspace's ``data.json`` for LLaMA-Factory under ``dataset_name``.

    ``data_format`` is the stage's (:mod:`ftagent.core.stage_specs`): ``alpaca`` rows; ``pairwise`` rows
    (``ranking: true``, ``chosen``/``rejected`` columns: DPO, ORPO, SimPO); ``kto`` rows (``kto_tag``).
    The optional Alpaca columns ``system`` and ``history`` are mapped when rows carry them (a user's
    own data file or a data script may); unmapped, LLaMA-Factory would silently train without them.
    """
    from ftagent.datasets.trained_text import dataset_columns

    # llamafactory/data/parser.py DatasetAttr: ranking, chosen, rejected
    extra: dict[str, Any] = {"ranking": True} if data_format == "pairwise" else {}
    try:
        rows = json.loads((Path(workspace) / data_file).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        rows = []
    present = {key for row in rows if isinstance(row, dict) for key in row} if isinstance(rows, list) else set()
    columns = dataset_columns(data_format, present)  # one owner: what the contamination scan reads follows it
    info = {dataset_name: {"file_name": data_file, "formatting": "alpaca", **extra, "columns": columns}}
    path = Path(workspace) / DATASET_INFO
    path.write_text(json.dumps(info, indent=2), encoding="utf-8")
    return path


class ManagedConfig(BaseModel):
    """The final config and what the system changed."""

    config: dict[str, Any]
    injected: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)


def manage_config(
    config: dict[str, Any],
    *,
    workspace: Path,
    base_model_path: str,
    hardware: HardwareInfo,
    n_samples: int,
    defaults: LFDefaults | None = None,
    keep_warmup_ratio: bool = False,
    stage_keys: dict[str, Any] | None = None,
) -> ManagedConfig:
    """Inject the system-managed keys into a filtered config.

    Paths are never the planner's choice: ``model_name_or_path`` is the scenario's base model,
    ``output_dir`` is the training's own folder beside the workspace (``train/loop_<n>/run/output``), the
    dataset is the workspace's ``data.json`` registered as ``defaults.dataset_name`` (each run reads a copy:
    :mod:`ftagent.runners.fresh`). ``base_model_path`` is the weights the loop starts from (the base model,
    or the parent loop's weights for a stage that continues them: issue 40); ``stage_keys`` the keys the
    hypothesis's stage forces (``stage_config.stage_forced``: ``stage: dpo``, ``pref_loss: orpo`` ...; by
    default defaults.yaml's ``stage: sft``). Without a GPU the CPU settings of cpu-recipes §4.1 are added; on GPUs
    ``bf16`` (compute capability >= 8.0) or ``fp16``, what the memory plan assumes (16-bit weights).
    ``keep_warmup_ratio`` leaves ``warmup_ratio`` as the planner wrote it (transformers applies it to
    the real run's step count); otherwise it becomes ``warmup_steps`` counted on ``n_samples``, which
    is only right when ``n_samples`` is the full training set.
    """
    defaults = defaults or load_lf_defaults()
    workspace = Path(workspace).absolute()
    forced: dict[str, Any] = dict(defaults.system_managed)
    forced.update(stage_keys or {})
    forced.update(
        model_name_or_path=str(base_model_path),
        output_dir=str(training_output(workspace)),
        dataset_dir=str(workspace),
        dataset=defaults.dataset_name,
    )
    env = system_env(hardware, defaults)
    n_gpus = hardware.gpu_count
    if n_gpus == 0:
        forced.update(defaults.cpu.get("config", {}))
    else:  # mixed precision by compute capability: bf16 from 8.0, else fp16 (issue 30: fp32 before)
        forced.update(precision_config(profile_of(hardware).precision))
    notes: list[str] = []
    for key in REMOVED_KEYS:
        if key in config:
            notes.append(f"removed {key}: the system manages data and model paths")
    for key in TRACKER_PATH_KEYS:
        if key in config:
            notes.append(f"removed {key}: the session's tracker sets it (FT_REPORT_TO)")
    final = {k: v for k, v in config.items() if k not in (*REMOVED_KEYS, *TRACKER_PATH_KEYS)}
    injected = sorted(k for k, v in forced.items() if final.get(k, object()) != v)
    final.update(forced)
    if "warmup_ratio" in final and not keep_warmup_ratio:
        total = estimate_total_steps(final, n_samples, max(1, n_gpus))
        final = convert_warmup(final, total)
        notes.append(f"warmup_ratio converted to warmup_steps={final.get('warmup_steps')} "
                     f"(of ~{total} steps)")
        injected.append("warmup_steps")
    return ManagedConfig(config=final, injected=injected, env=env, notes=notes)


class ManagedKey(BaseModel):
    """A key the system sets (or removes) in every run, whatever the planner's train.yaml says."""

    key: str
    value: str  # what it becomes: a YAML value, or the words for a path or a rule

    def __str__(self) -> str:
        return f"`{self.key}: {self.value}`" if self.value[:1] not in "(<" else f"`{self.key}` {self.value}"


def _yaml_value(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def managed_keys(*, gpu: bool, defaults: LFDefaults | None = None) -> list[ManagedKey]:
    """Every key :func:`manage_config` (and the launch, the tracker) sets or removes, for the config prompt
    (issue 35: the planner was not told which keys are wasted); rendered from the same defaults and
    constants the manager uses, never a copy."""
    from typing import get_args

    from ftagent.tools.launch.profiles import Precision
    from ftagent.tools.llamafactory.tracking import CONFIG_KEYS

    defaults = defaults or load_lf_defaults()
    out = [ManagedKey(key=k, value=f"({what})") for k, what in PATH_KEYS.items()]
    out += [ManagedKey(key=k, value=STAGE_WORDS if k == "stage" else _yaml_value(v))
            for k, v in defaults.system_managed.items()]
    if gpu:
        first, *rest = sorted({k for p in get_args(Precision) for k in precision_config(p)})
        out.append(ManagedKey(key=first, value="(by the GPU: bf16 from compute capability 8.0, else fp16)"))
        out += [ManagedKey(key=key, value=f"(with {first})") for key in rest]
        out.append(ManagedKey(key="deepspeed", value="(from the memory plan of the method: Memory estimate, Launch)"))
    else:
        out += [ManagedKey(key=k, value=_yaml_value(v)) for k, v in defaults.cpu.get("config", {}).items()]
        out.append(ManagedKey(key="deepspeed", value="(removed: no GPU)"))
    out += [ManagedKey(key=k, value="(the session's tracker, FT_REPORT_TO)") for k in CONFIG_KEYS if k != "report_to"]
    out += [ManagedKey(key=k, value="(removed)") for k in REMOVED_KEYS if k not in REFUSED_SHOWN]
    out += [ManagedKey(key=k, value=REFUSED_RULE if i == 0 else REFUSED_WORDS) for i, k in enumerate(REFUSED_SHOWN)]
    return out


def micro_batch_config(config: dict[str, Any], debug_dir: Path, defaults: LFDefaults | None = None) -> dict[str, Any]:
    """A copy of the final config for the micro-batch run: a few steps, output in ``debug_dir``."""
    defaults = defaults or load_lf_defaults()
    micro = dict(config)
    micro.update(defaults.micro_batch)
    micro["output_dir"] = str(Path(debug_dir).absolute() / "output")
    if "warmup_steps" in micro:
        micro["warmup_steps"] = min(int(micro["warmup_steps"]), 1)
    micro.pop("num_train_epochs", None)
    return micro


def dump_yaml(config: dict[str, Any], path: Path) -> Path:
    """Write a config as YAML (keys in insertion order)."""
    Path(path).write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return Path(path)
