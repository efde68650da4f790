"""The scenario: everything known before loop 0 (DESIGN §4), as one JSON-serialisable model.

:class:`ScenarioInfo` is what every component receives. It is built once per session by the scenario
builder (``FT_SCEN``) and stored in the session snapshot, so a resume never re-runs initialisation.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class ScenarioInfo(BaseModel):
    """Facts gathered before the first loop."""

    benchmark: str
    benchmark_description: str = ""
    user_target_scenario: str | None = None
    core_metric: str = "score"
    direction: str = "max"
    base_model: str  # as the user named it (builtin/tiny-qwen2, Qwen/Qwen2.5-7B-Instruct, /abs/path)
    base_model_path: str  # local folder with the weights
    model_info: dict[str, Any] = Field(default_factory=dict)
    datasets: list[str] = Field(default_factory=list)  # raw datasets selected for this benchmark
    dataset_root: str | None = None  # FT_FILE_PATH/datasets
    hardware: dict[str, Any] = Field(default_factory=dict)
    memory: dict[str, Any] = Field(default_factory=dict)
    memory_report: str = ""
    llama_factory_info_dir: str | None = None
    file_path: str
    workspace_root: str
    upper_data_size_limit: int = 2000
    time_limits: dict[str, float] = Field(default_factory=dict)
    baseline: dict[str, Any] = Field(default_factory=dict)  # split -> EvalResult as dict
    description_text: str = ""  # the rendered scenario text prompts use (never contains test data)
