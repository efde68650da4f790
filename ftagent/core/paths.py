"""Where things are: the shipped data folders (``configs/``, ``docker/``) and the FT_FILE_PATH layout.

``configs/`` and ``docker/`` sit at the top of the repository and are shipped inside the wheel as
the packages ``ftagent._configs`` and ``ftagent._docker`` (see ``[tool.setuptools.package-dir]`` in
pyproject.toml). They are found through the import system, so a source checkout, an editable
install and a plain ``pip install .`` all resolve them the same way.
"""

from __future__ import annotations

import importlib
from functools import cache
from pathlib import Path


@cache
def _package_dir(package: str) -> Path:
    # configs/ and docker/ have no __init__.py (so that the repository's docker/ never shadows the
    # docker SDK): they are namespace packages, whose __path__ lists their one folder.
    try:
        return Path(next(iter(importlib.import_module(package).__path__)))
    except (ModuleNotFoundError, StopIteration):
        # a bare source tree on PYTHONPATH (tool processes): the folder beside the package
        return package_root() / package.removeprefix("ftagent._")


def configs_dir() -> Path:
    """The shipped ``configs/`` folder (models.yaml, benchmarks/, envs/, llamafactory/, opencompass/ ...)."""
    return _package_dir("ftagent._configs")


def config_file(*parts: str) -> Path:
    """A file under ``configs/``, e.g. ``config_file("llamafactory", "defaults.yaml")``."""
    return configs_dir().joinpath(*parts)


def docker_dir() -> Path:
    """The shipped ``docker/`` folder (one sub-folder per image, each with its Dockerfile)."""
    return _package_dir("ftagent._docker")


def package_root() -> Path:
    """The folder that contains the ``ftagent`` package (put on PYTHONPATH for tool processes)."""
    return Path(__file__).resolve().parents[2]


# -- FT_FILE_PATH layout (DESIGN §5): the one owner of every folder under it -------------------------
def datasets_dir(file_path: Path | str) -> Path:
    """Raw training datasets: ``FT_FILE_PATH/datasets``."""
    return Path(file_path) / "datasets"


def models_dir(file_path: Path | str) -> Path:
    """Base models: ``FT_FILE_PATH/models``."""
    return Path(file_path) / "models"


def benchmarks_dir(file_path: Path | str) -> Path:
    """Evaluation data (mounted only into evaluation runs): ``FT_FILE_PATH/benchmarks``."""
    return Path(file_path) / "benchmarks"


def benchmark_data_dir(file_path: Path | str, key: str) -> Path:
    """One benchmark's prepared data (``<split>.jsonl`` or ``<subset>/<split>.jsonl``): ``FT_FILE_PATH/benchmarks/<key>``."""
    return benchmarks_dir(file_path) / key


def llama_factory_info_dir(file_path: Path | str) -> Path:
    """LLaMA-Factory's extracted parameter catalogue: ``FT_FILE_PATH/.llama_factory_info``."""
    return Path(file_path) / ".llama_factory_info"


def envs_dir(file_path: Path | str) -> Path:
    """The local runner's tool virtualenvs: ``FT_FILE_PATH/envs``."""
    return Path(file_path) / "envs"


def eval_cache_dir(file_path: Path | str) -> Path:
    """Cached evaluation results (per model files, benchmark, split, settings): ``FT_FILE_PATH/eval_cache``."""
    return Path(file_path) / "eval_cache"


def tiktoken_cache_dir(file_path: Path | str) -> Path:
    """tiktoken's BPE files for the LLM judge's token counts (``TIKTOKEN_CACHE_DIR`` of evaluation runs,
    filled on the host, mounted read-only): ``FT_FILE_PATH/tiktoken_cache``."""
    return Path(file_path) / "tiktoken_cache"


def baselines_dir(file_path: Path | str) -> Path:
    """The base model's evaluation runs, every benchmark: ``FT_FILE_PATH/baseline``."""
    return Path(file_path) / "baseline"


def baseline_dir(file_path: Path | str, benchmark: str) -> Path:
    """The base model's evaluation runs on one benchmark: ``FT_FILE_PATH/baseline/<key>``."""
    return baselines_dir(file_path) / benchmark


def docker_logs_dir(file_path: Path | str) -> Path:
    """Image build logs: ``FT_FILE_PATH/docker``."""
    return Path(file_path) / "docker"
