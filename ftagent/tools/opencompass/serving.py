"""A model server for the ``vllm-server`` backend: start it, wait until it answers, always stop it.

OpenCompass 0.5.4 and vLLM cannot share an env (see :mod:`ftagent.runners.vllmenv`), so for this
backend ftagent starts an OpenAI-compatible server from the vLLM env on this host (a free loopback
port, its own process group, its log in the eval work dir) and OpenCompass, in the tool env, calls it
(:class:`~ftagent.tools.opencompass.oc_ext.TrainedFormatOpenAIModel`). The server is ready when
``GET /v1/models`` lists the served name; it is stopped (the whole process group) when the context
exits, also on errors and timeouts. A server that does not come up is a ``StepError(EVAL)`` with the
tail of its log, never a crash.

The command line is injectable (:class:`ServeCommand`): the default is :class:`VllmServeCommand`
(``vllm_serve_argv`` with the session's vLLM env); tests pass a stand-in with the same flags.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field

from ftagent.core.errors import ErrorType, StepError
from ftagent.runners import reaper
from ftagent.runners.process import kill_tree, passthrough_env, start_supervised
from ftagent.runners.vllmenv import vllm_available, vllm_python, vllm_serve_argv
from ftagent.tools.opencompass.backend import ServerCheck
from ftagent.tools.opencompass.progress import ProgressCallback, safe_call
from ftagent.tools.opencompass.render import ModelSpec

log = logging.getLogger(__name__)
HOST = "127.0.0.1"
START_TIMEOUT_S = 1800.0  # a large model's load + CUDA graph capture can take many minutes
POLL_S = 0.5
STOP_GRACE_S = 15.0
SERVED_NAME = "ft-model"  # the full model (or the base model, when an adapter is served)
ADAPTER_NAME = "ft"  # a LoRA adapter; avoid names OpenCompass treats as OpenAI reasoning models (o1 ...)


class ServeRequest(BaseModel):
    """What to serve and how (the inputs of a :class:`ServeCommand`)."""

    model: str  # full model folder, or the base model when lora_modules is set
    tokenizer: str  # the folder whose chat template training used
    port: int
    host: str = HOST
    served_name: str = SERVED_NAME
    lora_modules: dict[str, str] = Field(default_factory=dict)  # adapter name -> adapter folder
    max_model_len: int | None = None
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    max_lora_rank: int | None = None
    dtype: str = "auto"
    data_parallel_size: int = 1  # vLLM's own data parallelism: replicas behind this one server
    data_parallel_rpc_port: int | None = None  # its DP messaging port (vLLM's default 29550 is fixed: one per slot)


@runtime_checkable
class ServeCommand(Protocol):
    """Builds the server's argv for a request (``--model --host --port --served-model-name
    --tokenizer --max-model-len --enable-lora --lora-modules name=path ...``, as vLLM's api_server)."""

    def __call__(self, request: ServeRequest) -> list[str]: ...


class VllmServeCommand:
    """The default :class:`ServeCommand`: ``vllm.entrypoints.openai.api_server`` of the vLLM env."""

    def __init__(self, env_path: Path) -> None:
        self.env_path = Path(env_path)

    def __call__(self, request: ServeRequest) -> list[str]:
        argv = vllm_serve_argv(self.env_path, request.model, port=request.port, host=request.host,
                               served_model_name=request.served_name,
                               tensor_parallel_size=request.tensor_parallel_size,
                               max_model_len=request.max_model_len,
                               gpu_memory_utilization=request.gpu_memory_utilization,
                               lora_modules=request.lora_modules or None, max_lora_rank=request.max_lora_rank,
                               data_parallel_size=request.data_parallel_size,
                               data_parallel_rpc_port=request.data_parallel_rpc_port)
        return argv + ["--tokenizer", request.tokenizer, "--dtype", request.dtype]

    def check(self) -> ServerCheck:
        """Whether the vLLM env imports vllm (cached per env)."""
        if not vllm_python(self.env_path).exists():
            return ServerCheck(available=False, detail=f"no vLLM env at {self.env_path}")
        if not vllm_available(self.env_path):
            return ServerCheck(available=False, detail=f"`import vllm` fails in {self.env_path}")
        return ServerCheck(available=True)


def server_check(command: ServeCommand) -> ServerCheck:
    """``command.check()`` when it has one; an injected command without it is taken as usable."""
    check = getattr(command, "check", None)
    return check() if callable(check) else ServerCheck(available=True)


class ServerHandle(BaseModel):
    """A running server."""

    base_url: str  # http://127.0.0.1:<port>
    served_name: str
    pid: int
    log_file: Path
    start_s: float  # seconds until /v1/models answered

    @property
    def api_base(self) -> str:
        """The OpenAI SDK's base URL."""
        return f"{self.base_url}/v1/"


# A split goes to the server in one wave (OpenCompass waits for a whole batch before the next: issue 41):
# up to this many requests per vLLM replica -- its default max_num_seqs for the API server below 70 GiB or on
# an A100 (vllm/engine/arg_utils.py EngineArgs.get_batch_defaults; 1024 on larger GPUs), more wait in vLLM's
# own queue -- and at most WAVE_CAP threads in OpenCompass's client (OpenAISDK.generate: one per request).
SERVER_SEQS_PER_REPLICA = 256
WAVE_CAP = 512


class Placement(BaseModel):
    """Where a trial's model server runs (K trials at once): its slot's GPUs and port (None: this process's
    GPUs, a free port)."""

    gpus: str | None = None
    port: int | None = None


def server_spec(mspec: ModelSpec, gpu_count: int, placement: Placement | None = None) -> ModelSpec:
    """The ``vllm-server`` model block on ``gpu_count`` GPUs: vLLM replicas over them (``--data-parallel-size`` =
    GPUs ÷ TP) and a wave (``batch_size``, also OpenCompass's ``max_workers``) that sends a split at once, not in
    waves of models.yaml's batch with every replica idle at each wave's tail; the slot's GPUs and port. Other
    backends unchanged (docs/gpu.md, Evaluation on every GPU)."""
    if mspec.backend != "vllm-server":
        return mspec
    dp = max(1, gpu_count // max(1, mspec.tensor_parallel_size)) if gpu_count else 1
    wave = min(WAVE_CAP, SERVER_SEQS_PER_REPLICA * dp)
    return mspec.model_copy(update={
        "data_parallel_size": dp, "batch_size": max(mspec.batch_size, wave),
        "cuda_visible_devices": placement.gpus if placement else None, "port": placement.port if placement else None})


def port_free(port: int, host: str = HOST) -> bool:
    """Whether nothing listens on ``port`` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = HOST) -> int:
    """A port nobody listens on now (the OS picks it; the small race until the server binds is accepted)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def log_tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file ('' when unreadable)."""
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _served_names(base_url: str) -> list[str] | None:
    """The model ids of ``GET /v1/models``, or None while the server does not answer."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy
    try:
        with opener.open(f"{base_url}/v1/models", timeout=5) as resp:
            return [str(m.get("id")) for m in json.loads(resp.read()).get("data", [])]
    except (OSError, ValueError, urllib.error.URLError):
        return None


def stop_process_group(proc: subprocess.Popen, grace: float = STOP_GRACE_S) -> None:
    """SIGTERM the process group of ``proc`` (vLLM shuts its workers down), then after ``grace`` seconds
    kill what is left, descendants that left the group included (:func:`runners.process.kill_tree`)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    kill_tree(proc.pid)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10.0)


def _fail(message: str, log_file: Path, details: dict) -> StepError:
    return StepError(message, error_type=ErrorType.EVAL, log_tail=log_tail(log_file), details=details,
                     suggestion=f"read {log_file}: check the vLLM env (`ftagent env setup --gpu`), the GPU memory "
                                "(gpu_memory_utilization in configs/models.yaml), or set FT_EVAL_BACKEND=hf")


def _wait_ready(proc: subprocess.Popen, base_url: str, served: str, log_file: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        code = proc.poll()
        if code is not None:
            raise _fail(f"the model server exited with code {code} before it was ready", log_file,
                        {"exit_code": code, "log_file": str(log_file)})
        names = _served_names(base_url)
        if names is not None and served in names:
            return
        if names is not None and names:
            raise _fail(f"the model server answers but serves {names}, not {served!r}", log_file,
                        {"served": names, "log_file": str(log_file)})
        if time.monotonic() >= deadline:
            raise _fail(f"the model server did not answer GET /v1/models within {timeout:.0f} s", log_file,
                        {"timed_out": True, "log_file": str(log_file)})
        time.sleep(POLL_S)


@contextlib.contextmanager
def model_server(argv: list[str], *, base_url: str, served_name: str, log_file: Path,
                 start_timeout: float = START_TIMEOUT_S, env: dict[str, str] | None = None) -> Iterator[ServerHandle]:
    """Run ``argv`` (a server listening at ``base_url``) for the duration of the context.

    Args:
        argv: the server's command line.
        base_url: ``http://host:port`` the server listens on.
        served_name: a model id ``GET /v1/models`` must list before the server counts as ready.
        log_file: stdout and stderr of the server.
        start_timeout: seconds to wait for readiness.
        env: extra environment variables.

    Yields:
        :class:`ServerHandle` once ``/v1/models`` lists ``served_name``.

    Raises:
        StepError(EVAL): the server could not start, exited or did not answer in time (with its log tail).
    """
    log_file = Path(log_file)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    # the runners' safe subset (never a secret, never ftagent's own PYTHONPATH/venv) plus PATH for the
    # compilers vLLM's kernels may call
    full_env = {**passthrough_env(), "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(env or {})}
    t0 = time.monotonic()
    with open(log_file, "ab") as out:
        try:
            # own process group under the supervisor: one kill stops all, and it dies with ftagent
            proc = start_supervised(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=full_env)
        except OSError as exc:
            raise _fail(f"the model server could not be started: {exc}", log_file, {"argv": argv}) from exc
    record = reaper.record_process(proc.pid, argv)
    log.info("model server pid %s: %s (log %s)", proc.pid, " ".join(argv), log_file)
    try:
        _wait_ready(proc, base_url, served_name, log_file, start_timeout)
        handle = ServerHandle(base_url=base_url, served_name=served_name, pid=proc.pid, log_file=log_file,
                              start_s=round(time.monotonic() - t0, 2))
        log.info("model server ready after %.1f s at %s", handle.start_s, base_url)
        yield handle
    finally:
        stop_process_group(proc)
        reaper.forget(record)


def serve_request(mspec: ModelSpec, port: int) -> ServeRequest:
    """The request that serves ``mspec``: a LoRA adapter natively under :data:`ADAPTER_NAME`; with replicas,
    vLLM's DP messaging on the next port (the slot's range when ``mspec.port`` came from a slot)."""
    return ServeRequest(
        data_parallel_size=mspec.data_parallel_size,
        data_parallel_rpc_port=(port + 1) if mspec.data_parallel_size > 1 else None,
        model=mspec.path, tokenizer=mspec.tokenizer_path, port=port, served_name=SERVED_NAME,
        lora_modules={ADAPTER_NAME: mspec.adapter_path} if mspec.adapter_path else {},
        max_model_len=mspec.max_seq_len, tensor_parallel_size=mspec.tensor_parallel_size,
        gpu_memory_utilization=mspec.gpu_memory_utilization,
        max_lora_rank=mspec.max_lora_rank if mspec.adapter_path else None, dtype=mspec.dtype)


@contextlib.contextmanager
def served_model(mspec: ModelSpec, command: ServeCommand, work_dir: Path, *, timeout: float | None = None,
                 on_progress: ProgressCallback | None = None) -> Iterator[ModelSpec]:
    """Serve ``mspec`` for the context when its backend is ``vllm-server`` (else yield it unchanged).

    Yields:
        ``mspec`` with ``api_base`` and ``served_name`` of the running server.

    Raises:
        StepError(EVAL): the server did not come up (log: ``work_dir/model_server.log``).
    """
    if mspec.backend != "vllm-server":
        yield mspec
        return
    safe_call(on_progress, "serve")
    port = mspec.port if mspec.port and port_free(mspec.port) and port_free(mspec.port + 1) else free_port()
    request = serve_request(mspec, port)
    start_timeout = min(START_TIMEOUT_S, timeout) if timeout else START_TIMEOUT_S
    env = {"CUDA_VISIBLE_DEVICES": mspec.cuda_visible_devices} if mspec.cuda_visible_devices else None
    with model_server(command(request), base_url=f"http://{request.host}:{request.port}",
                      served_name=ADAPTER_NAME if request.lora_modules else request.served_name,
                      log_file=Path(work_dir) / "model_server.log", start_timeout=start_timeout, env=env) as handle:
        yield mspec.model_copy(update={"api_base": handle.api_base, "served_name": handle.served_name})
