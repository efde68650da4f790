"""The Runner protocol: how every heavy command (data scripts, training, evaluation) is executed.

``Runner.run(cmd, *, workdir, env, mounts, gpus, timeout, log_file) -> RunResult``. Output streams to
``log_file`` as it happens; on timeout the whole process tree (or container) is killed and
``timed_out`` is set. Implementations: ``local`` (tool virtualenvs, the embedded default), ``conda``
and ``docker``; chosen by ``FT_ENV_TYPE`` through the one registry in :mod:`ftagent.runners.factory`.

What a runner *does* is declared on its class as capability attributes (read with
:func:`capabilities`), never inferred from its name: ``confines_itself`` (its commands run isolated
without help, e.g. a container), ``needs_bwrap`` (generated code is confined only with bubblewrap),
``runs_on_host`` (commands are processes of this host: they can reach a server started here),
``uses_tools_env`` (its env identity is the tool virtualenv ``FT_TOOLS_ENV``, which the demo creates
when missing; conda names a conda env, docker an image), ``stops_on_event`` (its ``run`` takes ``stop``, a
``threading.Event`` that ends the command early: the trainer's early stop on a diverging loss), and a
``reaper_client()`` classmethod when it can end its own leftovers after a crash (Docker's containers).
A plug-in that declares nothing is taken to own its confinement, not to run on the host, to leave
nothing the reaper must end, and to run every command to its end (it is never passed ``stop``).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel

ToolEnv = Literal["train", "eval", "data"]


def tool_uses_gpu(tool: ToolEnv) -> bool:
    """Whether a command of ``tool`` gets the GPUs (every runner asks this one rule).

    Training, the micro-batch and evaluation do; ``data`` never does: it runs LLM-written
    data-processing code, which needs no GPU, and a GPU is one more kernel interface that code could reach.
    """
    return tool != "data"


class RunnerCapabilities(BaseModel):
    """What a runner class declares it does (see the module docstring)."""

    confines_itself: bool = False
    needs_bwrap: bool = False
    runs_on_host: bool = False
    uses_tools_env: bool = False
    stops_on_event: bool = False
    reaps_leftovers: bool = False


def capabilities(runner: Any) -> RunnerCapabilities:
    """The declared capabilities of a runner class or instance (wrappers with ``.inner`` are unwrapped)."""
    for _ in range(8):
        inner = getattr(runner, "inner", None)
        if inner is None:
            break
        runner = inner

    def flag(attr: str) -> bool:
        value = getattr(runner, attr, False)
        return value if isinstance(value, bool) else False

    return RunnerCapabilities(confines_itself=flag("confines_itself"), needs_bwrap=flag("needs_bwrap"),
                              runs_on_host=flag("runs_on_host"), uses_tools_env=flag("uses_tools_env"),
                              stops_on_event=flag("stops_on_event"),
                              reaps_leftovers=callable(getattr(runner, "reaper_client", None)))


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
