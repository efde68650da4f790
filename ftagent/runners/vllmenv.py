"""The vLLM eval env: a virtualenv of its own beside the tool env, GPU machines only.

Why a second env (details in ``configs/envs/vllm.txt``): the vLLM releases built for torch 2.13.0
(0.28.0 to 0.32.0) need transformers 5 and numpy 2 (through opencv-python-headless>=4.13), while
OpenCompass 0.5.4 pins numpy<2 and its HF backend needs transformers 4: pip finds no solution for
``vllm==0.32.0`` with ``opencompass==0.5.4``. So the vLLM env holds vLLM only; the evaluator runs
vLLM from it (an OpenAI-compatible server, :func:`vllm_serve_argv`, or a generator script) and scores
with OpenCompass in the tool env.

* location: ``FT_VLLM_ENV`` (setting ``ft.vllm_env`` when present, else the environment variable),
  else ``FT_FILE_PATH/envs/vllm`` — :func:`vllm_env_path`;
* setup (``ftagent env setup`` on a GPU machine): venv, ``torch-gpu.txt``, then
  ``pip install -c vllm.lock.txt -r vllm.txt torch==2.13.0 torchvision==0.28.0``; a marker holds the
  hash of those files — :func:`setup_vllm_env`;
* check: ``import vllm`` (+ versions, CUDA) and optionally loading a model folder's tokenizer and
  config there — :func:`check_vllm_env`; :func:`vllm_available` caches the yes/no per env.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from ftagent.core.errors import EnvironmentFailure
from ftagent.core.paths import envs_dir
from ftagent.runners.cudacheck import CUDA_PROBE, CudaProbe, CudaVerdict, cuda_verdict
from ftagent.runners.toolenv import (
    ENVS_DIR,
    TORCH_PIN,
    TORCHVISION_PIN,
    _pip_env,
    install_venv,
    last_error_line,
    read_marker,
    setup_lock,
    tools_python,
)

VLLM_PIN = "vllm==0.32.0"
VLLM_MARKER = ".ftagent_tools.json"
ENV_VAR = "FT_VLLM_ENV"
VERIFY_SCRIPT = CUDA_PROBE + """
import importlib, json, sys
out = {"versions": {}, "errors": [], "cuda": None, "model": None}
for name in ("vllm", "torch", "transformers", "tokenizers"):
    try:
        out["versions"][name] = str(getattr(importlib.import_module(name), "__version__", "?"))
    except Exception as exc:
        out["errors"].append(f"import {name}: {type(exc).__name__}: {str(exc)[:300]}")
out["cuda_probe"] = _cuda_probe()
out["cuda"] = out["cuda_probe"]["available"]
if len(sys.argv) > 1:
    try:
        from transformers import AutoConfig, AutoTokenizer
        tok = AutoTokenizer.from_pretrained(sys.argv[1])
        cfg = AutoConfig.from_pretrained(sys.argv[1])
        ids = tok.apply_chat_template([{"role": "user", "content": "What is 2 + 3?"}], tokenize=True,
                                      add_generation_prompt=True) if tok.chat_template else tok("2 + 3")["input_ids"]
        if hasattr(ids, "keys"):
            ids = ids["input_ids"]
        out["model"] = {"tokenizer": type(tok).__name__, "vocab": len(tok), "model_type": cfg.model_type,
                        "prompt_ids": list(ids)}
    except Exception as exc:
        out["errors"].append(f"load {sys.argv[1]}: {type(exc).__name__}: {str(exc)[:300]}")
print("FTAGENT_VLLM_CHECK " + json.dumps(out))
"""
_AVAILABLE: dict[str, bool] = {}


def vllm_env_path(settings) -> Path:
    """The vLLM env of these settings: ``FT_VLLM_ENV``, else ``FT_FILE_PATH/envs/vllm``."""
    explicit = getattr(settings.ft, "vllm_env", None) or os.environ.get(ENV_VAR)
    return Path(explicit or envs_dir(settings.ft.file_path) / "vllm").absolute()


def vllm_python(env_path: Path) -> Path:
    """The vLLM env's python executable (a venv like the tool env)."""
    return tools_python(env_path)


def vllm_requirement_files(envs_dir: Path = ENVS_DIR) -> list[Path]:
    """The files that define the vLLM env, in install order (CUDA torch, vllm, lock)."""
    return [envs_dir / "torch-gpu.txt", envs_dir / "vllm.txt", envs_dir / "vllm.lock.txt"]


def vllm_requirements_hash(envs_dir: Path = ENVS_DIR) -> str:
    """sha256 over the vLLM env's requirement files and pins."""
    h = hashlib.sha256(f"{VLLM_PIN} {TORCH_PIN} {TORCHVISION_PIN}\n".encode())
    for path in vllm_requirement_files(envs_dir):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def vllm_install_steps(envs_dir: Path = ENVS_DIR) -> list[tuple[str, list[str]]]:
    """``(description, pip arguments)`` of the vLLM env's installs."""
    torch_req, vllm_req, lock = vllm_requirement_files(envs_dir)
    return [("install torch (CUDA)", ["install", "-r", str(torch_req)]),
            ("install vLLM", ["install", "-c", str(lock), "-r", str(vllm_req), TORCH_PIN, TORCHVISION_PIN])]


class VllmEnvReport(BaseModel):
    """What :func:`check_vllm_env` found."""

    path: Path
    exists: bool
    versions: dict[str, str] = Field(default_factory=dict)
    cuda: bool | None = None
    marker_current: bool = False
    model: dict | None = None  # the checked model folder's tokenizer/config, when one was given
    errors: list[str] = Field(default_factory=list)
    cuda_check: CudaVerdict | None = None  # torch against the host's driver (where NVML sees one)

    @property
    def imports_ok(self) -> bool:
        return self.exists and not self.errors and "vllm" in self.versions

    @property
    def ok(self) -> bool:
        return self.imports_ok and (self.cuda_check is None or self.cuda_check.ok)


def check_env_python(python: Path | str, model_dir: Path | None = None, timeout: float = 300) -> dict:
    """Run the check script with ``python`` (any env): versions, CUDA, and ``model_dir``'s tokenizer.

    Returns the script's JSON (``versions``, ``errors``, ``cuda``, ``model``); never raises.
    """
    argv = [str(python), "-I", "-c", VERIFY_SCRIPT, *([str(Path(model_dir).absolute())] if model_dir else [])]
    env = {**_pip_env(), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"versions": {}, "errors": [f"cannot run {python}: {exc}"], "cuda": None, "model": None}
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("FTAGENT_VLLM_CHECK ")), None)
    if line is None:
        return {"versions": {}, "errors": [f"check failed (exit {proc.returncode}): {last_error_line(proc.stderr)}"],
                "cuda": None, "model": None}
    return json.loads(line.split(" ", 1)[1])


def check_vllm_env(env_path: Path, model_dir: Path | None = None, timeout: float = 300) -> VllmEnvReport:
    """Import vLLM in the env (and load ``model_dir``'s tokenizer + config there); never raises."""
    env_path = Path(env_path).absolute()
    report = VllmEnvReport(path=env_path, exists=vllm_python(env_path).exists())
    if not report.exists:
        report.errors.append(f"no vLLM env at {env_path}; run `ftagent env setup` on a GPU machine")
        return report
    report.marker_current = read_marker(env_path).get("requirements_sha256") == vllm_requirements_hash()
    found = check_env_python(vllm_python(env_path), model_dir, timeout)
    report.versions, report.errors = found["versions"], found["errors"]
    report.cuda, report.model = found.get("cuda"), found.get("model")
    from ftagent.core.hardware import detect_gpus

    driver = detect_gpus().driver_version
    if driver and found.get("cuda_probe") is not None:  # no driver (CPU machines, tests): nothing to check against
        report.cuda_check = cuda_verdict(driver, CudaProbe.model_validate(found["cuda_probe"]),
                                         python=str(vllm_python(env_path)), packages=(TORCH_PIN, TORCHVISION_PIN))
    return report


def vllm_available(env_path: Path, *, timeout: float = 300, refresh: bool = False) -> bool:
    """True when ``import vllm`` works in the env (cached per env for the life of the process)."""
    key = str(Path(env_path).absolute())
    if refresh or key not in _AVAILABLE:
        _AVAILABLE[key] = vllm_python(env_path).exists() and check_vllm_env(env_path, timeout=timeout).ok
    return _AVAILABLE[key]


def vllm_serve_argv(env_path: Path, model: Path | str, *, port: int, host: str = "127.0.0.1",
                    served_model_name: str | None = None, tensor_parallel_size: int = 1,
                    max_model_len: int | None = None, gpu_memory_utilization: float = 0.9,
                    lora_modules: dict[str, str] | None = None, max_lora_rank: int | None = None,
                    seed: int = 0, data_parallel_size: int = 1, data_parallel_rpc_port: int | None = None) -> list[str]:
    """The command line of an OpenAI-compatible vLLM server for ``model`` from the vLLM env.

    ``lora_modules`` maps adapter names to adapter folders (vLLM serves them natively; a model
    served so answers under each adapter's name). ``data_parallel_size`` > 1: that many replicas of
    ``tensor_parallel_size`` GPUs each behind the one server.
    """
    argv = [str(vllm_python(env_path)), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
            "--host", host, "--port", str(port), "--tensor-parallel-size", str(tensor_parallel_size),
            "--gpu-memory-utilization", str(gpu_memory_utilization), "--seed", str(seed)]
    if served_model_name:
        argv += ["--served-model-name", served_model_name]
    if max_model_len:
        argv += ["--max-model-len", str(max_model_len)]
    if lora_modules:
        argv += ["--enable-lora", "--lora-modules", *(f"{k}={v}" for k, v in lora_modules.items())]
        if max_lora_rank:
            argv += ["--max-lora-rank", str(max_lora_rank)]
    if data_parallel_size > 1:  # vLLM's own DP: one engine core per replica behind this API server, which
        # balances the requests (vllm/config/parallel.py ParallelConfig.data_parallel_size); its messaging port
        # is fixed by default (data_parallel_rpc_port 29550): two servers at once need their own
        argv += ["--data-parallel-size", str(data_parallel_size)]
        if data_parallel_rpc_port:
            argv += ["--data-parallel-rpc-port", str(data_parallel_rpc_port)]
    return argv


def setup_vllm_env(
    env_path: Path,
    *,
    force: bool = False,
    base_python: str = sys.executable,
    pip_cmd: list[str] | None = None,
    envs_dir: Path = ENVS_DIR,
    step_timeout: float = 3600,
    progress: Callable[[str], None] | None = None,
    verify: bool = True,
    lock_timeout: float = 0,
) -> tuple[bool, VllmEnvReport]:
    """Create (or reuse) the vLLM env at ``env_path`` (GPU machines: it installs CUDA torch and vLLM).

    Returns:
        ``(skipped, report)``: skipped is True when the marker matched and nothing was installed.

    Raises:
        EnvironmentFailure: when a step fails (with the pip log's tail) or the check fails.
        UserInputError: another setup holds the env's lock (``lock_timeout`` seconds; the message names it).
    """
    env_path = Path(env_path).absolute()
    say = progress or (lambda _msg: None)
    digest = vllm_requirements_hash(envs_dir)
    if not force and vllm_python(env_path).exists() and read_marker(env_path).get("requirements_sha256") == digest:
        say("vLLM env is up to date")
        report = check_vllm_env(env_path) if verify else VllmEnvReport(path=env_path, exists=True)
        _raise_on_cuda(report)
        return True, report
    with setup_lock(env_path, lock_timeout):  # one setup per env folder at a time (issue 34 item 3)
        (env_path / VLLM_MARKER).unlink(missing_ok=True)
        install_venv(env_path, vllm_install_steps(envs_dir), base_python=base_python, pip_cmd=pip_cmd,
                     step_timeout=step_timeout, say=say)
        report = VllmEnvReport(path=env_path, exists=True)
        if verify:
            say("verifying import vllm")
            report = check_vllm_env(env_path)
            if not report.imports_ok:
                raise EnvironmentFailure("vLLM env check failed: " + "; ".join(report.errors))
        (env_path / VLLM_MARKER).write_text(json.dumps({
            "requirements_sha256": digest, "gpu": True, "versions": report.versions,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S")}, indent=2), encoding="utf-8")
    report.marker_current = True
    _AVAILABLE.pop(str(env_path), None)
    _raise_on_cuda(report)
    return False, report


def _raise_on_cuda(report: VllmEnvReport) -> None:
    """vLLM's torch cannot use this machine's driver: the verdict's message and fix (a reinstall would not help)."""
    if report.cuda_check is not None and not report.cuda_check.ok:
        raise EnvironmentFailure(f"vLLM env {report.path}: {report.cuda_check.message}")
