"""LLaMA-Factory's parameter catalogue: extracted once in the tool env, cached as JSON.

``load_or_build_catalogue(info_dir, runner)`` returns an :class:`LFCatalogue`. The two files under
``info_dir`` (``constants.json``, ``parameters.json``) are written by ``catalogue_script.py`` run
with the tool env's python; they are rebuilt when missing, unreadable, or when the installed
LLaMA-Factory version differs from the one stored in them (the reference never refreshed its cache).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from ftagent.core.errors import EnvironmentFailure
from ftagent.runners.base import Mount, Runner

SCRIPT = Path(__file__).with_name("catalogue_script.py")
_VERSION_PROBE = "import importlib.metadata as m; print('LF_VERSION=' + m.version('llamafactory'))"


class LFParam(BaseModel):
    """One LLaMA-Factory / transformers argument."""

    name: str
    type: str = ""
    default: Any = None
    help: str = ""
    section: str = ""  # model | data | finetuning | training | generating
    group: str = ""  # defining dataclass, e.g. LoraArguments
    accepts_mapping: bool = False
    accepts_list: bool = False


class LFCatalogue(BaseModel):
    """Every argument LLaMA-Factory accepts, plus its constants (methods, stages, templates)."""

    version: str
    parameters: dict[str, LFParam] = Field(default_factory=dict)
    methods: list[str] = Field(default_factory=list)
    training_stages: dict[str, str] = Field(default_factory=dict)
    templates: list[str] = Field(default_factory=list)
    supported_models: dict[str, str] = Field(default_factory=dict)

    def knows(self, name: str) -> bool:
        """True when ``name`` is a parameter LLaMA-Factory accepts."""
        return name in self.parameters

    def format_for_prompt(
        self,
        categories: list[str] | None = None,
        *,
        exclude_patterns: list[str] | None = None,
        max_help: int = 100,
        max_chars: int = 14000,
    ) -> str:
        """A compact, bounded description of the parameters for the planner's prompt.

        Args:
            categories: sections (``model``, ``data``, ``finetuning``, ``training``, ``generating``) or
                groups (``LoraArguments``...) to include; None = model, data, finetuning, training.
            exclude_patterns: regexes of names to hide; None = ``prompt_exclude_patterns`` of
                ``configs/llamafactory/defaults.yaml``.
            max_help: help text is cut to this many characters.
            max_chars: the whole text is cut to this many characters (with a note).
        """
        if exclude_patterns is None:
            from ftagent.tools.llamafactory.config import load_lf_defaults

            exclude_patterns = load_lf_defaults().prompt_exclude_patterns
        excluded = re.compile("|".join(f"(?:{p})" for p in exclude_patterns)) if exclude_patterns else None
        wanted = set(categories or ["model", "data", "finetuning", "training"])
        lines = [f"LLaMA-Factory {self.version}; methods: {', '.join(self.methods)}"]
        current = None
        for param in self.parameters.values():
            if param.section not in wanted and param.group not in wanted:
                continue
            if excluded is not None and excluded.fullmatch(param.name):
                continue
            if param.section != current:
                current = param.section
                lines.append(f"## {current}")
            text = " ".join(param.help.split())
            if len(text) > max_help:
                text = text[: max_help - 3] + "..."
            type_name = re.sub(r"\b(?:\w+\.)+(\w+)", r"\1", param.type)  # drop module paths
            lines.append(f"- {param.name} ({type_name}, default={param.default!r}): {text}")
        out = "\n".join(lines)
        if len(out) > max_chars:
            out = out[: max_chars - 40].rsplit("\n", 1)[0] + "\n... (truncated)"
        return out


def read_catalogue(info_dir: Path) -> LFCatalogue:
    """Load the cached catalogue files (raises OSError/ValueError when missing or invalid)."""
    info_dir = Path(info_dir)
    consts = json.loads((info_dir / "constants.json").read_text(encoding="utf-8"))
    params = json.loads((info_dir / "parameters.json").read_text(encoding="utf-8"))
    if consts.get("llamafactory_version") != params.get("llamafactory_version"):
        raise ValueError("constants.json and parameters.json come from different LLaMA-Factory versions")
    try:
        return LFCatalogue(
            version=consts["llamafactory_version"],
            parameters={p["name"]: LFParam(**p) for p in params["parameters"]},
            methods=consts.get("methods", []),
            training_stages=consts.get("training_stages", {}),
            templates=consts.get("templates", []),
            supported_models=consts.get("supported_models", {}),
        )
    except (KeyError, TypeError, ValidationError) as exc:
        raise ValueError(f"malformed LLaMA-Factory catalogue in {info_dir}: {exc}") from exc


def installed_version(runner: Runner, workdir: Path, timeout: float = 120) -> str:
    """The LLaMA-Factory version installed in the training tool env (no heavy import)."""
    result = runner.run(["python", "-c", _VERSION_PROBE], tool="train", workdir=workdir, timeout=timeout)
    match = re.search(r"LF_VERSION=(\S+)", result.log_tail or "")
    if not result.ok or match is None:
        raise EnvironmentFailure(
            f"LLaMA-Factory is not importable in the training env (exit {result.exit_code}):\n"
            f"{result.log_tail[-2000:]}"
        )
    return match.group(1)


def build_catalogue(info_dir: Path, runner: Runner, timeout: float = 600) -> LFCatalogue:
    """Run the extraction script in the training env and read its output."""
    info_dir = Path(info_dir).absolute()
    info_dir.mkdir(parents=True, exist_ok=True)
    result = runner.run(
        ["python", str(SCRIPT), str(info_dir)], tool="train", workdir=info_dir,
        env={"OMP_NUM_THREADS": "1", "DISABLE_VERSION_CHECK": "1"},
        mounts=[Mount(source=SCRIPT.parent), Mount(source=info_dir, read_only=False)],
        timeout=timeout, log_file=info_dir / "extract.log",
    )
    if not result.ok:
        raise EnvironmentFailure(
            f"extracting LLaMA-Factory's parameters failed (exit {result.exit_code}, timed out "
            f"{result.timed_out}):\n{result.log_tail[-3000:]}"
        )
    return read_catalogue(info_dir)


def load_or_build_catalogue(info_dir: Path, runner: Runner, *, check_version: bool = True,
                            timeout: float = 600) -> LFCatalogue:
    """The cached catalogue, rebuilt when missing, broken or stale.

    Args:
        info_dir: cache folder, normally ``FT_FILE_PATH/.llama_factory_info``.
        runner: runs commands in the training tool env.
        check_version: compare the cached version with the installed one (one cheap subprocess).
        timeout: seconds for the extraction script.

    Raises:
        EnvironmentFailure: when LLaMA-Factory cannot be imported or the extraction fails.
    """
    info_dir = Path(info_dir)
    try:
        cached = read_catalogue(info_dir)
    except (OSError, ValueError):
        cached = None
    if cached is not None and (not check_version or installed_version(runner, info_dir) == cached.version):
        return cached
    return build_catalogue(info_dir, runner, timeout=timeout)
