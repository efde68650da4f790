"""A base model from the Hugging Face Hub: the form of a repo id, whether it can be had in this run (offline,
it cannot), and its download into ``FT_FILE_PATH/models/<org>/<name>`` -- once, of only the files a model
needs (:data:`MODEL_FILES`), through a staging folder renamed into place. Offline or unreachable →
:class:`EnvironmentFailure`; a repo the Hub says is unknown, private or gated → :class:`UserInputError`.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from ftagent.core.errors import EnvironmentFailure, UserInputError
from ftagent.core.paths import models_dir
from ftagent.models.builtin import BUILTIN_PREFIX
from ftagent.models.folders import has_model_files, remove_stale_staging

_HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


# What transformers, LLaMA-Factory and vLLM read from a model repo, at its top level: configs, tokenizers
# (sentencepiece ``.model``, ``.tiktoken``, vocab/merges ``.txt``), chat templates (``.jinja``), the
# ``.py`` of trust_remote_code models (imported only when the config's ``auto_map`` names them and
# remote code is allowed) and safetensors weights. Never: sub-folders (``*/*``: Llama's
# ``original/*.pth``, +16 GB), Mistral's ``consolidated.safetensors`` (mistral-inference's copy beside
# the HF shards), other formats (gguf, onnx, flax, .pth), and ``*.bin`` while safetensors exist.
# Patterns are matched by huggingface_hub (``filter_repo_objects``: fnmatch, ``*`` crosses ``/``).
MODEL_FILES = (["*.json", "*.model", "*.tiktoken", "*.txt", "*.py", "*.jinja", "*.safetensors"],
               ["*/*", "consolidated*", "*.bin.index.json"])
# the second pass, only for a repo that has no safetensors: its PyTorch .bin weights
BIN_WEIGHTS = (["*.bin", "*.bin.index.json"], ["*/*"])


def _unfetchable(repo_id: str, where: Path, offline: bool, exc: BaseException) -> EnvironmentFailure:
    why = "HF_HUB_OFFLINE is set" if offline else "the Hugging Face Hub is unreachable"
    return EnvironmentFailure(
        f"base model '{repo_id}' is not in {where} and cannot be downloaded ({why}: {type(exc).__name__}). "
        "Download it there yourself, pass a local folder, or use builtin/tiny-qwen2.")


def _download(repo_id: str, target: Path, final: Path | None = None) -> Path:
    """Download the files of :data:`MODEL_FILES` (then :data:`BIN_WEIGHTS` when no safetensors came).

    Raises:
        EnvironmentFailure: offline or unreachable Hub.
        UserInputError: an unknown, private or gated repo (the Hub answered), or one with neither safetensors
            nor ``.bin`` weights at its top level.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (  # >= 0.24
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
    try:
        for allow, ignore in (MODEL_FILES, BIN_WEIGHTS):
            snapshot_download(repo_id=repo_id, local_dir=str(target), allow_patterns=allow, ignore_patterns=ignore)
            if any(target.glob("*.safetensors")) or any(target.glob("*.bin")):
                return target
    except RepositoryNotFoundError as exc:  # the Hub answered: a wrong id (or a private/gated repo) is bad input
        shutil.rmtree(target, ignore_errors=True)
        gated = isinstance(exc, GatedRepoError)
        raise UserInputError(
            f"base model '{repo_id}': the Hugging Face Hub " + (
                "says it is gated: accept its terms on its Hub page and set HF_TOKEN" if gated else
                "has no such model (or it is private: set HF_TOKEN); check the id, or pass a local folder")
        ) from exc
    except (LocalEntryNotFoundError, OSError, ValueError) as exc:
        shutil.rmtree(target, ignore_errors=True)
        raise _unfetchable(repo_id, final or target, offline, exc) from exc
    got = sorted(p.name for p in target.iterdir()) if target.is_dir() else []
    shutil.rmtree(target, ignore_errors=True)
    if "config.json" not in got:  # nothing came (an offline hub can return without an error)
        raise EnvironmentFailure(f"base model '{repo_id}': the download returned no config.json and no weights "
                                 f"(HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', '')!r}); download it into "
                                 f"{final or target} yourself or pass a local folder")
    raise UserInputError(f"base model '{repo_id}' has no safetensors or PyTorch .bin weights at its top level "
                         f"(fetched: {', '.join(got[:12]) or 'nothing'}); transformers cannot load it")


def is_hub_id(name: str) -> bool:
    """``name`` has the form of a Hugging Face repo id (``Qwen/Qwen2.5-7B-Instruct``, ``builtin/tiny-qwen2``):
    one ``/``, dots allowed (a version, not a file suffix); not a path (``./x``, ``/x``, ``~/x``)."""
    return not name.startswith(("/", ".", "~")) and bool(_HF_ID.match(name))


def offline_unfetchable(name: str, file_path: Path | None) -> str | None:
    """Why the HF id ``name`` cannot be had in this run, or None: ``HF_HUB_OFFLINE`` is set and the model
    is not under ``FT_FILE_PATH/models``. Checked at start-up, before any dataset is prepared (issue 32.6).

    ``snapshot_download(local_dir=...)`` does not look in the Hub's own cache offline (huggingface_hub
    ``_snapshot_download.py``: the cached commit is used only when ``local_dir is None``), so a model
    that is not in its folder cannot be downloaded offline at all.
    """
    from ftagent.core.hub import hub_offline

    name = name.strip()
    if (not hub_offline() or name.startswith(BUILTIN_PREFIX) or Path(name).expanduser().is_dir()
            or not _HF_ID.match(name)):
        return None
    target = models_dir(Path(file_path or ".").absolute()) / name
    if has_model_files(target):
        return None
    return (f"base model '{name}' is not in {target} and HF_HUB_OFFLINE is set, so it cannot be downloaded. "
            f"Go online (unset HF_HUB_OFFLINE), copy the model's files into {target}, pass a local folder, "
            "or use builtin/tiny-qwen2")


@contextmanager
def _unlinked_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` whose file the holder removes on release (issue 32: a failed Hub
    download left an empty ``models/ORG/.NAME.lock`` and ``models/ORG/`` behind for good).

    filelock's Unix lock never deletes its file, because a waiter blocked on the old file would then hold a
    lock nobody else sees. The usual cure is used here: after ``flock`` returns, the holder checks that
    ``path`` still names the file it locked, else it retries on the new one; so removing it (and its
    folder, when empty) on release is safe for every process that takes the lock this way.
    """
    import fcntl

    while True:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:  # the folder was removed by a releasing holder in between: again
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
        except BaseException:
            os.close(fd)
            raise
        if same:
            break
        os.close(fd)  # locked a file its holder had already removed: take the current one
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
        with suppress(OSError):  # only an empty folder (a failed download's ORG/); a waiter re-creates it
            path.parent.rmdir()
        os.close(fd)


def download_once(repo_id: str, target: Path) -> Path:
    """Download ``repo_id`` into ``target`` unless another session did (one lock per model folder).

    The download goes to a private staging folder that is renamed into place when complete, so a
    session never sees (or uses) a half-downloaded model; the lock leaves no file behind.
    """
    with _unlinked_lock(target.parent / f".{target.name}.lock"):
        if has_model_files(target):
            return target
        remove_stale_staging(target, "downloading")
        staging = target.parent / f".{target.name}.downloading-{os.getpid()}"
        try:
            _download(repo_id, staging, final=target)
            shutil.rmtree(target, ignore_errors=True)
            staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target
