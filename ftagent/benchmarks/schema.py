"""The benchmark YAML schema (:class:`BenchmarkConfig`) and its loader (``include:``, clear errors).

One file per benchmark (``configs/benchmarks/<key>.yaml``, a user's ``my_bench.yaml``, or any
``*.yaml`` in a ``FT_BENCHMARK_PATHS`` directory). ``include:`` names one or more files (relative to
the including file) whose keys are family defaults: they are merged first, the including file wins,
and mappings are merged key by key. Files whose name starts with ``_`` are include-only.

Every problem (unreadable file, bad YAML, a missing or unknown field, an include cycle) is one
:class:`~ftagent.core.errors.UserInputError` naming the file, so the CLI exits with code 2.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ftagent.core.errors import UserInputError
from ftagent.core.settings import MAX_DESCRIPTION_CHARS

YAML_SUFFIXES = (".yaml", ".yml")
_PLACEHOLDER = re.compile(r"(?<!\{)\{([A-Za-z_][A-Za-z0-9_]*)\}(?!\})")


class DataConfig(BaseModel):
    """Where the rows come from (``loader`` is a registered name, see :mod:`ftagent.benchmarks.components`)."""

    model_config = ConfigDict(extra="forbid")

    loader: str = Field("local_files", description="registered loader name")
    source: str | None = Field(None, description="shown by `benchmarks show` (default: derived)")
    repo: str | None = Field(None, description="Hugging Face dataset repo id (hub loaders)")
    allow_patterns: list[str] | None = Field(None, description="download filter of the hub snapshot")
    patterns: list[str] = Field(default_factory=list, description="file globs under raw/, first match wins")
    max_files: int | None = Field(None, gt=0, description="read at most this many matching files")
    file: str | None = Field(None, description="local JSONL/CSV/JSON file, split by the standard rule")
    validation: str | None = Field(None, description="local validation file (with `test`)")
    test: str | None = Field(None, description="local test file (with `validation`)")
    item: str | None = Field(None, description="registered row → item transform")
    fields: dict[str, str | list[str]] = Field(
        default_factory=dict, description="item column → source column(s), first present wins")
    options: dict[str, Any] = Field(default_factory=dict, description="loader-specific options")
    stratify: str | None = Field(None, description="item column whose values each get their share of both "
                                                   "splits (MMLU: subject)")
    labels: list[str] | None = Field(None, description="the only gold answers allowed (A-D); others are an error")
    gated: bool = Field(False, description="the HF repo needs HF_TOKEN and accepted terms")
    final_rest: bool = Field(True, description="the final evaluation (FT_FINAL_EVAL=full) also scores the rows "
                                               "in neither split; false when those rows are a training set")

    @model_validator(mode="after")
    def _local_files(self) -> DataConfig:
        if self.loader == "local_files":
            both = self.validation is not None and self.test is not None
            if self.file is None and not both:
                raise ValueError("data needs `file: rows.jsonl` or both `validation:` and `test:` files")
            if self.file is not None and (self.validation is not None or self.test is not None):
                raise ValueError("data: give either `file:` or `validation:` + `test:`, not both")
            if (self.validation is None) != (self.test is None):
                raise ValueError("data: `validation:` and `test:` go together")
        return self


class BenchmarkConfig(BaseModel):
    """One benchmark: facts (description, category, core metric), data, prompt, answer checking."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="the benchmark key")
    description: str = Field("", max_length=MAX_DESCRIPTION_CHARS,
                             description="shown to the planner (default --benchmark-description)")
    scenario: str = Field("", max_length=MAX_DESCRIPTION_CHARS, description="one-line goal")
    category: str = "user"
    core_metric: str | None = Field(None, description="headline metric (default: the metric's own)")
    direction: Literal["max", "min"] = "max"
    data: DataConfig
    prompt: str = Field(description="prompt template with {column} placeholders")
    prompt_note: str | None = Field(None, description="shown instead of the prompt (prompts built per item)")
    rounds: str = Field("zero_shot", description="registered prompt builder (few-shot turns)")
    shots: list[dict[str, str]] = Field(default_factory=list, description="fixed few-shot examples")
    answer: str = Field("answer", description="the gold field of the data rows")
    metric: str = Field(description="registered metric name, e.g. exact_match")
    metric_kwargs: dict[str, Any] = Field(default_factory=dict)
    extractor: str | None = Field(None, description="registered answer extractor (default: the metric's)")
    extractor_kwargs: dict[str, Any] = Field(default_factory=dict)
    answer_rule: str | None = Field(None, description="one line (default: from extractor and metric)")
    evaluator_note: str | None = Field(None, description="appended to the evaluator shown")
    judge: bool = Field(False, description="an LLM judge re-checks rule misses when FT_JUDGE_* is set")
    max_out_len: int = Field(512, gt=0)
    max_out_len_by_subset: dict[str, int] = Field(default_factory=dict)
    input_columns: list[str] | None = Field(None, description="default: the prompt's placeholders")
    related_datasets: list[str] = Field(default_factory=list, description="training dataset names")
    subsets: list[str] = Field(default_factory=lambda: ["default"], min_length=1)
    subset_metrics: dict[str, str] = Field(default_factory=dict, description="sub-dataset → its core metric")

    source_file: Path | None = Field(None, exclude=True, description="the YAML file (set by the loader)")

    @model_validator(mode="after")
    def _subsets(self) -> BenchmarkConfig:
        if self.subset_metrics and "subsets" not in self.model_fields_set:
            self.subsets = list(self.subset_metrics)
        missing = [s for s in self.subsets if self.subset_metrics and s not in self.subset_metrics]
        if missing:
            raise ValueError(f"subset_metrics has no entry for {', '.join(missing)}")
        return self

    def columns(self) -> list[str]:
        """The prompt's input columns."""
        if self.input_columns is not None:
            return list(self.input_columns)
        found = list(dict.fromkeys(_PLACEHOLDER.findall(self.prompt)))
        return found or ["question"]

    def resolve(self, relative: str) -> Path:
        """A data path of the file, relative to the YAML file's folder."""
        path = Path(relative).expanduser()
        if path.is_absolute() or self.source_file is None:
            return path
        return self.source_file.parent / path


def _read_yaml(path: Path) -> dict[str, Any]:
    from ftagent.core.yamlio import load_yaml_file

    # size, encoding and alias limits: the one loader of every input YAML (ftagent.core.yamlio)
    data = load_yaml_file(path, f"benchmark file {path}")
    if not isinstance(data, dict):
        raise UserInputError(f"benchmark file {path}: expected a mapping of fields (name:, data:, prompt: ...)")
    return data


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def load_raw(path: Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The file's mapping with its ``include:`` files merged in (the including file wins)."""
    path = Path(path).resolve()
    if path in _seen:
        raise UserInputError(f"benchmark file {path}: include cycle ({' -> '.join(p.name for p in _seen)})")
    data = _read_yaml(path)
    includes = data.pop("include", None) or []
    if isinstance(includes, str):
        includes = [includes]
    if not isinstance(includes, list) or not all(isinstance(i, str) for i in includes):
        raise UserInputError(f"benchmark file {path}: `include:` must be a file name or a list of them")
    merged: dict[str, Any] = {}
    for name in includes:
        target = (path.parent / name).resolve()
        if not target.is_file():
            raise UserInputError(f"benchmark file {path}: included file {name} not found next to it")
        merged = _merge(merged, load_raw(target, (*_seen, path)))
    return _merge(merged, data)


def _messages(exc: ValidationError) -> list[str]:
    out = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "file"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing":
            msg = "is required"
        elif err["type"] == "extra_forbidden":
            from ftagent.core.registry import did_you_mean

            parent = BenchmarkConfig if len(err["loc"]) == 1 else DataConfig
            msg = f"unknown field.{did_you_mean(str(err['loc'][-1]), list(parent.model_fields))}"
        out.append(f"`{field}` {msg}")
    return out


def load_config(path: Path | str) -> BenchmarkConfig:
    """Read and validate one benchmark YAML file.

    Raises:
        UserInputError: unreadable file, bad YAML, missing/unknown fields (one message, all problems).
    """
    path = Path(path).expanduser().resolve()
    raw = load_raw(path)
    try:
        config = BenchmarkConfig.model_validate(raw)
    except ValidationError as exc:
        raise UserInputError(f"benchmark file {path}: " + "; ".join(_messages(exc))) from exc
    return config.model_copy(update={"source_file": path})


def is_benchmark_file(value: str) -> bool:
    """True when ``value`` names a YAML file rather than a registered key."""
    return str(value).lower().endswith(YAML_SUFFIXES)
