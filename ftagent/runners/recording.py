"""A Runner wrapper that turns every command into a typed ``run`` event of the current loop step."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ftagent.engine.events import RunEvent
from ftagent.runners.base import Mount, Runner, RunResult, ToolEnv


def purpose_of(cmd: list[str], tool: str) -> str:
    """A short label for the event: train, train_micro_batch, export, eval, data, data_debug, track,
    weights_check, <tool>."""
    head = Path(cmd[0]).name if cmd else ""
    if head == "llamafactory-cli" and len(cmd) > 2:
        sub = cmd[1]
        if sub == "train" and (Path(cmd[2]).name == "train_micro.yaml" or "debug" in cmd[2]):
            return "train_micro_batch"
        return sub
    if head == "opencompass":
        return "eval"
    if any(part.endswith("tracking_script.py") for part in cmd):  # scores to the tracker: not training time
        return "track"
    if any(part.endswith("weights_script.py") for part in cmd):  # the weights check before an evaluation (issue 43)
        return "weights_check"
    if "process_data.py" in cmd:
        return "data_debug" if "--debug" in cmd else "data"
    return tool


class RecordingRunner:
    """Delegates to ``inner`` and reports every finished command as a :class:`RunEvent` to ``on_run``."""

    def __init__(self, inner: Runner, on_run: Callable[[RunEvent], None]) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", type(inner).__name__)
        self.on_run = on_run

    def __getattr__(self, item: str) -> Any:  # expose the inner runner's extras (tools_env, bin_dir ...)
        return getattr(self.inner, item)

    def run(self, cmd: list[str], *, tool: ToolEnv, workdir: Path, env: dict[str, str] | None = None,
            mounts: list[Mount] | None = None, gpus: str | None = None, timeout: float | None = None,
            log_file: Path | None = None, **extra: Any) -> RunResult:
        # extra: optional keywords of the inner runner (``stop``), passed only when given
        result = self.inner.run(cmd, tool=tool, workdir=workdir, env=env, mounts=mounts, gpus=gpus,
                                timeout=timeout, log_file=log_file, **extra)
        self.on_run(RunEvent(purpose=purpose_of(cmd, tool), command=" ".join(cmd)[:500],
                             exit_code=result.exit_code, duration_s=result.duration_s,
                             timed_out=result.timed_out, log_file=result.log_file, runner=self.name))
        return result
