"""The system-managed LLaMA-Factory settings: ``configs/llamafactory/defaults.yaml`` as a typed model.

Read by the config manager (keys the system sets, CPU overrides, the micro-batch run), the trainer
(its environment) and the parameter catalogue (the patterns it leaves out of prompts).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field

from ftagent.core.paths import config_file

DEFAULTS_FILE = config_file("llamafactory", "defaults.yaml")


class LFDefaults(BaseModel):
    """The contents of ``configs/llamafactory/defaults.yaml``."""

    dataset_name: str = "ftagent_data"
    system_managed: dict[str, Any] = Field(default_factory=dict)
    cpu: dict[str, dict[str, Any]] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    micro_batch: dict[str, Any] = Field(default_factory=dict)
    prompt_exclude_patterns: list[str] = Field(default_factory=list)
    text_keys: list[str] = Field(default_factory=list)  # string-typed keys a plan may set (tools/llamafactory/planner_keys.py)


def load_lf_defaults(path: Path | None = None) -> LFDefaults:
    """Read the system-managed settings (default: ``configs/llamafactory/defaults.yaml``)."""
    path = Path(path or DEFAULTS_FILE)
    return LFDefaults(**(yaml.safe_load(path.read_text(encoding="utf-8")) or {}))
