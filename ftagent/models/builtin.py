"""The built-in models ftagent builds offline (``builtin/<name>``, e.g. ``builtin/tiny-qwen2``): their specs,
building one once into ``FT_FILE_PATH/models/builtin/<name>`` by a standalone script run with the tool env's
python (so the files are written by the transformers that training and evaluation use), and the build marker
that says a build is current.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

from pydantic import BaseModel

from ftagent.core.errors import EnvironmentFailure, UserInputError
from ftagent.core.paths import models_dir
from ftagent.models.folders import remove_stale_staging
from ftagent.runners.base import Mount, Runner

BUILTIN_PREFIX = "builtin/"
MARKER = ".ftagent_builtin.json"


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


def builtin_spec(name: str) -> BuiltinModel:
    """The spec of ``builtin/<name>`` (UserInputError with a did-you-mean when unknown)."""
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
    spec = builtin_spec(name)
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

    spec = builtin_spec(name)
    seed = spec.default_seed if seed is None else seed
    out_dir = Path(out_dir).absolute()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out_dir.parent / f".{out_dir.name}.lock")):
        if not force and is_built(out_dir, name, seed):
            return out_dir
        remove_stale_staging(out_dir, "building")
        tmp = out_dir.parent / f".{out_dir.name}.building-{os.getpid()}"
        try:
            _run_script(_script_path(spec), tmp, seed, python_or_runner, timeout, spec.args)
            (tmp / MARKER).write_text(_expected_marker(spec, seed).model_dump_json(), encoding="utf-8")
            shutil.rmtree(out_dir, ignore_errors=True)
            tmp.rename(out_dir)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def read_marker(out_dir: Path) -> dict:
    """The build marker of a built model (empty when absent)."""
    marker = Path(out_dir) / MARKER
    return json.loads(marker.read_text(encoding="utf-8")) if marker.is_file() else {}
