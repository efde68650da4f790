"""Settings for ftagent, read from the process environment and `.env` (pydantic-settings).

Three groups, each a small settings class:

* :class:`FTSettings` — every ``FT_*`` setting (the fine-tuning scenario, budgets, paths, components).
* :class:`LLMSettings` — the planner's LLM (``CHAT_MODEL``, ``OPENAI_API_KEY`` ...), no prefix.
* :class:`PathSettings` — ``LOG_PATH`` (alias ``LOG_TRACE_PATH``) and ``WORKSPACE_PATH``.

Precedence: explicit arguments > process environment > ``.env`` in the working directory > defaults.
`.env` is validated by :func:`ftagent.core.envfile.load_env_file` before settings are read (a malformed file
is a user error, exit code 2). Env var names are case-insensitive, as in the reference.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from ftagent.core.errors import UserInputError
from ftagent.core.redact import mask_obj, register_secret
from ftagent.core.stage_specs import DEFAULT_STAGES, parse_stages

# a benchmark description (--benchmark-description, a YAML's description:) is copied into every prompt,
# event and snapshot: at most this many characters (about 2,000 tokens; a built-in one has under 800)
MAX_DESCRIPTION_CHARS = 8000


def _cwd_path(*parts: str) -> Path:
    return Path.cwd().joinpath(*parts)


class FTSettings(BaseSettings):
    """The ``FT_*`` settings of the fine-tuning scenario (reference §2.1, minus the unused ones)."""

    model_config = SettingsConfigDict(
        env_prefix="FT_", env_file=".env", extra="ignore", case_sensitive=False, populate_by_name=True
    )

    # --- target ---------------------------------------------------------------------------------
    target_benchmark: str | None = Field(None, description="benchmark key (e.g. aime25) or a benchmark YAML file")
    benchmark_description: str | None = Field(None, max_length=MAX_DESCRIPTION_CHARS,
                                              description="free text; default: the benchmark YAML's description")
    base_model: str | None = Field(None, description="HF repo id or builtin/<name>")
    dataset: str | None = Field(None, description="one raw dataset name, 'all', or your own data file "
                                             "(.jsonl/.json/.csv/.parquet, Alpaca or ShareGPT)")
    user_target_scenario: str | None = Field(None, description="free-text target carried into prompts")
    upper_data_size_limit: int = Field(2000, gt=0, description="max training samples")

    # --- components (dotted paths "module:Object") -----------------------------------------------
    scen: str = "ftagent.finetune.scenario:FinetuneScenario"
    proposer: str = "auto"
    coder: str = "auto"
    validator: str = "ftagent.tools.llamafactory.validator:LlamaFactoryValidator"
    trainer: str = "ftagent.tools.llamafactory.trainer:LlamaFactoryTrainer"
    evaluator: str = "ftagent.tools.opencompass.evaluator:OpenCompassEvaluator"
    feedback: str = "auto"
    planner: str = Field(  # checked against the planner registry at start-up (planners/registry.py)
        "auto", description="auto | llm | heuristic | a registered plug-in; auto = llm when CHAT_MODEL and a key "
        "are configured, else heuristic"
    )

    # --- runners -------------------------------------------------------------------------------
    env_type: str = Field(
        "local",
        validation_alias=AliasChoices("FT_ENV_TYPE", "FT_Coder_CoSTEER_env_type", "env_type"),
        description="runner for heavy commands: local | conda | docker | a plug-in 'package.module:Runner'",
    )
    sandbox: Literal["auto", "bwrap", "none"] = "auto"
    allow_unsandboxed: bool = Field(
        False, description="let LLM-written code run without bubblewrap (local/conda runners); default: exit 2")
    tools_env: Path | None = Field(None, description="tool virtualenv (default FT_FILE_PATH/envs/tools)")
    docker_base_image: str | None = Field(
        None, description="base of the docker tool image (default: ftagent-base:bookworm when built, "
                          "else python:3.11-slim-bookworm)")
    docker_network: str = Field("host", description="containers' network: host (reaches LLM servers on the "
                                                    "host's loopback), bridge or none")
    docker_build_network: str = Field("host", description="network of image builds (host reaches a local proxy)")
    docker_shm_size: str = Field("16g", description="/dev/shm size of tool containers")
    docker_mem_limit: str | None = Field(None, description="memory limit of tool containers, e.g. 32g")
    docker_ca_bundle: Path | None = Field(
        None, description="extra CA bundle baked into images (default: the host's PIP_CERT/REQUESTS_CA_BUNDLE)")
    docker_wheels_dir: Path | None = Field(
        None, description="local torch/torchvision wheels for image builds (default: pip's find-links)")

    # --- time budgets (seconds) ----------------------------------------------------------------
    full_timeout: int = Field(360000, gt=0)
    data_processing_timeout: int = Field(3600, gt=0)
    debug_data_processing_timeout: int = Field(1200, gt=0)
    micro_batch_timeout: int = Field(1800, gt=0)
    benchmark_timeout: int = Field(0, ge=0, description="0 = 7 days")

    # --- training: early stop and experiment tracking ----------------------------------------------
    early_stop: bool = Field(True, description="stop a full training run whose loss diverges (NaN/Inf, or a "
                                               "sustained rise above its best)")
    early_stop_loss_ratio: float = Field(
        3.0, gt=1.0, description="a logged loss above this × the run's best loss so far counts as diverging")
    early_stop_patience_steps: int = Field(
        20, ge=0, description="optimizer steps the loss must stay above that bar before the run is stopped")
    cpu_offload: bool = Field(
        False, description="allow DeepSpeed ZeRO-3 CPU offload for a full fine-tune that does not fit the GPUs (its "
                           "optimizer step runs on the CPU: torch AdamW, several times slower, unless DeepSpeed's "
                           "CPU Adam is built in the tool env, which allows offload by itself)")
    report_to: Literal["none", "tensorboard", "wandb", "mlflow"] = Field(
        "none", description="experiment tracker of full training runs (LLaMA-Factory report_to); one run per "
                            "loop named <session>-loop<n>, with ftagent's validation score logged to it")

    # --- evaluation ------------------------------------------------------------------------------
    judge_model: str = "gpt-5.1"
    judge_api_key: SecretStr | None = Field(
        None, description="the LLM judge's key; a session hands OpenCompass only its judge gateway's URL and token "
                          "(judge calls recorded as stage judge, counted in FT_LLM_BUDGET_USD)")
    judge_api_base: str | None = None
    judge_retry: int = Field(10, ge=1, description="tries of each LLM-judge request (OpenCompass judge_cfg retry; "
                             "OpenCompass makes no call at all with 0)")
    eval_backend: Literal["auto", "hf", "vllm", "vllm-server"] = Field(
        "auto", description="inference backend of evaluations: auto = vLLM in the eval env, else a vLLM server "
                            "from FT_VLLM_ENV (GPU, local/conda runner), else HF; a forced one that cannot work "
                            "fails the evaluation")
    benchmark_limit: int | None = Field(None, gt=0, description="cap validation and test size")
    final_eval: Literal["full", "split", "none"] = Field(
        "full", description="at the end of a session, score the best and the base model on every benchmark item "
                            "outside validation (full), on the test split only (split), or not at all (none); "
                            "docs/benchmarks.md, Final evaluation")
    benchmark_num_runs: int = Field(1, gt=0, description=(
        "generations per item; > 1: the core score is OpenCompass's `<metric> (n runs average)` (greedy HF "
        "runs agree; see docs/benchmarks.md, Runs and pass@k)"))
    benchmark_pass_k: int | None = Field(None, gt=0, description=(
        "`k` of OpenCompass's G-Pass@k / mG-Pass@k metrics (needs `FT_BENCHMARK_NUM_RUNS` ≥ k > 1), "
        "reported next to the core metric"))
    benchmark_paths: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        description="directories scanned for more benchmark YAML files (separated by ':')")
    sota_min_delta: float = Field(0.0, ge=0.0, description="margin a candidate must beat SOTA by")
    sota_rule: Literal["interval", "delta"] = Field(
        "interval", description="interval: a candidate becomes SOTA only when the lower bound of the 95 % paired "
                                "bootstrap interval of its validation gain is above FT_SOTA_MIN_DELTA (delta rule "
                                "when no interval exists); delta: its point gain is (docs/benchmarks.md)")
    stop_at_maximum: bool = Field(
        True, description="end the session once the best loop scores the metric's maximum on validation: no later "
                          "loop could replace it (every best rule needs a gain; a tie keeps the best). false: run "
                          "every loop of --loop-n (docs/llm.md, A saturated best)")
    selection_share: float = Field(
        0.7, gt=0.0, lt=1.0, description="share of each validation sub-dataset's items in the selection part: never "
                                         "shown to the planner, it alone decides SOTA; the rest is the feedback part "
                                         "(docs/benchmarks.md, Feedback and selection)")
    holdout_seed: int = Field(39005, description="seed of the validation split into feedback and selection parts "
                                                 "(recorded in the session; the same for every session by default)")
    stages: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(DEFAULT_STAGES),
        description="training stages the planner may use, comma-separated: sft, dpo, kto, orpo, simpo, grpo "
                    "(docs/training.md, Stages); a preference or GRPO loop starts from the best loop's weights")
    guard_benchmarks: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="forgetting guard: benchmark keys scored on a sample for the base model "
                                          "and each candidate that would become SOTA, e.g. mmlu,gsm8k,humaneval "
                                          "(none: no guard; docs/benchmarks.md, Forgetting guard)")
    guard_sample: int = Field(50, gt=0, description="forgetting guard: items per (sub-)dataset of each guard "
                                                    "benchmark (the seeded validation split's first ones)")
    guard_max_drop: float = Field(5.0, ge=0.0, description="forgetting guard: a candidate is kept from SOTA when "
                                                           "the upper bound of its 95 % paired interval against the "
                                                           "base on a guard benchmark is below -FT_GUARD_MAX_DROP "
                                                           "points")

    # --- data processing -------------------------------------------------------------------------
    strong_models: Annotated[list[str], NoDecode] = ["gpt-5", "gpt-5.1"]
    weak_models: Annotated[list[str], NoDecode] = ["gpt-4o-mini", "o4-mini", "gpt-5-mini"]
    api_max_workers: int = Field(8, gt=0, description="LLM requests a data script may have in flight "
                                                      "(enforced by the session's LLM gateway)")
    coder_max_loop: int = Field(10, gt=0)
    parallel_trials: str = Field(
        "1", description="trials at once in one session: 1 (one after another), K, or auto (as many as the slots "
                         "the launch plan gives: GPUs per trial, else one CPU core each); docs/distributed.md")
    slot_executor: Literal["local", "ray"] = Field(
        "local", description="who lends the slots of trials at once: local (this machine), or ray (a Ray task holds "
                             "each trial's GPUs or cores on this node, so other Ray work never shares them)")
    ray_address: str = Field("auto", description="FT_SLOT_EXECUTOR=ray: the Ray cluster (auto, host:port)")
    ray_gpu_resource: str = Field("GPU", description="FT_SLOT_EXECUTOR=ray: the Ray resource a slot's GPUs are "
                                                      "reserved as (GPU, or a custom one)")
    force_think_token: bool = False
    llm_budget_usd: float | None = Field(
        None, gt=0, description="USD cap on LLM spend: planner and data-script calls (unknown prices are not counted)")
    prompt_token_budget: int = Field(
        24000, ge=2000,
        description="tokens one planner prompt may use (default fits a 32k-context model with room to answer); "
                    "over it, the least useful sections are left out whole",
    )

    # --- ftagent mcp ---------------------------------------------------------------------------------
    mcp_token: SecretStr | None = Field(
        None, description="bearer token `ftagent mcp --http` requires of every request (needed to listen beyond "
                          "127.0.0.1; docs/agents.md)")

    # --- paths -----------------------------------------------------------------------------------
    file_path: Path = Field(default_factory=lambda: _cwd_path("git_ignore_folder", "finetune_files"))

    @field_validator("strong_models", "weak_models", "guard_benchmarks", mode="before")
    @classmethod
    def _json_or_csv_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = value.strip()
            return json.loads(value) if value.startswith("[") else [v.strip() for v in value.split(",") if v]
        return value

    @field_validator("stages", mode="before")
    @classmethod
    def _stage_list(cls, value: Any) -> Any:
        """``FT_STAGES``: comma-separated (or a JSON list of) known stage names; an unknown one is refused
        with a did-you-mean (exit 2 at start-up)."""
        if isinstance(value, str) and value.strip().startswith("["):
            value = json.loads(value)
        return parse_stages(value) if isinstance(value, (str, list, tuple)) else value

    @field_validator("benchmark_paths", mode="before")
    @classmethod
    def _path_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            import os

            value = value.strip()
            return json.loads(value) if value.startswith("[") else [v for v in value.split(os.pathsep) if v.strip()]
        return value

    @field_validator("parallel_trials", mode="before")
    @classmethod
    def _parallel(cls, value: Any) -> Any:
        text = str(value).strip().lower()
        if text == "auto" or (text.isdigit() and int(text) >= 1):
            return text
        raise ValueError("expected a whole number >= 1 or auto")

    @field_validator("env_type", "planner", mode="before")
    @classmethod
    def _component_name(cls, value: Any) -> Any:
        """A registered name (any case) or a plug-in's dotted path ``package.module:Object`` (kept as is).

        Which names exist is known only to the registries above this layer (runners/factory.py,
        planners/registry.py): they reject an unknown name at start-up with a did-you-mean (exit 2).
        """
        if not isinstance(value, str):
            return value
        value = value.strip()
        return value if ":" in value else value.lower()

    @property
    def benchmark_timeout_s(self) -> int:
        """OpenCompass wall-clock limit; 0 means 7 days, as in the reference."""
        return self.benchmark_timeout or 7 * 86400


class LLMSettings(BaseSettings):
    """The planner LLM, reached through LiteLLM. No prefix (``CHAT_MODEL``, ``OPENAI_API_KEY`` ...)."""

    model_config = SettingsConfigDict(env_file=".env", extra="ignore", case_sensitive=False)

    chat_model: str | None = None
    chat_temperature: float = 0.5
    chat_stream: bool = True
    chat_max_tokens: int | None = None
    openai_api_key: SecretStr | None = None
    openai_api_base: str | None = None
    embedding_model: str = Field("text-embedding-3-small",
                                 description="the embedding model data scripts may use (the gateway's /v1/embeddings)")
    max_retry: int = Field(10, ge=0)
    retry_wait_seconds: float = Field(1.0, ge=0)
    llm_timeout_seconds: float = Field(600.0, gt=0)
    chat_model_map: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @field_validator("chat_model_map", mode="before")
    @classmethod
    def _parse_map(cls, value: Any) -> Any:
        if isinstance(value, str):
            return json.loads(value) if value.strip() else {}
        return value

    @property
    def configured(self) -> bool:
        """True when an LLM planner can be used (a model name, and a key or a custom base URL)."""
        return bool(self.chat_model) and (self.openai_api_key is not None or bool(self.openai_api_base))


class PathSettings(BaseSettings):
    """Where sessions (logs, snapshots) and workspaces go."""

    model_config = SettingsConfigDict(env_file=".env", extra="ignore", case_sensitive=False)

    log_path: Path = Field(
        default_factory=lambda: _cwd_path("log"),
        validation_alias=AliasChoices("LOG_PATH", "LOG_TRACE_PATH"),
    )
    workspace_path: Path = Field(
        default_factory=lambda: _cwd_path("git_ignore_folder", "workspace"),
        validation_alias=AliasChoices("WORKSPACE_PATH"),
    )


class Settings:
    """All settings groups together; build once per command with :func:`load_settings`."""

    def __init__(self, ft: FTSettings, llm: LLMSettings, paths: PathSettings) -> None:
        self.ft = ft
        self.llm = llm
        self.paths = paths
        # runtime only (never read from the environment, never dumped): the session's judge gateway,
        # an object with ``url``, ``token`` and ``refused`` (LLMGateway.for_judge); None = none running
        self.judge_route: Any = None
        # every configured secret is masked in whatever is persisted from now on (ftagent.core.redact)
        for group in (ft, llm):
            for value in vars(group).values():
                if isinstance(value, SecretStr):
                    register_secret(value.get_secret_value())

    def redacted(self) -> dict[str, Any]:
        """A JSON-safe dump with secrets masked (for snapshots, events and logs), URL credentials included."""
        masked: dict[str, Any] = mask_obj({
            "ft": json.loads(self.ft.model_dump_json()),
            "llm": json.loads(self.llm.model_dump_json()),
            "paths": json.loads(self.paths.model_dump_json()),
        })
        return masked


# a command's option whose flag is not ``--<field-with-dashes>`` (ftagent/cli/run.py)
FLAG_NAMES = {"target_benchmark": "--benchmark"}


def env_var_name(group: type[BaseSettings], field: str) -> str:
    """The environment variable a user sets for ``field`` of a settings group (``FT_BENCHMARK_LIMIT``).

    pydantic-settings reads the first alias of a ``validation_alias``, else ``env_prefix`` + the field name.
    """
    alias = group.model_fields[field].validation_alias
    if isinstance(alias, AliasChoices) and isinstance(alias.choices[0], str):
        return alias.choices[0].upper()
    if isinstance(alias, str):
        return alias.upper()
    return f"{group.model_config.get('env_prefix') or ''}{field}".upper()


GROUPS: tuple[type[BaseSettings], ...] = (FTSettings, LLMSettings, PathSettings)


def setting_groups() -> dict[str, type[BaseSettings]]:
    """Every setting by its settings name (the field: ``planner``, ``chat_model``, ``log_path``) → its group."""
    return {name: group for group in GROUPS for name in group.model_fields}


def environment_names(group: type[BaseSettings], field: str) -> list[str]:
    """Every environment variable pydantic-settings reads ``field`` from (its aliases too), upper case."""
    alias = group.model_fields[field].validation_alias
    if isinstance(alias, AliasChoices):
        return [str(c).upper() for c in alias.choices if isinstance(c, str)]
    return [env_var_name(group, field)]


def set_in_environment(field: str) -> str | None:
    """The variable of the process environment that sets ``field``, or None (a value ``.env`` put there
    does not count: a run file overrides ``.env``, the environment overrides a run file)."""
    import os

    from ftagent.core.envfile import dotenv_keys

    names = set(environment_names(setting_groups()[field], field))
    from_dotenv = {k.upper() for k in dotenv_keys()}
    return next((k for k in os.environ if k.upper() in names and k.upper() not in from_dotenv), None)


def _build(group: type[BaseSettings], overrides: dict[str, Any], flags: dict[str, Any]) -> Any:
    """One settings group; an invalid value is named as the user set it (env var, or the command's flag)."""
    try:
        return group(**(overrides | flags))
    except ValidationError as exc:
        names = {f: env_var_name(group, f) for f in group.model_fields}
        names |= {f: FLAG_NAMES.get(f, "--" + f.replace("_", "-")) for f in flags}
        raise UserInputError.from_validation(exc, "invalid setting", names) from None


def load_settings(file_settings: Mapping[str, Any] | None = None, **ft_overrides: Any) -> Settings:
    """Read all settings groups.

    Precedence (docs/configuration.md): keyword arguments (the command's flags, ``FT_*`` fields) > the process
    environment > ``file_settings`` (a run file's settings by name, :func:`ftagent.core.run_config.load_run_file`)
    > ``.env`` > defaults.

    Raises:
        UserInputError: when a value is invalid, naming the variable or flag the user set (exit code 2).
    """
    flags = {k: v for k, v in ft_overrides.items() if v is not None}
    from_file: dict[type[BaseSettings], dict[str, Any]] = {group: {} for group in GROUPS}
    groups = setting_groups()
    for name, value in (file_settings or {}).items():
        if set_in_environment(name) is None:
            from_file[groups[name]][name] = value
    return Settings(_build(FTSettings, from_file[FTSettings], flags), _build(LLMSettings, from_file[LLMSettings], {}),
                    _build(PathSettings, from_file[PathSettings], {}))
