"""What every validation shares (the LLaMA-Factory stages' and GRPO's): file names, the failure report,
the list of changes made to the planner's config, and the start weights a run trains from (issue 40).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ftagent.core.errors import ErrorType, StepFailure
from ftagent.core.types import CodeResult, ValidationReport
from ftagent.integrity.movement import refusal
from ftagent.runners.base import Mount

if TYPE_CHECKING:
    from ftagent.core.types import ScenarioInfo

STAGE = "validate"
CONFIG_FILE = "train.yaml"
ORIGINAL_CONFIG = "train.orig.yaml"
DEBUG_DIR = "debug"
MANAGED_MARKER = ".train.yaml.managed"  # sha256 of the train.yaml the validator wrote
# the validation runs' own folders, beside the workspace (ftagent.runners.fresh): validate/loop_<n>/micro, .../template
VALIDATE_RUN = "validate"
MICRO_RUN = "micro"


def _fail(report: ValidationReport, error_type: ErrorType, message: str, *, log_tail: str = "",
          suggestion: str = "", details: dict[str, Any] | None = None) -> ValidationReport:
    report.passed = False
    report.failure = StepFailure(stage=STAGE, error_type=error_type, message=message, log_tail=log_tail,
                                 suggestion=suggestion, details=details or {})
    return report


def refuse_paths(original: dict[str, Any], dropped: list[Any], report: ValidationReport) -> bool:
    """Fail ``report`` with CONFIG when the planner's config set a key only the system may set (a path, a file, an
    account: :mod:`~ftagent.tools.llamafactory.planner_keys`); True when it did."""
    from ftagent.tools.llamafactory.planner_keys import refused_message

    refused = [(d.key, original.get(d.key)) for d in dropped if getattr(d, "refused", False)]
    if not refused:
        return False
    message, suggestion = refused_message(refused)
    _fail(report, ErrorType.CONFIG, message, suggestion=suggestion, details={"refused_keys": [k for k, _ in refused]})
    return True


_PATH_KEYS = {"model_name_or_path", "output_dir", "dataset_dir", "dataset"}


def _short(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()
    return text if len(text) <= 80 else text[:77] + "..."


def config_changes(original: dict[str, Any], final: dict[str, Any], dropped: list[Any],
                   notes: list[str], bookkeeping: set[str] | None = None) -> list[str]:
    """Every difference between the planner's ``train.yaml`` and the one that runs, in words.

    Dropped keys carry their reason; paths and ``bookkeeping`` keys the planner never writes are
    named together in one entry; other injected or changed keys show the value
    (``changed bf16: true -> false (system-managed)``).
    """
    changes = [f"dropped {d.key} ({d.reason})" for d in dropped]
    gone = {str(d.key) for d in dropped}
    changes += notes
    quiet = _PATH_KEYS | set(bookkeeping or ())
    added = [k for k in final if k not in original and k in quiet]
    if added:
        changes.append(f"set by the system (paths and bookkeeping, leave them out): {', '.join(added)}")
    for key, value in final.items():
        if key not in original and key in quiet:
            continue
        if key not in original:
            changes.append(f"set {key}" + ("" if key in _PATH_KEYS else f": {_short(value)}") + " (system-managed)")
        elif original[key] != value and key not in gone:
            if isinstance(original[key], list) and isinstance(value, str):
                changes.append(f"{key}: the list was written as {_short(value)}")
            else:
                what = "" if key in _PATH_KEYS else f": {_short(original[key])} -> {_short(value)}"
                changes.append(f"changed {key}{what} (system-managed)")
    for key in original:
        if key not in final and key not in gone and not any(key in n for n in notes):
            changes.append(f"removed {key} (system-managed)")
    return changes


def start_path(code: CodeResult, scenario: ScenarioInfo) -> str:
    """The weights the loop trains from: the system's start model (issue 40), else the base model."""
    return code.start.path if code.start is not None else scenario.base_model_path


def start_mounts(start: str, scenario: ScenarioInfo) -> list[Mount]:
    """Read-only mounts of the start weights (and of the base model, whose tokenizer the data step reads)."""
    paths = dict.fromkeys([str(Path(start)), str(Path(scenario.base_model_path))])
    return [Mount(source=Path(p)) for p in paths]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _managed_marker(workspace: Path) -> str | None:
    path = workspace / MANAGED_MARKER
    return path.read_text(encoding="utf-8").strip() if path.is_file() else None


def refuse_unbounded(config: dict[str, Any], report: ValidationReport) -> None:
    """CONFIG failure when the integrity guard could not bound how far this run moves the weights
    (:func:`ftagent.integrity.movement.refusal`: an optimizer without a per-step bound, GaLore, PiSSA ...)."""
    refused = refusal(config)
    if refused is not None:
        _fail(report, ErrorType.CONFIG, refused[0], suggestion=refused[1])
