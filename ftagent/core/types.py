"""Shared typed values: what the loop steps produce, and the scenario every component receives.

Everything here is a pydantic model, so it can be stored in a session snapshot as JSON and crosses
layer boundaries without re-validation. The component protocols live in
:mod:`ftagent.finetune.protocols`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from ftagent.core.approved import Approved
from ftagent.core.errors import StepError, StepFailure
from ftagent.core.forecast_arithmetic import Forecast
from ftagent.core.hardware import HardwareInfo
from ftagent.core.holdout import Holdout
from ftagent.core.slots import Slot


class SamplingPlan(BaseModel):
    """How the system samples the start model on training prompts before a preference or RL stage
    (issue 40): ``samples_per_prompt`` answers to each of at most ``max_prompts`` prompts at
    ``temperature``, scored by the benchmark's own evaluator."""

    samples_per_prompt: int = Field(4, ge=1, le=64)
    temperature: float = Field(1.0, gt=0.0, le=2.0)
    max_prompts: int = Field(128, ge=1, le=5000)


class Hypothesis(BaseModel):
    """What a loop will try, and why (output of the propose step)."""

    reason: str = ""
    hypothesis: str
    task: str = ""
    skip_data_processing: bool = False
    parent: int | None = None  # loop index of the experiment this one builds on (the SOTA)
    planner: str = ""
    plan: dict[str, Any] = Field(default_factory=dict)  # machine-readable plan (heuristic planner)
    # issue 40: the training stage (ftagent.core.stage_specs, one of FT_STAGES) and the loop whose trained
    # weights it starts from (None: the base model); SFT -> DPO -> GRPO chains follow weights_from
    stage: str = "sft"
    weights_from: int | None = None
    sampling: SamplingPlan | None = None  # a stage that needs samples: how many, how hot (None: the defaults)
    # the training rows the proposal plans (issue 43): the config prompt sizes the run by them before the data
    # exists (None: the planner named no count; the heuristic planner)
    rows: int | None = None

    @field_validator("stage", mode="before")
    @classmethod
    def _known_stage(cls, value: Any) -> Any:
        """A stage ftagent knows (any case); FT_STAGES is checked where the settings are known (propose step)."""
        from ftagent.core.stage_specs import stage_spec

        if isinstance(value, str):
            value = value.strip().lower()
            stage_spec(value)  # ValueError with a did-you-mean
        return value


class StartModel(BaseModel):
    """The weights a loop trains from, as the system resolved them (never the planner's path)."""

    path: str  # a full model folder (the base model, a parent's full output, or a parent's adapter merged)
    loop: int | None = None  # the loop whose weights these are (None: the base model)
    chain: list[str] = Field(default_factory=list)  # the stages that made these weights (base: [])
    merged_adapter: str | None = None  # the parent's LoRA adapter merged into ``path`` (None: no merge)


class RewardSpec(BaseModel):
    """The benchmark's own scorer as the GRPO reward (issue 40), resolved by the system from the benchmark
    (never written by the planner): its evaluator and answer post-processor (``module:Name``, run in the
    tool env by ``ftagent.tools.opencompass.oc_reward.AnswerScorer``) with their keyword arguments."""

    benchmark: str
    evaluator: str
    evaluator_kwargs: dict[str, Any] = Field(default_factory=dict)
    postprocessor: str | None = None
    postprocessor_kwargs: dict[str, Any] = Field(default_factory=dict)
    rule: str = ""  # the benchmark's answer rule, in words


class SamplingResult(BaseModel):
    """What the sampling step wrote (``samples.jsonl`` in the loop workspace) and how the answers scored."""

    path: str
    model: str  # the model sampled (folder; an adapter is sampled on its base)
    source: str  # where the training prompts came from
    prompts: int
    samples: int
    correct: int  # samples the benchmark's evaluator scored right
    prompts_mixed: int  # prompts with at least one right and one wrong sample (a pair, a GRPO signal)
    prompts_all_right: int = 0
    temperature: float
    samples_per_prompt: int
    duration_s: float = 0.0

    @property
    def reward_mean(self) -> float:
        return self.correct / self.samples if self.samples else 0.0

    def line(self) -> str:
        """One line for events, prompts and the report."""
        return (f"{self.samples} samples of {self.prompts} training prompts at temperature {self.temperature:g}: "
                f"{self.correct} right ({100 * self.reward_mean:.1f} %), {self.prompts_mixed} prompts with right and "
                f"wrong answers, {self.prompts_all_right} all right")


class CodeResult(BaseModel):
    """Files written into the loop workspace by the code step."""

    workspace: str
    files: dict[str, str] = Field(default_factory=dict)  # logical name -> path
    round: int = 1
    notes: str = ""
    plan: dict[str, Any] = Field(default_factory=dict)  # machine-readable plan actually written (heuristic recipe)
    # set by the workflow after the coder returns (the hypothesis's stage, the weights the system resolved)
    stage: str = "sft"
    start: StartModel | None = None
    reward: RewardSpec | None = None  # GRPO: the benchmark's scorer, resolved by the system


class ValidationReport(BaseModel):
    """Outcome of the validate step (data checks, key filtering, micro-batch run)."""

    passed: bool
    data_stats: dict[str, Any] = Field(default_factory=dict)
    dropped_keys: list[str] = Field(default_factory=list)
    injected_keys: list[str] = Field(default_factory=list)
    changes: list[str] = Field(default_factory=list)  # every change made to the planner's config, in words
    config_path: str | None = None  # the filtered, system-managed train.yaml
    micro_batch: dict[str, Any] = Field(default_factory=dict)
    failure: StepFailure | None = None
    # what validation approved, frozen outside the workspace with its hashes (issue 39 item 2; None: not passed,
    # or a snapshot written before ftagent froze approvals)
    approved: Approved | None = None


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
    stage: str = "sft"  # issue 40: the stage that trained it
    chain: list[str] = Field(default_factory=list)  # the stages that made these weights, this one last


class AnswerProfile(BaseModel):
    """How a model answered one split: scored items, wrong ones, and the answers it gave most often."""

    items: int  # scored answers: benchmark items × runs (FT_BENCHMARK_NUM_RUNS)
    wrong: int
    top: dict[str, int] = Field(default_factory=dict)  # answer (as scored, clipped) -> items, repeated ones only
    top_wrong: dict[str, int] = Field(default_factory=dict)  # the same among the answers scored wrong
    runs: int = 1  # answers per item


class EvalResult(BaseModel):
    """Scores of one model on one split of the target benchmark."""

    benchmark: str
    split: Literal["validation", "test", "full"]  # full: the final evaluation (every item outside validation)
    core_metric: str
    direction: Literal["max", "min"] = "max"
    score: float | None
    metrics: dict[str, Any] = Field(default_factory=dict)  # {dataset: {metric: value}}
    error_samples: list[dict[str, Any]] = Field(default_factory=list)
    answers: AnswerProfile | None = None  # how the model answered (None: not read)
    items_file: str | None = None  # per-item scores, ftagent.core.stats.ItemScores JSON (None: not kept)
    cached: bool = False
    run_dir: str | None = None
    duration_s: float = 0.0
    # what decided this split's score in the rendered OpenCompass config (datasets, prompts, scorers), hashed by
    # ftagent when it rendered it (ftagent.integrity.eval_config.split_digests); kept in the evaluation cache
    config_sha256: str | None = None


class FeedbackResult(BaseModel):
    """Decision and advice after a loop."""

    decision: bool
    reason: str = ""
    error_type: str | None = None
    next_step: str = ""


class ModelInfo(BaseModel):
    """What the planner and the memory estimator need to know about a base model."""

    name: str
    path: str
    architecture: str = ""
    model_type: str = ""
    num_parameters: int | None = None
    parameter_source: str = "unknown"  # safetensors | config | unknown
    max_position_embeddings: int | None = None
    vocab_size: int | None = None
    hidden_size: int | None = None
    num_hidden_layers: int | None = None
    torch_dtype: str | None = None
    has_think_token: bool = False
    template: str | None = None  # LLaMA-Factory chat template name (chatml ...), when known
    readme_excerpt: str = ""

    def to_markdown(self) -> str:
        """A short markdown block for prompts and reports."""
        params = f"{self.num_parameters:,} ({self.parameter_source})" if self.num_parameters else "unknown"
        lines = [f"### Base model `{self.name}`",
                 f"- architecture: {self.architecture or '?'} (model_type {self.model_type or '?'})",
                 f"- parameters: {params}",
                 f"- layers: {self.num_hidden_layers}, hidden size: {self.hidden_size}, vocab: {self.vocab_size}",
                 f"- max positions: {self.max_position_embeddings}, dtype: {self.torch_dtype}",
                 f"- has a `<think>` token: {'yes' if self.has_think_token else 'no'}"]
        if self.readme_excerpt:
            lines += ["", self.readme_excerpt]
        return "\n".join(lines)


class SplitResults(BaseModel):
    """One evaluation of several splits: a result or a failure per requested split."""

    results: dict[str, EvalResult] = Field(default_factory=dict)
    failures: dict[str, StepFailure] = Field(default_factory=dict)

    def require(self, split: str) -> EvalResult:
        """The result of ``split``; its failure raised as :class:`StepError` when it failed."""
        if split in self.results:
            return self.results[split]
        f = self.failures.get(split)
        if f is None:
            raise KeyError(split)
        raise StepError(f.message, error_type=f.error_type, log_tail=f.log_tail, suggestion=f.suggestion,
                        details=f.details)

    __getitem__ = require

    def __contains__(self, split: object) -> bool:
        return split in self.results


class TimeLimits(BaseModel):
    """Per-run time limits of the session, in seconds."""

    full_timeout: float
    data_processing_timeout: float
    benchmark_timeout: float


class EvalDecoding(BaseModel):
    """How evaluation generates answers (``configs/models.yaml`` for the base model, the benchmark's cap)."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 1
    max_out_len: int | None = None  # new tokens per answer: the smaller of the benchmark's and the model's
    max_seq_len: int | None = None  # prompt + answer
    enable_thinking: bool = False
    sampling: bool = False  # False: greedy (the HF backend always decodes greedily; vLLM samples when T > 0)


class Scores(BaseModel):
    """One model's evaluation on both splits. ``test`` is for the report only: no planner reads it."""

    validation: EvalResult | None = None
    test: EvalResult | None = None
    test_error: str | None = None  # why the test run failed (report/UI only, never the agent)


class ScenarioInfo(BaseModel):
    """Facts gathered before the first loop."""

    @model_validator(mode="before")
    @classmethod
    def _default_model_info(cls, data: Any) -> Any:
        """Without a model card, the card of the named model folder (name and path only)."""
        if isinstance(data, dict) and data.get("model_info") is None and "base_model" in data:
            data = {**data, "model_info": {"name": data["base_model"], "path": data.get("base_model_path", "")}}
        return data

    benchmark: str
    benchmark_description: str = ""
    user_target_scenario: str | None = None
    core_metric: str = "score"
    direction: str = "max"
    base_model: str  # as the user named it (builtin/tiny-qwen2, Qwen/Qwen2.5-7B-Instruct, /abs/path)
    base_model_path: str  # local folder with the weights
    model_info: ModelInfo
    datasets: list[str] = Field(default_factory=list)  # raw datasets selected for this benchmark
    dataset_root: str | None = None  # FT_FILE_PATH/datasets
    hardware: HardwareInfo = Field(default_factory=HardwareInfo)
    memory: dict[str, Any] = Field(default_factory=dict)  # MemoryReport as JSON (tools.llamafactory.memory)
    # the session's LaunchPlan as JSON (tools.launch.plan; its .memory is `memory`): every train.yaml is
    # checked against it (tools.launch.train_rules); {} when config.json could not be planned
    launch_plan: dict[str, Any] = Field(default_factory=dict)
    slot: Slot | None = None  # the slot a trial's view of the scenario is for (K trials at once); None: all of it
    memory_report: str = ""
    llama_factory_info_dir: str | None = None
    llama_factory_version: str | None = None
    file_path: str
    workspace_root: str
    upper_data_size_limit: int = 2000
    time_limits: TimeLimits | None = None
    baseline: EvalResult | None = None  # the base model on the validation split (the test score: trace only)
    description_text: str = ""  # the rendered scenario text prompts use (never contains test data)
    parameter_catalogue: str = ""  # LLaMA-Factory's arguments for the config prompt (grouped, token-bounded)
    force_think_token: bool = False  # outputs are "<think>reasoning</think>answer" (FT_FORCE_THINK_TOKEN)
    eval_decoding: EvalDecoding | None = None  # how the evaluation generates (None: not known yet)
    forecast: Forecast | None = None  # the session's forecast (finetune.session_forecast), recorded after the baseline
    # the session's own frozen copy of its benchmark items (ftagent.benchmarks.frozen, issue 39 item 6): the root
    # every evaluation, scan and guard of the session reads (``<root>/<benchmark>``), and its content digest
    benchmark_root: str | None = None
    benchmark_digest: str | None = None
    holdout: Holdout | None = None  # validation's feedback and selection parts (ftagent.core.holdout, issue 39.5)

    def items_root(self) -> Path:
        """Where the session's benchmark items are: its frozen copy; ``FT_FILE_PATH/benchmarks`` for a scenario
        recorded before copies existed (an older snapshot)."""
        from ftagent.core.paths import benchmarks_dir

        return Path(self.benchmark_root) if self.benchmark_root else benchmarks_dir(self.file_path)
