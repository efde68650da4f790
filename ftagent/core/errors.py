"""Error types shared by every loop step.

Two kinds of failure exist in a session:

* :class:`StepError` — a loop step failed (bad config, OOM, broken data, evaluation crash ...). The
  engine records it as a :class:`StepFailure` and jumps to the feedback step; the session goes on.
* :class:`EnvironmentFailure` — the environment itself is broken (no runner, no base model, no tool
  env). The session stops with one clear message.

:class:`UserInputError` is bad input on the command line or in files; the CLI prints its message and
exits with code 2 without touching anything on disk.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from ftagent.core.didyoumean import did_you_mean


class ErrorType(str, Enum):
    """What went wrong, coarse enough for the planner to act on."""

    CONFIG = "CONFIG"
    OOM = "OOM"
    DATA = "DATA"
    ENV = "ENV"
    TIMEOUT = "TIMEOUT"
    DIVERGED = "DIVERGED"  # training stopped early: the loss turned NaN/Inf or rose far above its best
    EVAL = "EVAL"
    LLM = "LLM"
    INTERRUPTED = "INTERRUPTED"  # Ctrl-C, SIGTERM, SIGHUP stopped the step: nothing about the plan (issue 34.12)
    UNKNOWN = "UNKNOWN"


class StepFailure(BaseModel):
    """A structured, persisted description of a failed step (what the feedback step sees)."""

    stage: str
    error_type: ErrorType = ErrorType.UNKNOWN
    message: str
    log_tail: str = ""
    suggestion: str = ""
    details: dict[str, Any] = Field(default_factory=dict)

    def summary(self) -> str:
        """One line for terminals and prompts."""
        return f"[{self.stage}/{self.error_type.value}] {self.message}"


class FTAgentError(Exception):
    """Base class of ftagent's own exceptions."""


class UserInputError(FTAgentError):
    """Invalid user input; the CLI prints the message and exits with code 2."""

    @classmethod
    def from_validation(cls, exc: ValidationError, where: str, names: Mapping[str, str] | None = None,
                        known: Sequence[str] = ()) -> UserInputError:
        """One line for a pydantic error in user input: its first problem (:func:`validation_lines`; a user
        fixes one thing at a time, and the next run names the next)."""
        return cls(validation_lines(exc, where, names, known)[0])


def validation_lines(exc: ValidationError, where: str, names: Mapping[str, str] | None = None,
                     known: Sequence[str] = ()) -> list[str]:
    """One line per problem of a pydantic error in user input (the one shaping of it: run files, tasks.json,
    snapshots, settings): ``<where>: 'field.path': message``; a missing field ``<where>: 'field' is required``;
    an unknown one ``<where>: unknown key 'x'. Did you mean 'y'?`` (``known``: the keys it may be).

    ``names`` maps a top-level field to what the user actually set (``FT_BENCHMARK_LIMIT``, a CLI flag, a run
    file's key); such a field is shown as ``NAME=value: message``, the way the user wrote it (issue 32).
    """
    lines = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        msg = str(err["msg"]).removeprefix("Value error, ")
        shown = ".".join([names[loc[0]], *loc[1:]]) if loc and names and loc[0] in names else None
        field = shown or ".".join(loc)
        if err["type"] == "extra_forbidden":
            lines.append(f"{where}: unknown key '{field}'.{did_you_mean(loc[-1], list(known))}")
        elif err["type"] == "missing":
            lines.append(f"{where}: '{field}' is required")
        elif shown is not None:
            value = err.get("input")
            lines.append(f"{where}: {shown}={value}: {msg}" if isinstance(value, (str, int, float))
                         else f"{where}: {shown}: {msg}")
        else:
            lines.append(f"{where}: '{field}': {msg}" if field else f"{where}: {msg}")
    return lines


class EnvironmentFailure(FTAgentError):
    """The environment cannot run the session at all (stops the session)."""


def exit_message(exc: BaseException) -> tuple[str, int] | None:
    """The one line and the exit code an entry point gives for an error of the user's input (2) or of the
    environment (1); None for anything else (a bug: its traceback is what helps). The CLI prints the line, the
    MCP server returns it as the tool's error: the same words on both."""
    from pydantic_settings import SettingsError

    if isinstance(exc, UserInputError):
        return str(exc), 2
    if isinstance(exc, ValidationError):
        return str(UserInputError.from_validation(exc, "invalid setting")), 2
    if isinstance(exc, SettingsError):
        cause = f": {exc.__cause__}" if exc.__cause__ else ""
        return f"invalid setting ({exc}){cause}", 2
    if isinstance(exc, EnvironmentFailure):
        return str(exc), 1
    if isinstance(exc, StepError):  # a tool run outside a session (`eval`, `export`'s merge): one line, no traceback
        return step_error_line(exc), 1
    return None


def step_error_line(exc: StepError) -> str:
    """A :class:`StepError` as the CLI's one error line: its type, message, suggestion and log file."""
    log = exc.details.get("log_file") if isinstance(exc.details, dict) else None
    text = f"[{exc.error_type.value}] {exc.message}" + (f"; {exc.suggestion}" if exc.suggestion else "") + (
        f" (log: {log})" if log else "")
    return " ".join(text.split())


class BudgetExhausted(FTAgentError):
    """A budget (LLM cost) was spent; the session stops cleanly after the current step."""


class StepError(FTAgentError):
    """A step failed in a way the next loop can learn from."""

    def __init__(
        self,
        message: str,
        *,
        error_type: ErrorType = ErrorType.UNKNOWN,
        log_tail: str = "",
        suggestion: str = "",
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.error_type = error_type
        self.log_tail = log_tail
        self.suggestion = suggestion
        self.details = details or {}

    def to_failure(self, stage: str) -> StepFailure:
        """Convert to the persisted form."""
        return StepFailure(
            stage=stage,
            error_type=self.error_type,
            message=self.message,
            log_tail=self.log_tail,
            suggestion=self.suggestion,
            details=self.details,
        )
