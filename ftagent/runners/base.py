"""The Runner protocol: how every heavy command (data scripts, training, evaluation) is executed.

``Runner.run(cmd, *, workdir, env, mounts, gpus, timeout, log_file) -> RunResult``. Output streams to
``log_file`` as it happens; on timeout the whole process tree (or container) is killed and
``timed_out`` is set. Implementations: ``local`` (tool virtualenvs, the embedded default), ``conda``
and ``docker``; chosen by ``FT_ENV_TYPE``.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel

ToolEnv = Literal["train", "eval", "data"]


def tool_uses_gpu(tool: ToolEnv) -> bool:
    """Whether a command of ``tool`` gets the GPUs (every runner asks this one rule).

    Training, the micro-batch and evaluation do; ``data`` never does: it runs LLM-written
    data-processing code, which needs no GPU, and a GPU is one more kernel interface that code could reach.
    """
    return tool != "data"


class Mount(BaseModel):
    """A host path made visible to the command (read-only unless ``read_only`` is False)."""

    source: Path
    target: Path | None = None  # where it appears inside a container; None = same path
    read_only: bool = True


class RunResult(BaseModel):
    """What happened to one command."""

    exit_code: int | None
    duration_s: float
    timed_out: bool = False
    log_tail: str = ""
    log_file: str | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@runtime_checkable
class Runner(Protocol):
    """Runs a command inside one of the tool environments."""

    name: str

    def run(
        self,
        cmd: list[str],
        *,
        tool: ToolEnv,
        workdir: Path,
        env: dict[str, str] | None = None,
        mounts: list[Mount] | None = None,
        gpus: str | None = None,
        timeout: float | None = None,
        log_file: Path | None = None,
        stop: threading.Event | None = None,
    ) -> RunResult:
        """Run ``cmd`` (argv; ``cmd[0]`` may be ``python`` or a tool CLI such as ``llamafactory-cli``,
        resolved inside the tool environment ``tool``). ``stop``, when set during the run, ends the
        command early (SIGTERM to its process tree or container, then SIGKILL); runners without the
        parameter cannot be stopped early (the trainer checks)."""
        ...
