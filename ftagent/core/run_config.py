"""A run described by one file, the whole recipe: ``ftagent llm_finetune --config run.yaml``, ``ftagent plan --config``,
``{"config": "run.yaml"}`` in tasks.json and the MCP server's ``start`` tool all read it through :func:`load_run_file`.

A key of the file is one of

* an **option** of ``llm_finetune`` by its name without ``--`` (``base_model`` or ``base-model``, ``loop_n``, ``plan``);
* a **setting** by its settings name (``planner``, ``sota_rule``, ``report_to``, ``chat_model``, ``log_path``: the
  name in docs/configuration.md without ``FT_``; the variable itself, ``FT_PLANNER``, is accepted too).

The two name spaces meet only where an option *is* a setting's flag (``base_model`` is ``--base-model`` is
``FT_BASE_MODEL``; ``benchmark`` is ``FT_TARGET_BENCHMARK``): one fact, one key, read as the option. Every other
key is exact: ``plan`` (an option: print the forecast and exit) and ``planner`` (the setting ``FT_PLANNER``) are
two keys, and a value one of them refuses while a setting of a close name takes it is named in the error
(``plan: llm`` → ``'planner' is the setting that takes it``). An unknown key is an error with a did-you-mean
over both. Secrets (API keys, tokens, a password in a URL) are refused, naming the key: they belong in the
environment or ``.env``. Precedence (docs/configuration.md): flags > the process environment > the run file >
``.env`` > defaults.

The file is read with the one safe YAML loader (:mod:`ftagent.core.yamlio`: size, encoding and alias limits). A
relative ``benchmark``/``dataset``/``path`` value that names a file beside the run file, and every relative path
setting (``log_path``, ``file_path``, ``tools_env`` ...), is taken beside the run file, so it works from any folder.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings

from ftagent.core.didyoumean import closest, did_you_mean
from ftagent.core.errors import UserInputError
from ftagent.core.settings import (
    FLAG_NAMES,
    FTSettings,
    environment_names,
    set_in_environment,
    setting_groups,
)
from ftagent.core.yamlio import load_yaml_file

_FILE_KEYS = ("benchmark", "dataset", "path")  # values that may name a file next to the run file
# a key that names a credential (hf_token, wandb_api_key, password) is refused as one, not as an unknown key
_SECRET_NAME = re.compile(r"(^|_)(api_?key|token|secret|password|passwd|credentials?)($|_)", re.I)


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


class RunFile(BaseModel):
    """A run file read and checked: its options (``llm_finetune``'s, by option name) and its settings (by
    settings name, values validated, path settings absolute). Only the keys the file sets are present."""

    model_config = ConfigDict(frozen=True)

    path: str | None = None  # None: given as a mapping, not a file
    options: dict[str, Any] = Field(default_factory=dict)
    settings: dict[str, Any] = Field(default_factory=dict)


@functools.cache
def option_settings() -> dict[str, str]:
    """Each option that is a setting's flag → that setting (``benchmark`` → ``target_benchmark``)."""
    out = {}
    for field in FTSettings.model_fields:
        key = FLAG_NAMES.get(field, "--" + field.replace("_", "-")).removeprefix("--").replace("-", "_")
        if key in RunConfig.model_fields:
            out[key] = field
    return out


@functools.cache
def _spellings() -> dict[str, tuple[str, str]]:
    """Every accepted key (lower case) → ("option" | "setting", its canonical name)."""
    names: dict[str, tuple[str, str]] = {}
    as_option = {setting: option for option, setting in option_settings().items()}
    for field, group in setting_groups().items():
        target = ("option", as_option[field]) if field in as_option else ("setting", field)
        for name in (field, *environment_names(group, field)):
            names[name.lower()] = target
    names |= {key: ("option", key) for key in RunConfig.model_fields}
    return names


def secret_settings() -> set[str]:
    """The settings that hold a secret (a ``SecretStr``): never in a run file."""
    return {name for name, group in setting_groups().items() if SecretStr in _types(group.model_fields[name].annotation)}


def _types(annotation: Any) -> set[Any]:
    """The classes an annotation is made of (``list[Path] | None`` → {list, Path, NoneType})."""
    found = {annotation}
    origin = get_origin(annotation)
    if origin is not None:
        found.add(origin)
    for arg in get_args(annotation):
        found |= _types(arg)
    return found - {Union, UnionType}


def _secret_inside(value: Any) -> str | None:
    """What in a value is a credential: a key named like one at any depth, or a password in a URL."""
    if isinstance(value, Mapping):
        for key, inner in value.items():
            if _SECRET_NAME.search(str(key)) and inner not in (None, ""):
                return f"its key '{key}'"
            found = _secret_inside(inner)
            if found:
                return found
    elif isinstance(value, list):
        return next((found for v in value if (found := _secret_inside(v))), None)
    elif isinstance(value, str) and "://" in value:
        try:
            if urlsplit(value).password:
                return "a password in its URL"
        except ValueError:
            return None
    return None


def load_run_file(path: Path | str) -> RunFile:
    """Read and check a run file (see the module).

    Raises:
        UserInputError: unreadable or unsafe YAML, not a mapping, an unknown key (did you mean), a secret, a bad value.
    """
    path = Path(path)
    where = f"run file {path}"
    if not path.is_file():
        raise UserInputError(f"{where}: no such file")
    raw = load_yaml_file(path, where)
    if raw is None:
        return RunFile(path=str(path.resolve()))
    if not isinstance(raw, dict):
        raise UserInputError(f"{where}: expected a mapping of option or setting: value (e.g. 'benchmark: gsm8k')")
    return parse_recipe(raw, where, path.resolve().parent).model_copy(update={"path": str(path.resolve())})


def parse_recipe(raw: Mapping[Any, Any], where: str, base_dir: Path | None) -> RunFile:
    """A recipe given as a mapping (a run file's content); relative files are
    taken from ``base_dir`` (None: the working directory).

    Raises:
        UserInputError: as :func:`load_run_file`.
    """
    written: dict[str, str] = {}  # canonical name → the key as the user wrote it
    options: dict[str, Any] = {}
    settings: dict[str, Any] = {}
    spellings, secrets = _spellings(), secret_settings()
    for key, value in raw.items():
        shown = str(key)
        kind, name = spellings.get(shown.strip().lower().replace("-", "_"), ("", ""))
        if name in secrets or (not kind and _SECRET_NAME.search(shown)):
            env = environment_names(setting_groups()[name], name)[0] if name else shown.upper()
            raise UserInputError(f"{where}: '{shown}' is a secret: set {env} in the environment or .env, never in a "
                                 "run file (a recipe to share, read by agents and copied with tasks)")
        inside = _secret_inside(value)
        if inside:
            raise UserInputError(f"{where}: '{shown}' holds a secret ({inside}): keep credentials in the "
                                 "environment or .env, never in a run file")
        if not kind:
            known = [*RunConfig.model_fields, *(n for n in setting_groups() if n not in option_settings().values())]
            raise UserInputError(f"{where}: unknown key '{shown}'.{did_you_mean(shown, known)} Keys: the options of "
                                 f"`ftagent llm_finetune` ({', '.join(RunConfig.model_fields)}) and every setting "
                                 "by its name (planner, sota_rule, report_to, ...: docs/configuration.md)")
        if name in written:
            raise UserInputError(f"{where}: '{written[name]}' and '{shown}' both set {name}: keep one")
        written[name] = shown
        (options if kind == "option" else settings)[name] = value
    return RunFile(options=_options(options, written, where, base_dir),
                   settings=_settings(settings, written, where, base_dir))


def _options(values: dict[str, Any], written: dict[str, str], where: str, base_dir: Path | None) -> dict[str, Any]:
    try:
        config = RunConfig.model_validate(values)
    except ValidationError as exc:
        error = UserInputError.from_validation(exc, where, written)
        key = str(exc.errors()[0]["loc"][0])
        raise UserInputError(f"{error}{_setting_hint(key, values.get(key))}") from None
    checked = config.model_dump(exclude_unset=True)
    for key in _FILE_KEYS:
        value = checked.get(key)
        if isinstance(value, str) and value and not Path(value).expanduser().is_absolute() and base_dir is not None:
            beside = base_dir / value
            if beside.exists():
                checked[key] = str(beside)
    return checked


def _setting_hint(option: str, value: Any) -> str:
    """``plan: llm``: the option refuses the value; a setting of a close name that takes it is named."""
    candidates = [n for n in setting_groups() if n not in option_settings().values()]
    name = closest(option, candidates)
    if name is None:
        return ""
    try:
        _file_only(setting_groups()[name])(**{name: value})
    except (ValidationError, TypeError):
        return ""
    return f" ('{name}' is the setting that takes {value!r}: {name}: {value})"


@functools.cache
def _file_only(group: type[BaseSettings]) -> type[BaseSettings]:
    """``group`` reading only the values it is given (no environment, no .env): a run file's own values are
    checked alone, so an error names the file's key, never a variable the file did not set."""

    def sources(cls: type[BaseSettings], /, settings_cls: type[BaseSettings], init_settings: Any,
                **_others: Any) -> tuple[Any, ...]:
        return (init_settings,)

    return type(f"{group.__name__}FromRunFile", (group,), {"settings_customise_sources": classmethod(sources)})


def _settings(values: dict[str, Any], written: dict[str, str], where: str, base_dir: Path | None) -> dict[str, Any]:
    """The settings validated group by group (named by the file's keys), path settings beside the run file."""
    out: dict[str, Any] = {}
    groups = setting_groups()
    for group in {groups[name] for name in values}:
        mine = {name: v for name, v in values.items() if groups[name] is group}
        try:
            checked = _file_only(group)(**mine)
        except ValidationError as exc:  # an error's location may be the field's alias (LOG_PATH): both are named
            names = {alias: written[name] for name in mine for alias in (name, *_aliases(group, name))}
            raise UserInputError.from_validation(exc, where, names) from None
        dumped = checked.model_dump(mode="json", include=set(mine))
        for name in mine:
            if Path in _types(group.model_fields[name].annotation) and base_dir is not None:
                dumped[name] = _beside(dumped[name], base_dir)
        out |= dumped
    return {name: out[name] for name in values}


def _aliases(group: type[BaseSettings], field: str) -> list[str]:
    alias = group.model_fields[field].validation_alias
    return [c for c in getattr(alias, "choices", [alias]) if isinstance(c, str)]


def _beside(value: Any, base_dir: Path) -> Any:
    if isinstance(value, list):
        return [_beside(v, base_dir) for v in value]
    if isinstance(value, str) and value and not Path(value).expanduser().is_absolute():
        return str(base_dir / value)
    return value


def effective_options(run_file: RunFile) -> dict[str, Any]:
    """The file's options a command takes as its defaults (flags override them). An option that is a setting's
    flag is left out when the process environment sets that setting: the environment overrides the file."""
    settings_of = option_settings()
    return {key: value for key, value in run_file.options.items() if value is not None
            and (key not in settings_of or set_in_environment(settings_of[key]) is None)}
