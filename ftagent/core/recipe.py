"""The resolved recipe of a run, each value with where it came from (``ftagent config show run.yaml``).

The same precedence the run applies (docs/configuration.md, "A run described by one file"): flags > the process
environment > the run file > ``.env`` > defaults. Settings are resolved by :func:`ftagent.core.settings.load_settings`
itself, so what is shown is what a run gets; secrets are shown masked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr

from ftagent.core.envfile import dotenv_keys
from ftagent.core.run_config import RunConfig, RunFile, effective_options, option_settings
from ftagent.core.settings import (
    Settings,
    environment_names,
    load_settings,
    set_in_environment,
    setting_groups,
)

Source = Literal["flag", "environment", "run file", ".env", "default"]
MASK = "**********"


class RecipeValue(BaseModel):
    """One option or setting of a run: its value and where it came from."""

    key: str  # the option's or the setting's name (as a run file writes it)
    kind: Literal["option", "setting"]
    value: Any = None  # JSON; a secret that is set shows as MASK
    source: Source
    via: str | None = None  # the variable (environment, .env) or the run file it came from


class Recipe(BaseModel):
    """Every option and setting of a run as it would be resolved now."""

    run_file: str | None = None
    values: list[RecipeValue] = Field(default_factory=list)

    def changed(self) -> list[RecipeValue]:
        """The values that are not defaults (what ``config show`` prints without ``--all``)."""
        return [v for v in self.values if v.source != "default"]


def resolve_recipe(run_file: RunFile | None, flags: Mapping[str, Any] | None = None) -> Recipe:
    """The recipe a command given ``run_file`` and ``flags`` (option name → value, None = not given) runs.

    Raises:
        UserInputError: an invalid value in the environment or ``.env`` (as the run itself would exit 2).
    """
    given = {k: v for k, v in (flags or {}).items() if v is not None}
    run_file = run_file if run_file is not None else RunFile()
    from_file = effective_options(run_file)
    as_setting = option_settings()
    settings = load_settings(run_file.settings, **{as_setting[k]: v for k, v in (from_file | given).items()
                                                   if k in as_setting})
    values = [_option(key, given, from_file, run_file, settings) for key in RunConfig.model_fields]
    values += [_setting(name, run_file, settings) for name in setting_groups() if name not in as_setting.values()]
    return Recipe(run_file=run_file.path, values=values)


def _option(key: str, given: Mapping[str, Any], from_file: Mapping[str, Any], run_file: RunFile,
            settings: Settings) -> RecipeValue:
    if key in given:
        return RecipeValue(key=key, kind="option", value=given[key], source="flag")
    setting = option_settings().get(key)
    if key in from_file:
        return RecipeValue(key=key, kind="option", value=from_file[key], source="run file", via=run_file.path)
    if setting is None:
        return RecipeValue(key=key, kind="option", value=None, source="default")
    shown = _setting(setting, run_file, settings)
    return shown.model_copy(update={"key": key, "kind": "option"})


def _setting(name: str, run_file: RunFile, settings: Settings) -> RecipeValue:
    group = setting_groups()[name]
    owner = next(g for g in (settings.ft, settings.llm, settings.paths) if isinstance(g, group))
    value = getattr(owner, name)
    if isinstance(value, SecretStr):
        value = MASK
    else:
        value = json.loads(owner.model_dump_json(include={name})).get(name)
    variable = set_in_environment(name)
    if variable is not None:
        return RecipeValue(key=name, kind="setting", value=value, source="environment", via=variable)
    if name in run_file.settings:
        return RecipeValue(key=name, kind="setting", value=value, source="run file", via=run_file.path)
    loaded = {k.upper() for k in dotenv_keys()}
    from_dotenv = next((n for n in environment_names(group, name) if n in loaded), None)
    if from_dotenv is not None:
        return RecipeValue(key=name, kind="setting", value=value, source=".env", via=from_dotenv)
    return RecipeValue(key=name, kind="setting", value=value, source="default")
