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

from collections.abc import Mapping
from enum import Enum
from typing import Any

from pydantic import BaseModel, Field, ValidationError


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
    def from_validation(cls, exc: ValidationError, where: str,
                        names: Mapping[str, str] | None = None) -> UserInputError:
        """One line for a pydantic error in user input: ``<where>: 'field.path': message`` (its first problem;
        a user fixes one thing at a time, and the next run names the next).

        ``names`` maps a top-level field to what the user actually set (``FT_BENCHMARK_LIMIT``, a CLI flag);
        such a field is shown as ``NAME=value: message``, the way the user wrote it (issue 32).
        """
        first = exc.errors()[0]
        loc = [str(p) for p in first["loc"]]
        if loc and names and loc[0] in names:
            shown = ".".join([names[loc[0]], *loc[1:]])
            value = first.get("input")
            return cls(f"{where}: {shown}={value}: {first['msg']}" if isinstance(value, (str, int, float))
                       else f"{where}: {shown}: {first['msg']}")
        field = ".".join(loc)
        return cls(f"{where}: '{field}': {first['msg']}" if field else f"{where}: {first['msg']}")


class EnvironmentFailure(FTAgentError):
    """The environment cannot run the session at all (stops the session)."""


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
