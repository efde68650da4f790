"""Which inference backend an evaluation uses: vLLM only where the eval env can import it.

A GPU alone is not enough: vLLM is in no default tool env, and a config naming
``VLLMwithChatTemplate`` in an env without vLLM fails every evaluation (the baseline first). The
eval env is probed once (``python -c "import vllm"`` through the runner, tool ``eval``) and the answer
cached per env for the life of the process. Without vLLM the HF backend runs on the GPU(s) instead,
and the caller is warned once per env.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from ftagent.runners.base import Runner

log = logging.getLogger(__name__)
PROBE_TIMEOUT_S = 300.0
PROBE_CODE = "import vllm; print('vllm', vllm.__version__)"
_PROBES: dict[str, VllmProbe] = {}
_WARNED: set[str] = set()


class VllmProbe(BaseModel):
    """Whether ``import vllm`` works in one eval env."""

    env: str
    available: bool
    version: str | None = None
    detail: str = ""  # last log lines when the import failed


class BackendChoice(BaseModel):
    """The backend and device of one evaluation, and why."""

    backend: Literal["hf", "vllm"]
    device: Literal["cpu", "cuda"]
    reason: str
    warning: str | None = None  # set when a GPU is present but vLLM is not usable


def env_identity(runner: Any) -> str:
    """A stable name for the eval env behind ``runner`` (wrappers with ``.inner`` are unwrapped)."""
    seen = 0
    while getattr(runner, "inner", None) is not None and seen < 8:
        runner, seen = runner.inner, seen + 1
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


def choose_backend(gpu_count: int, runner: Runner | None, *,
                   probe: Callable[[Runner], VllmProbe] = probe_vllm) -> BackendChoice:
    """vLLM when a GPU is present and the eval env imports vllm; HF on the GPU when it does not;
    HF on the CPU without a GPU (no probe then)."""
    if gpu_count <= 0:
        return BackendChoice(backend="hf", device="cpu", reason="no GPU: HF backend on the CPU")
    if runner is None:
        return BackendChoice(backend="hf", device="cuda", reason="no runner to probe vLLM with",
                             warning="vLLM could not be probed (no runner): evaluating with the HF backend")
    result = probe(runner)
    if result.available:
        return BackendChoice(backend="vllm", device="cuda",
                             reason=f"{gpu_count} GPU(s) and vllm {result.version or '?'} in {result.env}")
    warning = (f"{gpu_count} GPU(s) present but vLLM is not importable in the eval env ({result.env}); "
               "evaluating with the HF backend on the GPU (slower). Install vllm into the eval env "
               "to use it" + (f". Probe: {result.detail.splitlines()[-1]}" if result.detail.strip() else ""))
    return BackendChoice(backend="hf", device="cuda", reason="vLLM not importable in the eval env", warning=warning)


def warn_once(choice: BackendChoice, env: str, on_warning: Callable[[str], None] | None) -> None:
    """Report ``choice.warning`` once per env (to ``on_warning`` and the log)."""
    if not choice.warning or env in _WARNED:
        return
    _WARNED.add(env)
    log.warning(choice.warning)
    if on_warning is not None:
        on_warning(choice.warning)
