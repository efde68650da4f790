"""Issue 32 (the quickstart's resume, run as a new user): `ftagent llm_finetune --path SESSION` on a finished
session reprinted its report and nothing said that no step ran."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ftagent.cli.main import app


@pytest.fixture
def summary_of(tmp_path, monkeypatch):
    """Make run_finetune return a given summary (no session is run)."""
    import ftagent.finetune.app as finetune_app

    monkeypatch.chdir(tmp_path)

    def use(**fields):
        from ftagent.engine.loop import RunSummary

        monkeypatch.setattr(finetune_app, "run_finetune", lambda _options: RunSummary(**fields))

    return use


def test_a_resume_with_nothing_left_says_so(summary_of):
    summary_of(status="completed", loops_done=3, steps_run=0, message="3 loop(s) done")
    res = CliRunner().invoke(app, ["llm_finetune", "--path", "log/s"])
    assert res.exit_code == 0, res.output
    assert "nothing left to run: the session had finished its 3 loop(s)" in res.output
    assert "--loop-n N" in res.output


@pytest.mark.parametrize("args, steps", [(["--path", "log/s"], 4), (["--benchmark", "demo_add"], 0)])
def test_no_note_when_steps_ran_or_no_resume(summary_of, args, steps):
    summary_of(status="completed", loops_done=3, steps_run=steps)
    res = CliRunner().invoke(app, ["llm_finetune", *args])
    assert res.exit_code == 0 and "nothing left to run" not in res.output, res.output
