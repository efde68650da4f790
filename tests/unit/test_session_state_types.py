"""A session's state is typed from the session to every step and component (issue 45, a loose end of issue 33):
``Session[S]``, ``StepContext[S]``, ``Workflow[S]`` and ``LoopEngine[S]`` carry the workflow's own state class, so
``ctx.state`` in a fine-tuning step is a ``FinetuneSessionState`` (it was ``Any``), a planner that reads only the
engine's fields takes a ``StepContext[SessionState]`` and still fits the fine-tuning protocols, and a session of
another state class is refused by mypy where a fine-tuning one is needed (before: a runtime check,
``finetune_state``, on every use).

The check is mypy itself, with the project's configuration, on a small program that uses the real classes:
each line marked ``# refused`` must be an error and no other line may be one.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PROGRAM = '''\
from pathlib import Path

from ftagent.core.trace import Trace
from ftagent.engine.context import StepContext
from ftagent.engine.loop import LoopEngine, Workflow
from ftagent.engine.session import Session, SessionState
from ftagent.finetune.protocols import Proposer
from ftagent.finetune.state import FinetuneSessionState
from ftagent.finetune.workflow import FinetuneWorkflow


def needs_finetune(session: Session[FinetuneSessionState]) -> None: ...


def reads_trace(ctx: StepContext[FinetuneSessionState]) -> Trace:
    return ctx.state.trace  # typed: no Any, no accessor


def reads_engine_fields(ctx: StepContext[SessionState]) -> int:
    return ctx.state.loop_index


def wants_workflow(workflow: Workflow[FinetuneSessionState]) -> None: ...


class EnginePlanner:  # a planner in the planners layer: it cannot name FinetuneSessionState
    def propose(self, trace: Trace, ctx: StepContext[SessionState]) -> object: ...


def main(workflow: FinetuneWorkflow, ctx: StepContext[FinetuneSessionState], plain: Session[SessionState]) -> None:
    created = Session.create(Path("log"), state_cls=FinetuneSessionState)
    needs_finetune(created)
    needs_finetune(Session.load(Path("log"), FinetuneSessionState)[0])
    needs_finetune(Session.create(Path("log")))  # refused
    needs_finetune(plain)  # refused
    reads_engine_fields(ctx)
    wants_workflow(workflow)
    LoopEngine(workflow, created)
    LoopEngine(workflow, plain)  # refused
    plain_ctx: StepContext[SessionState] = ctx
    fine_ctx: StepContext[FinetuneSessionState] = plain_ctx  # refused
    reveal_type(ctx.state)
    print(fine_ctx, EnginePlanner(), Proposer)
'''


def test_mypy_carries_the_session_state_type_to_every_step(tmp_path):
    pytest.importorskip("mypy")
    program = tmp_path / "typed_state.py"
    program.write_text(PROGRAM, encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"),
                           "--cache-dir", str(tmp_path / "cache"), "--no-error-summary", str(program)],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    lines = PROGRAM.splitlines()
    refused = {n for n, line in enumerate(lines, 1) if line.endswith("# refused")}
    errors = {int(m.group(1)): m.group(2) for m in re.finditer(r"typed_state\.py:(\d+): error: (.*)", proc.stdout)}
    assert set(errors) == refused, proc.stdout + proc.stderr
    revealed = re.search(r'Revealed type is "([^"]+)"', proc.stdout)
    assert revealed is not None and revealed.group(1) == "ftagent.finetune.state.FinetuneSessionState", proc.stdout
