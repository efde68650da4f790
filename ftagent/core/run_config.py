"""A run described by one file: ``ftagent llm_finetune --config run.yaml`` and ``{"config": "run.yaml"}`` in tasks.json.

As ``llamafactory-cli train cfg.yaml`` users expect: every option of ``llm_finetune`` may be a key of the file,
by its option name without ``--`` (``base-model`` or ``base_model``); flags on the command line (or a task's own
fields in tasks.json) override the file. An unknown key is an error (exit 2) with a did-you-mean. The file is
read with the one safe YAML loader (:mod:`ftagent.core.yamlio`: size, encoding and alias limits).

A relative ``benchmark``/``dataset``/``path`` value that names a file beside the run file is made absolute, so a
run file works from any folder (the rule tasks.json applies to its own relative files).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ftagent.core.errors import UserInputError
from ftagent.core.registry import did_you_mean
from ftagent.core.yamlio import load_yaml_file

_FILE_KEYS = ("benchmark", "dataset", "path")  # values that may name a file next to the run file


class RunConfig(BaseModel):
    """The options of ``ftagent llm_finetune`` (``tests/unit/test_run_config.py`` keeps the two the same)."""

    model_config = ConfigDict(extra="forbid")

    benchmark: str | None = None
    benchmark_description: str | None = None
    base_model: str | None = None
    dataset: str | None = None
    upper_data_size_limit: int | None = Field(default=None, ge=1)
    loop_n: int | None = Field(default=None, ge=1)
    step_n: int | None = Field(default=None, ge=1)
    timeout: str | None = None
    path: str | None = None
    checkout: bool | None = None
    user_target_scenario: str | None = None
    quiet: bool | None = None
    plan: bool | None = None

    @field_validator("timeout", mode="before")
    @classmethod
    def _seconds(cls, value: Any) -> Any:  # `timeout: 3600` in YAML is plain seconds, as on the command line
        return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def load_run_config(path: Path | str) -> dict[str, Any]:
    """The keys the run file sets (validated, option names with ``_``), file values made absolute where they
    name a file beside it.

    Raises:
        UserInputError: unreadable or unsafe YAML, not a mapping, an unknown key (did you mean), a bad value.
    """
    path = Path(path)
    where = f"run file {path}"
    if not path.is_file():
        raise UserInputError(f"{where}: no such file")
    raw = load_yaml_file(path, where)
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise UserInputError(f"{where}: expected a mapping of option: value (e.g. 'benchmark: gsm8k')")
    data = {str(k).replace("-", "_"): v for k, v in raw.items()}
    known = list(RunConfig.model_fields)
    for key in data:
        if key not in RunConfig.model_fields:
            raise UserInputError(f"{where}: unknown key '{key}'.{did_you_mean(key, known)} Keys: {', '.join(known)}")
    try:
        config = RunConfig.model_validate(data)
    except ValidationError as exc:
        raise UserInputError.from_validation(exc, where) from None
    values = config.model_dump(exclude_unset=True)
    for key in _FILE_KEYS:
        value = values.get(key)
        if isinstance(value, str) and value and not Path(value).expanduser().is_absolute():
            beside = path.resolve().parent / value
            if beside.exists():
                values[key] = str(beside)
    return values
