"""Issue 40 on CPU: a DPO loop and a GRPO loop train and score, each killed mid-training and resumed.

One session of the real CLI (tiny model ``builtin/tiny-qwen2``, ``demo_add``, the offline planner,
``FT_STAGES=dpo,grpo``, two loops, 10 benchmark items): loop 0 is DPO from the base model (pairs of the
training gold against the base model's own wrong samples), loop 1 GRPO (TRL, the benchmark's scorer as the
reward). The session is SIGKILLed while loop 0 trains (``llamafactory-cli``), resumed with ``--path``,
SIGKILLed again while loop 1 trains (``grpo_script.py``), and resumed to its end. Then:

* report.json's loop rows name their stages (``config.stage``, the weights chain) and carry scores with
  their intervals; each loop has its sampling event and a training event with a loss history;
* the GRPO loop's history has TRL's reward / KL / completion-length columns;
* nothing of the killed runs is left (no process in the test's folders; the run registry is empty).

Cost is kept down by a two-line wrapper around the CLI entry point that shortens the offline planner's
stage runs and its sampling (``TINY_STEPS``, ``PREFERENCE_EPOCHS``, ``TINY_SAMPLING``), the same for every
run here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ftagent.engine.events import read_events

pytestmark = pytest.mark.integration
WRAPPER = ("import sys, ftagent.planners.heuristic.stages as s; "
           "s.TINY_STEPS.update(grpo=12); s.PREFERENCE_EPOCHS = 6.0; "
           "s.TINY_SAMPLING = s.SamplingPlan(samples_per_prompt=2, temperature=1.0, max_prompts=24); "
           "sys.argv[0] = 'ftagent'; from ftagent.cli.main import main; main()")
COMMAND = ["llm_finetune", "--benchmark", "demo_add", "--base-model", "builtin/tiny-qwen2", "--loop-n", "2", "--quiet"]
RUN_TIMEOUT_S = 1500


def _env(root: Path, tools_env: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("CHAT_MODEL", "OPENAI_API_KEY", "OPENAI_API_BASE", "CHAT_STREAM")}
    env.update(FT_FILE_PATH=str(root / "files"), LOG_PATH=str(root / "log"), WORKSPACE_PATH=str(root / "ws"),
               FT_TOOLS_ENV=str(tools_env), FT_PLANNER="heuristic", FT_STAGES="dpo,grpo", FT_BENCHMARK_LIMIT="10",
               FT_UPPER_DATA_SIZE_LIMIT="100", FT_FINAL_EVAL="none", PYTHONUNBUFFERED="1",
               FT_STOP_AT_MAXIMUM="false")
    return env


def _start(root: Path, env: dict[str, str], *args: str) -> subprocess.Popen:
    n = len(list(root.glob("out-*.txt")))
    out = open(root / f"out-{n}.txt", "w", encoding="utf-8")  # noqa: SIM115 - the child writes it
    return subprocess.Popen([sys.executable, "-c", WRAPPER, *args], cwd=root, env=env, stdout=out,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def _output(root: Path) -> str:
    return "\n".join(p.read_text(encoding="utf-8", errors="replace")[-3000:] for p in sorted(root.glob("out-*.txt")))


def _session(root: Path) -> Path | None:
    sessions = sorted(p for p in (root / "log").iterdir() if p.is_dir()) if (root / "log").is_dir() else []
    return sessions[-1] if sessions else None


def _kill_while_training(proc: subprocess.Popen, root: Path, loop: int, marker: str) -> Path:
    """SIGKILL ftagent once ``loop`` trains (a progress point logged by a running ``marker`` process)."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"ftagent ended (rc {proc.returncode}) before loop {loop} trained:\n{_output(root)}"
        session = _session(root)
        events = list(read_events(session / "events.jsonl")) if session else []
        training = any(e.type == "progress" and e.phase == "train" and e.loop == loop and (e.done or 0) >= 4
                       for e in events)
        tools = [c for c in psutil.Process(proc.pid).children(recursive=True) if marker in " ".join(_cmd(c))]
        if training and tools and session is not None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
            gone = time.monotonic() + 10
            while time.monotonic() < gone and any(_alive(t) for t in tools):
                time.sleep(0.1)
            assert not any(_alive(t) for t in tools), f"{marker} outlived ftagent's SIGKILL"
            return session
        time.sleep(0.3)
    raise AssertionError(f"loop {loop} never trained with {marker}:\n{_output(root)}")


def _cmd(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_dpo_and_grpo_loops_train_score_and_resume_after_a_kill(tmp_path: Path, tools_env: Path) -> None:
    env = _env(tmp_path, tools_env)
    t0 = time.monotonic()
    session = _kill_while_training(_start(tmp_path, env, *COMMAND), tmp_path, 0, "llamafactory-cli")
    again = _start(tmp_path, env, "llm_finetune", "--path", str(session), "--quiet")
    assert _kill_while_training(again, tmp_path, 1, "grpo_script.py") == session
    last = _start(tmp_path, env, "llm_finetune", "--path", str(session), "--quiet")
    assert last.wait(timeout=RUN_TIMEOUT_S) == 0, _output(tmp_path)
    report = json.loads((session / "report.json").read_text())
    rows = {row["loop"]: row for row in report["loops"]}
    assert [rows[i]["config"]["stage"] for i in (0, 1)] == ["dpo", "grpo"], rows
    assert rows[0]["chain"] == ["dpo"] and rows[1]["chain"][-1] == "grpo"
    for row in rows.values():
        assert row["status"] == "succeeded" and row["val_score"] is not None and row["test_score"] is not None, row
        assert any(d["against"] == "baseline" and d["split"] == "validation" and d.get("low") is not None
                   for d in row["intervals"]), row["intervals"]
        assert row["sampling"]["samples"] == 2 * row["sampling"]["prompts"] and row["sampling"]["prompts"] > 0
    events = list(read_events(session / "events.jsonl"))
    training = {e.loop: e for e in events if e.type == "training"}
    assert training[0].stage == "dpo" and training[0].loss_history
    grpo_points = [p for p in training[1].loss_history]
    assert training[1].stage == "grpo" and grpo_points, training[1]
    log = (Path(training[1].output_dir) / "trainer_log.jsonl").read_text().splitlines()
    assert {"reward", "kl", "completion_length"} <= set(json.loads(log[0])), log[0]
    assert [e.stage for e in events if e.type == "sampling"][-2:] == ["dpo", "grpo"]
    assert not list((tmp_path / "files" / "run" / "children").glob("*.json")), "a killed run's record was left"
    print(f"dpo+grpo session with two kills: {time.monotonic() - t0:.0f}s; "
          f"val {rows[0]['val_score']} / {rows[1]['val_score']}")
