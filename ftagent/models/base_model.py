"""A ``--base-model`` value, from the user's words to a model folder: checked without building or downloading
anything (:func:`check_model_name`, :func:`check_model_folder`: at start-up, before anything is written),
its folder computed (:func:`base_model_dir`: recorded by start-up), then made to hold the model
(:func:`fetch_base_model`: in the scenario's build) -- and the models already under ``FT_FILE_PATH/models``.

* ``builtin/<name>`` → built once into ``FT_FILE_PATH/models/builtin/<name>`` (:mod:`ftagent.models.builtin`);
* an existing local folder → itself;
* ``<name>`` present under ``FT_FILE_PATH/models/`` → that folder;
* a Hugging Face id ``org/name`` → ``FT_FILE_PATH/models/org/name`` if present, else downloaded there
  (:mod:`ftagent.models.download`).
"""

from __future__ import annotations

import json
from pathlib import Path

from ftagent.core.errors import UserInputError
from ftagent.core.paths import models_dir
from ftagent.models.builtin import (
    BUILTIN_MODELS,
    BUILTIN_PREFIX,
    build_builtin,
    builtin_dir,
    builtin_spec,
    is_built,
)
from ftagent.models.download import download_once, is_hub_id, offline_unfetchable
from ftagent.models.folders import has_model_files
from ftagent.runners.base import Runner

# What transformers' Auto* classes need from a local folder to load a model and its tokenizer
# (``AutoConfig`` reads ``config.json`` and its ``model_type``; ``AutoTokenizer`` one of these files).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer.tiktoken", "qwen.tiktoken")


def check_model_folder(folder: Path, name: str | None = None) -> None:
    """A local base-model folder, checked completely before anything is written (issue 34.5).

    Old main accepted any folder: one without ``config.json`` failed later with a ``ValueError``
    traceback from the memory estimator, after the session existed. Checked: ``config.json`` (a JSON
    object with ``model_type``), weights (``*.safetensors`` / ``*.bin``, every shard an index names) and a
    tokenizer file.

    The safetensors files must be whole (issue 43: a cut file was found only by the evaluation, after a whole
    OpenCompass run; :func:`ftagent.models.checkpoint.checkpoint_problems`).

    Raises:
        UserInputError: one message naming the folder and everything missing.
    """
    from ftagent.models.checkpoint import checkpoint_problems

    folder = Path(folder)
    problems = []
    config = folder / "config.json"
    if not config.is_file():
        problems.append("no config.json")
    else:
        try:
            data = json.loads(config.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            problems.append(f"config.json is not readable JSON ({str(exc).splitlines()[0][:120]})")
        else:
            if not isinstance(data, dict) or not data.get("model_type"):
                problems.append("config.json has no model_type")
    weights = [p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin") and p.is_file()]
    problems += checkpoint_problems(folder)  # every safetensors file whole, every shard an index names there
    if not weights:
        problems.append("no weights (*.safetensors or *.bin)")
    if not any((folder / f).is_file() for f in TOKENIZER_FILES):
        problems.append(f"no tokenizer ({' / '.join(TOKENIZER_FILES[:3])})")
    if problems:
        raise UserInputError(f"base model '{name or folder}': the folder {folder.absolute()} is not a complete "
                             f"Hugging Face model: {'; '.join(problems)}. Pass a folder saved with "
                             "save_pretrained (model and tokenizer), an HF repo id, or builtin/tiny-qwen2")


def check_model_name(name: str, file_path: Path | None = None) -> None:
    """Validate a ``--base-model`` value without building or downloading anything.

    Valid: ``builtin/<known name>``, an existing folder, a folder under ``FT_FILE_PATH/models``, or an
    HF repo id ``org/name``.

    Raises:
        UserInputError: with one message naming the value and the accepted forms.
    """
    name = name.strip()
    if name.startswith(BUILTIN_PREFIX):
        builtin_spec(name[len(BUILTIN_PREFIX):])
        return
    if Path(name).expanduser().is_dir():
        check_model_folder(Path(name).expanduser(), name)
        return
    if file_path is not None and has_model_files(models_dir(file_path) / name):
        check_model_folder(models_dir(file_path) / name, name)  # one copied in by hand: not fetched again
        return
    if not is_hub_id(name):
        raise UserInputError(f"base model '{name}' is neither a built-in model (builtin/...), an existing "
                             "local folder, nor a Hugging Face repo id like 'Qwen/Qwen2.5-7B-Instruct'")


def check_base_model(name: str | None, file_path: Path | None = None, *, fetchable: bool = True) -> str:
    """A base model must be given, and be builtin/<name>, a local folder or an HF repo id; with
    ``fetchable`` one that can be had here (offline: already under ``FT_FILE_PATH/models``). Returns it."""
    if not name or not name.strip():
        raise UserInputError(
            "no base model: pass --base-model (e.g. builtin/tiny-qwen2 or Qwen/Qwen2.5-7B-Instruct) "
            "or set FT_BASE_MODEL"
        )
    check_model_name(name, file_path)
    why = offline_unfetchable(name, file_path) if fetchable else None
    if why:  # found before any dataset is prepared or downloaded, and before a session exists
        raise UserInputError(why)
    return name


def base_model_dir(name: str, file_path: Path) -> Path:
    """The folder ``name`` is (or will be) in, without building or downloading anything:
    ``FT_FILE_PATH/models/builtin/<name>``, the local folder, or ``FT_FILE_PATH/models/<name>``."""
    name = name.strip()
    if name.startswith(BUILTIN_PREFIX):
        return builtin_dir(file_path, name[len(BUILTIN_PREFIX):])
    local = Path(name).expanduser()
    if local.is_dir():
        return local.absolute()
    return (models_dir(file_path) / name).absolute()


def fetch_base_model(name: str, folder: Path, python_or_runner: Path | str | Runner,
                     file_path: Path | None = None) -> Path:
    """Make ``folder`` (:func:`base_model_dir` of ``name``) hold the model: build a built-in one, use a
    local folder as it is, download an HF id once; returns the folder.

    Raises:
        UserInputError: an unknown built-in name, or a value that is neither a folder nor an HF id.
        EnvironmentFailure: a build or a download failed (an offline Hub included).
    """
    name = name.strip()
    if name.startswith(BUILTIN_PREFIX):
        return build_builtin(name[len(BUILTIN_PREFIX):], folder, python_or_runner)
    if Path(name).expanduser().is_dir() or has_model_files(folder):
        return folder
    check_model_name(name, file_path)  # raises for anything that is not an HF id
    return download_once(name, folder)


def list_models(file_path: Path) -> list[dict[str, str]]:
    """Built-in models (with build status) and the model folders already under ``FT_FILE_PATH/models``."""
    rows = [{"name": f"{BUILTIN_PREFIX}{m.name}",
             "status": "built" if is_built(builtin_dir(file_path, m.name), m.name) else "not built",
             "description": m.description} for m in BUILTIN_MODELS.values()]
    root = models_dir(file_path)
    if root.is_dir():
        for cfg in sorted(root.glob("*/*/config.json")) + sorted(root.glob("*/config.json")):
            rel = cfg.parent.relative_to(root).as_posix()
            if not rel.startswith(BUILTIN_PREFIX):
                rows.append({"name": rel, "status": "local", "description": str(cfg.parent)})
    return rows
