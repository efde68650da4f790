"""Built-in base models and base-model resolution.

``resolve_base_model(name, file_path, python_or_runner)`` turns the user's ``--base-model`` into a
local folder:

* ``builtin/<name>`` (e.g. ``builtin/tiny-qwen2``) → built once into
  ``FT_FILE_PATH/models/builtin/<name>`` by a standalone script run with the tool env's python (so the
  files are written by the transformers that training and evaluation use);
* an existing local folder → itself;
* ``<name>`` present under ``FT_FILE_PATH/models/`` → that folder;
* a Hugging Face id ``org/name`` → ``FT_FILE_PATH/models/org/name`` if present, else downloaded there
  with ``huggingface_hub.snapshot_download``, only the files a model needs (:data:`MODEL_FILES`).
  Offline or unreachable → :class:`EnvironmentFailure`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from pydantic import BaseModel

from ftagent.core.errors import EnvironmentFailure, UserInputError
from ftagent.core.paths import models_dir
from ftagent.runners.base import Mount, Runner

BUILTIN_PREFIX = "builtin/"
MARKER = ".ftagent_builtin.json"
_HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class BuiltinModel(BaseModel):
    """A model ftagent can build offline."""

    name: str
    description: str
    script: str
    default_seed: int = 2
    args: list[str] = []  # extra script arguments (sizes)


BUILTIN_MODELS: dict[str, BuiltinModel] = {
    "tiny-qwen2": BuiltinModel(
        name="tiny-qwen2",
        description="Qwen2 with hidden 128, 2 layers, 4 heads (2 KV), 558k params, 512-token BPE with "
        "single-digit tokens and ChatML; random init, learns demo_add in a few CPU minutes",
        script="tiny_qwen2_script.py",
    ),
    "qwen2-50m": BuiltinModel(
        name="qwen2-50m",
        description="Qwen2 with hidden 512, 12 layers, 8 heads (4 KV), 52M params, the tiny model's 512-token "
        "tokenizer; random init, for GPU throughput and memory checks (tests/gpu/run_device_check.sh)",
        script="tiny_qwen2_script.py",
        args=["--hidden", "512", "--layers", "12", "--heads", "8", "--kv-heads", "4", "--inter", "2304"],
    ),
}


class BuildMarker(BaseModel):
    """Written next to a built model; a build is reused only when every field matches."""

    name: str
    seed: int
    script_sha256: str
    args: list[str] = []


def builtin_dir(file_path: Path, name: str) -> Path:
    """Where ``builtin/<name>`` lives under ``FT_FILE_PATH``."""
    return models_dir(file_path) / "builtin" / name


def _spec(name: str) -> BuiltinModel:
    if name not in BUILTIN_MODELS:
        from ftagent.core.registry import did_you_mean

        known = [BUILTIN_PREFIX + key for key in BUILTIN_MODELS]
        full = BUILTIN_PREFIX + name
        raise UserInputError(f"unknown built-in model '{full}'.{did_you_mean(full, known)}"
                             f" Available: {', '.join(known)}")
    return BUILTIN_MODELS[name]


def _script_path(spec: BuiltinModel) -> Path:
    return Path(__file__).with_name(spec.script)


def _expected_marker(spec: BuiltinModel, seed: int) -> BuildMarker:
    digest = hashlib.sha256(_script_path(spec).read_bytes()).hexdigest()
    return BuildMarker(name=spec.name, seed=seed, script_sha256=digest, args=spec.args)


def is_built(out_dir: Path, name: str, seed: int | None = None) -> bool:
    """True when ``out_dir`` holds a complete build of ``name`` with this seed and script version."""
    spec = _spec(name)
    marker = Path(out_dir) / MARKER
    if not marker.is_file():
        return False
    try:
        found = BuildMarker.model_validate_json(marker.read_text(encoding="utf-8"))
    except ValueError:
        return False
    return found == _expected_marker(spec, spec.default_seed if seed is None else seed)


def _build_env() -> dict[str, str]:
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return env


def _run_script(script: Path, tmp: Path, seed: int, python_or_runner: Path | str | Runner,
                timeout: float, extra: list[str] | None = None) -> None:
    args = [str(tmp), "--seed", str(seed), *(extra or [])]
    if isinstance(python_or_runner, (str, Path)):
        try:
            proc = subprocess.run([str(python_or_runner), str(script), *args], capture_output=True,
                                  text=True, timeout=timeout, env=_build_env(), check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EnvironmentFailure(f"cannot build the built-in model with {python_or_runner}: {exc}") from exc
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-20:])
            raise EnvironmentFailure(f"building the built-in model failed (exit {proc.returncode}):\n{tail}")
        return
    result = python_or_runner.run(
        ["python", str(script), *args], tool="data", workdir=tmp.parent,
        env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        mounts=[Mount(source=script.parent)], timeout=timeout,
    )
    if not result.ok:
        raise EnvironmentFailure(f"building the built-in model failed (exit {result.exit_code}, "
                                 f"timed out: {result.timed_out}):\n{result.log_tail}")


def _remove_stale_staging(final: Path, kind: str) -> None:
    """Remove every ``.<name>.<kind>-<pid>`` staging folder beside ``final``; call it holding the folder's lock.

    A staging folder exists only while its builder holds that OS file lock, which a killed process drops:
    whatever the lock holder finds is a killed build's or download's leftover (issue 34.12: before, each
    killed build left its folder for good).
    """
    for stale in final.parent.glob(f".{final.name}.{kind}-*"):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)


def build_builtin(
    name: str,
    out_dir: Path,
    python_or_runner: Path | str | Runner,
    *,
    seed: int | None = None,
    force: bool = False,
    timeout: float = 600,
) -> Path:
    """Build built-in model ``name`` into ``out_dir`` once (file lock + marker; atomic rename).

    Args:
        name: key of :data:`BUILTIN_MODELS` (without ``builtin/``).
        out_dir: final folder.
        python_or_runner: the tool env's python executable, or a Runner (runs ``python`` in tool "data").
        seed: weight-initialisation seed (default: the model's default, 2 for tiny-qwen2).
        force: rebuild even when a matching build exists.
        timeout: seconds for the build script.

    Returns:
        ``out_dir``.

    Raises:
        EnvironmentFailure: when the script fails (message carries the output tail).
    """
    from filelock import FileLock

    spec = _spec(name)
    seed = spec.default_seed if seed is None else seed
    out_dir = Path(out_dir).absolute()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out_dir.parent / f".{out_dir.name}.lock")):
        if not force and is_built(out_dir, name, seed):
            return out_dir
        _remove_stale_staging(out_dir, "building")
        tmp = out_dir.parent / f".{out_dir.name}.building-{os.getpid()}"
        try:
            _run_script(_script_path(spec), tmp, seed, python_or_runner, timeout, spec.args)
            (tmp / MARKER).write_text(_expected_marker(spec, seed).model_dump_json(), encoding="utf-8")
            shutil.rmtree(out_dir, ignore_errors=True)
            tmp.rename(out_dir)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


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


def _has_model_files(folder: Path) -> bool:
    return folder.is_dir() and (folder / "config.json").is_file()


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
        _spec(name[len(BUILTIN_PREFIX):])
        return
    if Path(name).expanduser().is_dir():
        check_model_folder(Path(name).expanduser(), name)
        return
    if file_path is not None and _has_model_files(models_dir(file_path) / name):
        check_model_folder(models_dir(file_path) / name, name)  # one copied in by hand: not fetched again
        return
    if not is_hub_id(name):
        raise UserInputError(f"base model '{name}' is neither a built-in model (builtin/...), an existing "
                             "local folder, nor a Hugging Face repo id like 'Qwen/Qwen2.5-7B-Instruct'")


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
    if _has_model_files(target):
        return None
    return (f"base model '{name}' is not in {target} and HF_HUB_OFFLINE is set, so it cannot be downloaded. "
            f"Go online (unset HF_HUB_OFFLINE), copy the model's files into {target}, pass a local folder, "
            "or use builtin/tiny-qwen2")


def base_model_dir(name: str, file_path: Path) -> Path:
    """The folder :func:`resolve_base_model` returns for ``name``, without building or downloading it:
    ``FT_FILE_PATH/models/builtin/<name>``, the local folder, or ``FT_FILE_PATH/models/<name>``."""
    name = name.strip()
    if name.startswith(BUILTIN_PREFIX):
        return builtin_dir(file_path, name[len(BUILTIN_PREFIX):])
    local = Path(name).expanduser()
    if local.is_dir():
        return local.absolute()
    return (models_dir(file_path) / name).absolute()


def resolve_base_model(name: str, file_path: Path, python_or_runner: Path | str | Runner) -> Path:
    """Turn a ``--base-model`` value into a local model folder (building or downloading when needed):
    :func:`fetch_base_model` into :func:`base_model_dir`'s folder (a session's start-up computed that folder
    already and calls :func:`fetch_base_model` itself).

    Args:
        name: ``builtin/<name>``, a local folder, a folder name under ``FT_FILE_PATH/models``, or an
            HF id ``org/name``.
        file_path: ``FT_FILE_PATH``.
        python_or_runner: the tool env's python, or a Runner, used to build built-in models.

    Raises:
        UserInputError: for an unknown built-in name or a value that is neither a folder nor an HF id.
        EnvironmentFailure: when a build or a download fails (offline Hub included).
    """
    return fetch_base_model(name, base_model_dir(name, file_path), python_or_runner, file_path)


def fetch_base_model(name: str, folder: Path, python_or_runner: Path | str | Runner,
                     file_path: Path | None = None) -> Path:
    """Make ``folder`` (:func:`base_model_dir` of ``name``) hold the model: build a built-in one, use a
    local folder as it is, download an HF id once; returns the folder.

    Raises:
        UserInputError / EnvironmentFailure: as :func:`resolve_base_model`.
    """
    name = name.strip()
    if name.startswith(BUILTIN_PREFIX):
        return build_builtin(name[len(BUILTIN_PREFIX):], folder, python_or_runner)
    if Path(name).expanduser().is_dir() or _has_model_files(folder):
        return folder
    check_model_name(name, file_path)  # raises for anything that is not an HF id
    return _download_once(name, folder)


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


def _download_once(repo_id: str, target: Path) -> Path:
    """Download ``repo_id`` into ``target`` unless another session did (one lock per model folder).

    The download goes to a private staging folder that is renamed into place when complete, so a
    session never sees (or uses) a half-downloaded model; the lock leaves no file behind.
    """
    with _unlinked_lock(target.parent / f".{target.name}.lock"):
        if _has_model_files(target):
            return target
        _remove_stale_staging(target, "downloading")
        staging = target.parent / f".{target.name}.downloading-{os.getpid()}"
        try:
            _download(repo_id, staging, final=target)
            shutil.rmtree(target, ignore_errors=True)
            staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


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


def read_marker(out_dir: Path) -> dict:
    """The build marker of a built model (empty when absent)."""
    marker = Path(out_dir) / MARKER
    return json.loads(marker.read_text(encoding="utf-8")) if marker.is_file() else {}
