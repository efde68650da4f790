"""Which inference backend an evaluation uses: ``hf``, ``vllm`` (in-process) or ``vllm-server``.

A GPU alone is not enough: vLLM is in no default tool env, and a config naming
``VLLMwithChatTemplate`` in an env without vLLM fails every evaluation (the baseline first). The
eval env is probed once (``python -c "import vllm"`` through the runner, tool ``eval``) and the answer
cached per env for the life of the process. When the eval env lacks vLLM but the separate vLLM env
(:mod:`ftagent.runners.vllmenv`) imports it and the runner runs processes on this host (local or
conda, not Docker: the vLLM env is a host venv), the model is served by an OpenAI-compatible vLLM
server and OpenCompass calls it (``vllm-server``). Otherwise the HF backend runs on the GPU(s), and
the caller is warned once per env. ``FT_EVAL_BACKEND`` forces a backend; a forced backend that cannot
work is a :class:`StepError` (ENV) with a suggestion, never a silent fallback.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from ftagent.core.errors import ErrorType, StepError
from ftagent.runners.base import Runner, capabilities

log = logging.getLogger(__name__)
PROBE_TIMEOUT_S = 300.0
PROBE_CODE = "import vllm; print('vllm', vllm.__version__)"
_PROBES: dict[str, VllmProbe] = {}
_WARNED: set[str] = set()
EvalBackend = Literal["auto", "hf", "vllm", "vllm-server"]


class VllmProbe(BaseModel):
    """Whether ``import vllm`` works in one eval env."""

    env: str
    available: bool
    version: str | None = None
    detail: str = ""  # last log lines when the import failed


class BackendChoice(BaseModel):
    """The backend and device of one evaluation, and why."""

    backend: Literal["hf", "vllm", "vllm-server"]
    device: Literal["cpu", "cuda"]
    reason: str
    warning: str | None = None  # set when a GPU is present but vLLM is not usable


class ServerCheck(BaseModel):
    """Whether a model server (the vLLM env) can be started on this host, and why not."""

    available: bool
    detail: str = ""  # e.g. "no vLLM env at /x"


def _unwrap(runner: Any) -> Any:
    seen = 0
    while getattr(runner, "inner", None) is not None and seen < 8:
        runner, seen = runner.inner, seen + 1
    return runner


def runs_on_host(runner: Any) -> bool:
    """True when ``runner`` (unwrapped) declares ``runs_on_host`` (local, conda: its commands are
    processes of this host): only those can reach a server started from the host's vLLM env."""
    return capabilities(_unwrap(runner)).runs_on_host


def env_identity(runner: Any) -> str:
    """A stable name for the eval env behind ``runner`` (wrappers with ``.inner`` are unwrapped)."""
    runner = _unwrap(runner)
    kind = type(runner).__name__
    for attr in ("tools_env", "env_name", "image"):  # local, conda, docker (a computed tag)
        try:
            value = getattr(runner, attr, None)
        except Exception:  # noqa: BLE001 - a property that cannot answer names no env
            value = None
        if value:
            return f"{kind}:{value}"
    return f"{kind}:{id(runner)}"


def probe_vllm(runner: Runner, *, timeout: float | None = PROBE_TIMEOUT_S) -> VllmProbe:
    """``import vllm`` in the eval env of ``runner`` (once per env, then cached)."""
    env = env_identity(runner)
    if env in _PROBES:
        return _PROBES[env]
    with tempfile.TemporaryDirectory(prefix="ftagent-vllm-probe-") as tmp:
        try:
            res = runner.run(["python", "-c", PROBE_CODE], tool="eval", workdir=Path(tmp), timeout=timeout)
            ok, tail = res.ok, res.log_tail
        except Exception as exc:  # noqa: BLE001 - a runner that cannot start the probe means "no vLLM"
            ok, tail = False, f"{type(exc).__name__}: {exc}"
    version = None
    if ok:
        lines = [ln for ln in tail.splitlines() if ln.startswith("vllm ")]
        version = lines[-1].split(" ", 1)[1].strip() if lines else None
    probe = VllmProbe(env=env, available=ok, version=version, detail="" if ok else "\n".join(tail.splitlines()[-5:]))
    _PROBES[env] = probe
    log.info("vLLM probe in %s: %s", env, f"vllm {version}" if ok else "not importable")
    return probe


def clear_probe_cache() -> None:
    """Forget every probe (tests; an env that was just changed)."""
    _PROBES.clear()
    _WARNED.clear()


def _forced_error(message: str, suggestion: str) -> StepError:
    return StepError(message, error_type=ErrorType.ENV, suggestion=suggestion)


def _forced(forced: EvalBackend, gpu_count: int, runner: Runner | None, probe: Callable[[Runner], VllmProbe],
            server: Callable[[], ServerCheck] | None) -> BackendChoice:
    device: Literal["cpu", "cuda"] = "cuda" if gpu_count > 0 else "cpu"
    how = "set FT_EVAL_BACKEND=auto (or hf)"
    if forced == "hf":
        return BackendChoice(backend="hf", device=device, reason="FT_EVAL_BACKEND=hf")
    if forced == "vllm":
        if gpu_count <= 0 or runner is None:
            raise _forced_error("FT_EVAL_BACKEND=vllm needs a GPU and a runner", how)
        result = probe(runner)
        if not result.available:
            raise _forced_error(f"FT_EVAL_BACKEND=vllm but vLLM is not importable in the eval env ({result.env})",
                                f"install vllm into the eval env, use FT_EVAL_BACKEND=vllm-server, or {how}")
        return BackendChoice(backend="vllm", device="cuda", reason=f"FT_EVAL_BACKEND=vllm ({result.env})")
    if runner is None or not runs_on_host(runner):
        raise _forced_error(f"FT_EVAL_BACKEND=vllm-server needs a runner whose processes run on this host "
                            f"(local or conda), not {type(_unwrap(runner)).__name__}: the vLLM env is a host venv",
                            f"use FT_ENV_TYPE=local or conda, or {how}")
    check = server() if server is not None else ServerCheck(available=False, detail="no model server configured")
    if not check.available:
        raise _forced_error(f"FT_EVAL_BACKEND=vllm-server but the vLLM env is not usable: {check.detail}",
                            f"run `ftagent env setup --gpu` (builds FT_VLLM_ENV), or {how}")
    return BackendChoice(backend="vllm-server", device=device, reason="FT_EVAL_BACKEND=vllm-server")


def choose_backend(gpu_count: int, runner: Runner | None, *, probe: Callable[[Runner], VllmProbe] = probe_vllm,
                   forced: EvalBackend = "auto", server: Callable[[], ServerCheck] | None = None) -> BackendChoice:
    """The backend of one evaluation.

    ``auto``: HF on the CPU without a GPU (no probe then); with a GPU, ``vllm`` when the eval env
    imports vllm, else ``vllm-server`` when the runner runs on this host and ``server()`` says the
    vLLM env is usable, else HF on the GPU with a warning.

    Args:
        gpu_count: visible GPUs.
        runner: the eval runner (None: nothing can be probed).
        probe: ``import vllm`` in the eval env (injectable for tests).
        forced: ``FT_EVAL_BACKEND``; anything but ``auto`` is used as it is or fails.
        server: whether the vLLM env can serve (called only when needed; None = it cannot).

    Raises:
        StepError(ENV): a forced backend that cannot work here (with a suggestion).
    """
    if forced != "auto":
        return _forced(forced, gpu_count, runner, probe, server)
    if gpu_count <= 0:
        return BackendChoice(backend="hf", device="cpu", reason="no GPU: HF backend on the CPU")
    if runner is None:
        return BackendChoice(backend="hf", device="cuda", reason="no runner to probe vLLM with",
                             warning="vLLM could not be probed (no runner): evaluating with the HF backend")
    result = probe(runner)
    if result.available:
        return BackendChoice(backend="vllm", device="cuda",
                             reason=f"{gpu_count} GPU(s) and vllm {result.version or '?'} in {result.env}")
    if not runs_on_host(runner):
        why = (f"and the vLLM env cannot serve it: {type(_unwrap(runner)).__name__} runs OpenCompass outside "
               "this host, where the vLLM env (a host venv) is not reachable")
    else:
        check = server() if server is not None else ServerCheck(available=False, detail="no model server configured")
        if check.available:
            return BackendChoice(backend="vllm-server", device="cuda",
                                 reason=f"{gpu_count} GPU(s); vLLM server from the vLLM env, OpenCompass in {result.env}")
        why = f"and the vLLM env is not usable ({check.detail})"
    warning = (f"{gpu_count} GPU(s) present but vLLM is not importable in the eval env ({result.env}) {why}; "
               "evaluating with the HF backend on the GPU (slower). Run `ftagent env setup --gpu` to build the "
               "vLLM env" + (f". Probe: {result.detail.splitlines()[-1]}" if result.detail.strip() else ""))
    return BackendChoice(backend="hf", device="cuda", reason="vLLM not importable in the eval env", warning=warning)


def warn_once(choice: BackendChoice, env: str, on_warning: Callable[[str], None] | None) -> None:
    """Report ``choice.warning`` once per env (to ``on_warning`` and the log)."""
    if not choice.warning or env in _WARNED:
        return
    _WARNED.add(env)
    log.warning(choice.warning)
    if on_warning is not None:
        on_warning(choice.warning)
