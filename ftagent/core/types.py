"""Shared typed values: what the loop steps produce, and the scenario every component receives.

Everything here is a pydantic model, so it can be stored in a session snapshot as JSON and crosses
layer boundaries without re-validation. The component protocols live in
:mod:`ftagent.finetune.protocols`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from ftagent.core.errors import StepFailure


class Hypothesis(BaseModel):
    """What a loop will try, and why (output of the propose step)."""

    reason: str = ""
    hypothesis: str
    task: str = ""
    skip_data_processing: bool = False
    parent: int | None = None  # loop index of the experiment this one builds on (the SOTA)
    planner: str = ""
    plan: dict[str, Any] = Field(default_factory=dict)  # machine-readable plan (heuristic planner)


class CodeResult(BaseModel):
    """Files written into the loop workspace by the code step."""

    workspace: str
    files: dict[str, str] = Field(default_factory=dict)  # logical name -> path
    round: int = 1
    notes: str = ""


class ValidationReport(BaseModel):
    """Outcome of the validate step (data checks, key filtering, micro-batch run)."""

    passed: bool
    data_stats: dict[str, Any] = Field(default_factory=dict)
    dropped_keys: list[str] = Field(default_factory=list)
    injected_keys: list[str] = Field(default_factory=list)
    config_path: str | None = None  # the filtered, system-managed train.yaml
    micro_batch: dict[str, Any] = Field(default_factory=dict)
    failure: StepFailure | None = None


class TrainResult(BaseModel):
    """Outcome of the train step."""

    output_dir: str
    model_path: str  # what evaluation loads: full model dir, or adapter dir (see adapter_of)
    adapter_of: str | None = None  # base model path when model_path is a LoRA adapter
    finetuning_type: str = "full"
    template: str | None = None  # chat template used for training (evaluation must use the same)
    enable_thinking: bool | None = None
    loss_history: list[dict[str, Any]] = Field(default_factory=list)
    train_runtime_s: float | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    duration_s: float = 0.0


class EvalResult(BaseModel):
    """Scores of one model on one split of the target benchmark."""

    benchmark: str
    split: Literal["validation", "test"]
    core_metric: str
    direction: Literal["max", "min"] = "max"
    score: float | None
    metrics: dict[str, Any] = Field(default_factory=dict)  # {dataset: {metric: value}}
    error_samples: list[dict[str, Any]] = Field(default_factory=list)
    cached: bool = False
    run_dir: str | None = None
    duration_s: float = 0.0


class FeedbackResult(BaseModel):
    """Decision and advice after a loop."""

    decision: bool
    reason: str = ""
    error_type: str | None = None
    next_step: str = ""


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
