"""`ftagent job status` on a job folder built from real engine sessions."""

from __future__ import annotations

from typer.testing import CliRunner

from ftagent.cli import app
from ftagent.jobs.tasks import TaskSpec
from tests.helpers.make_sessions import LoopPlan, SessionPlan, make_job, make_session


def _rows(output: str) -> dict[str, list[str]]:
    rows = {}
    for line in output.splitlines():
        cells = [c.strip() for c in line.replace("┃", "│").strip("│ ").split("│")]
        if len(cells) > 3:
            rows[cells[0]] = cells
    return rows


def test_job_status_table(tmp_path):
    job_dir = make_job(tmp_path, "j7", [
        (TaskSpec(model="builtin/tiny-qwen2", benchmark="demo_add"), SessionPlan(), None),
        (TaskSpec(model="org/model-b", benchmark="aime25"),
         SessionPlan(benchmark="aime25", loops=[LoopPlan(val=0.5, test=0.25)] * 2), 9),
        (TaskSpec(model="org/model-c", benchmark="gsm8k"), None, None),
    ])
    res = CliRunner().invoke(app, ["job", "status", str(job_dir)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    rows = _rows(res.output)
    header = rows["Task"]
    assert header == ["Task", "State", "Metric", "Baseline", "L0", "L1", "L2", "Best", "Loops", "Failures"]
    assert rows["demo_add_tiny-qwen2"] == ["demo_add_tiny-qwen2", "finished", "accuracy", "0.1 / 0.05",
                                           "0.4 / 0.35", "X", "0.3 / 0.3", "0.4 / 0.35", "3", "1"]
    assert rows["aime25_model-b"][1] == "running" and rows["aime25_model-b"][4:6] == ["0.5 / 0.25", "R"]
    assert rows["gsm8k_model-c"][1] == "waiting"
    assert "tasks: 3  running: 1  finished: 1  waiting: 1  loops done: 4  failures: 1  improved: 2" in res.output


def test_job_status_on_sessions_folder_and_errors(tmp_path):
    make_session(tmp_path / "log")
    res = CliRunner().invoke(app, ["job", "status", str(tmp_path / "log")])
    assert res.exit_code == 0 and "0.4 / 0.35" in res.output
    res = CliRunner().invoke(app, ["job", "status", str(tmp_path / "missing")])
    assert res.exit_code == 2 and "does not exist" in res.output
    (tmp_path / "empty").mkdir()
    res = CliRunner().invoke(app, ["job", "status", str(tmp_path / "empty")])
    assert res.exit_code == 2 and "holds no tasks" in res.output
