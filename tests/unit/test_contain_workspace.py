"""Issue 39 items 1 and 2 on real files: what a sandboxed command leaves in a loop workspace never makes ftagent's
own process write or read outside it, and what validation approved is frozen and checked.

The data runs go through the real local runner and real bubblewrap (a pip-less venv stands in for the tool env:
the script needs only Python). On d350dfe the second debug round appended its log to the file outside the
workspace that the first round linked ``logs/process_data_debug.log`` to, ``write_dataset_info`` wrote through
a planted link, and a planted FIFO hung the log's open.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from ftagent.core.errors import ErrorType, StepError
from ftagent.core.types import CodeResult, ValidationReport
from ftagent.engine.loop import LoopEngine
from ftagent.engine.session import Session
from ftagent.finetune import approval
from ftagent.finetune.components import Components
from ftagent.finetune.loop_folders import fork_workspace
from ftagent.finetune.state import FinetuneSessionState
from ftagent.finetune.workflow import FinetuneWorkflow
from ftagent.planners.heuristic.planner import HeuristicCoder, HeuristicProposer
from ftagent.runners import sandbox
from ftagent.runners.local import LocalRunner
from ftagent.tools.llamafactory.config import write_dataset_info
from ftagent.tools.llamafactory.trainer import run_data_processing
from tests.unit.test_finetune_workflow import (
    FakeData,
    FakeEvaluator,
    FakeTrainer,
    FakeValidator,
    RecordingFeedback,
    _scenario,
)

BWRAP_OK, BWRAP_WHY = sandbox.probe_bwrap()

PLANTING_SCRIPT = """
import json, os, sys
OUT = {outside!r}
json.dump([{{"instruction": "1+1?", "input": "", "output": "2"}}], open("data.json", "w"))
print("round", open("round.txt").read() if os.path.exists("round.txt") else "1")
os.makedirs("logs", exist_ok=True)
os.makedirs("output", exist_ok=True)
for name, target in [("logs/process_data_debug.log", OUT + "/victim.log"), ("dataset_info.json", OUT + "/victim.json"),
                     ("train.orig.yaml", OUT + "/victim.yaml"), ("output/oc", OUT)]:
    if os.path.lexists(name):
        os.remove(name)
    os.symlink(target, name)
if not os.path.exists("logs/train.log"):
    os.mkfifo("logs/train.log")
"""


@pytest.fixture
def tool_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = tmp_path_factory.mktemp("toolenv") / "tools"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(env)],
                   check=True, timeout=120)
    return env


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    for name in ("victim.log", "victim.json", "victim.yaml"):
        (out / name).write_text(f"ORIGINAL {name}\n")
    return out


def _untouched(outside: Path) -> None:
    assert sorted(os.listdir(outside)) == ["victim.json", "victim.log", "victim.yaml"]
    for name in os.listdir(outside):
        assert (outside / name).read_text() == f"ORIGINAL {name}\n", name


def _no_hang(fn, *args, **kw):
    box: dict = {}
    thread = threading.Thread(target=lambda: box.update(value=fn(*args, **kw)), daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), f"{fn.__name__} blocked (a FIFO opened?)"
    return box["value"]


@pytest.mark.skipif(not BWRAP_OK, reason=f"bubblewrap does not work here: {BWRAP_WHY}")
def test_links_and_fifos_a_data_run_plants_are_never_followed(tool_env: Path, tmp_path: Path, outside: Path) -> None:
    ws = tmp_path / "ws" / "session" / "loop_0"
    ws.mkdir(parents=True)
    (ws / "process_data.py").write_text(PLANTING_SCRIPT.format(outside=str(outside)))
    runner = LocalRunner(tool_env, sandbox="bwrap", gpu=False)
    first = run_data_processing(ws, runner, timeout=120, debug=True)
    (ws / "round.txt").write_text("2")
    second = _no_hang(run_data_processing, ws, runner, timeout=120, debug=True)  # a second code round
    write_dataset_info(ws, "ftagent_data")  # what ftagent's own process does next there (the validator)
    _untouched(outside)  # nothing landed outside: no log appended through a link, no file written through one
    assert "[ftagent] removed from" in first.log_tail and "logs/train.log (FIFO)" in first.log_tail
    assert f"dataset_info.json (symlink -> {outside}/victim.json)" in first.log_tail
    assert "round 2" in second.log_tail and "[ftagent] removed from" in second.log_tail
    assert not any(p.is_symlink() for p in ws.rglob("*")) and not (ws / "logs" / "train.log").exists()
    log = ws / "logs" / "process_data_debug.log"  # the script replaced its own log by a link: removed, never followed
    assert log.is_file() and not log.is_symlink()
    # the trainer's log where the data run had left a FIFO: a regular file, and nothing blocks
    result = _no_hang(runner.run, ["python", "-c", "print('training')"], tool="train", workdir=ws,
                      log_file=ws / "logs" / "train.log", timeout=60)
    assert result.ok and (ws / "logs" / "train.log").read_text() == "training\n"
    _untouched(outside)


@pytest.mark.skipif(not BWRAP_OK, reason=f"bubblewrap does not work here: {BWRAP_WHY}")
def test_a_planted_log_is_refused_even_without_a_scrub(tool_env: Path, tmp_path: Path, outside: Path) -> None:
    """A resumed session may meet what a killed command left: the log is refused, the command not run."""
    ws = tmp_path / "ws"
    (ws / "logs").mkdir(parents=True)
    (ws / "logs" / "train.log").symlink_to(outside / "victim.log")
    os.mkfifo(ws / "logs" / "fifo.log")
    (ws / "linked").symlink_to(outside)
    runner = LocalRunner(tool_env, sandbox="bwrap", gpu=False)
    results = [_no_hang(runner.run, ["python", "-c", "open('ran', 'w')"], tool="train", workdir=ws, log_file=ws / log,
                        timeout=60) for log in ("logs/train.log", "linked/new.log", "logs/fifo.log")]
    _untouched(outside)
    for res in results:
        assert res.exit_code is None and "[ftagent] not run: its log" in res.log_tail and "refused" in res.log_tail
    assert not (ws / "ran").exists()


def _validated_workspace(tmp_path: Path) -> tuple[CodeResult, ValidationReport, Path, Path]:
    ws = tmp_path / "ws" / "s" / "loop_0"
    (ws / "debug" / "output").mkdir(parents=True)
    (ws / "process_data.py").write_text("print('validated')\n")
    (ws / "train.orig.yaml").write_text("template: qwen\n")
    config = {"template": "qwen", "learning_rate": 1e-3, "dataset_dir": str(ws), "output_dir": str(ws / "output")}
    (ws / "train.yaml").write_text(yaml.safe_dump(config))
    (ws / "debug" / "output" / "tokenizer_config.json").write_text('{"chat_template": "validated"}')
    code = CodeResult(workspace=str(ws), files={"process_data.py": str(ws / "process_data.py"),
                                                "train.yaml": str(ws / "train.yaml")})
    report = ValidationReport(passed=True, config_path=str(ws / "train.yaml"),
                              micro_batch={"output_dir": str(ws / "debug" / "output")})
    return code, report, approval.frozen_dir(tmp_path / "ws", "s", 0), approval.data_run_dir(tmp_path / "ws", "s", 0)


def test_what_validation_approved_is_frozen_and_checked(tmp_path: Path) -> None:
    code, report, frozen, data_dir = _validated_workspace(tmp_path)
    ws = Path(code.workspace)
    approval.freeze_code(code, frozen)  # before the debug run ...
    (ws / "process_data.py").write_text("print('rewritten by itself while it ran')\n")  # ... which rewrites itself
    approved = approval.approve(code, report, frozen, data_dir)
    assert approved.changes() == []
    assert yaml.safe_load(approved.config_path.read_text())["dataset_dir"] == str(data_dir)
    assert (approved.validated_run / "tokenizer_config.json").read_text() == '{"chat_template": "validated"}'
    full = approval.prepare_data_run(code, approved)
    assert full.workspace == str(data_dir) and (data_dir / "process_data.py").read_text() == "print('validated')\n"
    (data_dir / "data.json").write_text(json.dumps([{"instruction": "q", "output": "a"}]))
    approval.seal_data(approved)
    assert json.loads((data_dir / "dataset_info.json").read_text())["ftagent_data"]["file_name"] == "data.json"
    approval.require_unchanged(approved, "training")
    # the same edits the red team made after validation, now made to the frozen copies by another process
    (ws / "train.yaml").write_text("template: llama3\n")  # the workspace's copy is no longer read: no effect
    approval.require_unchanged(approved, "training")
    approval.require_unchanged(ValidationReport.model_validate_json(report.model_copy(
        update={"approved": approved}).model_dump_json()).approved, "training")  # the snapshot's copy holds
    approved.config_path.write_text("template: llama3\n")
    (data_dir / "data.json").write_text("[]")
    with pytest.raises(StepError) as err:
        approval.require_unchanged(approved, "evaluation")
    assert err.value.error_type is ErrorType.ENV
    assert "what was frozen for evaluation changed after validation approved it" in err.value.message
    assert "frozen/train.yaml (changed: sha256" in err.value.message and "data/data.json (changed" in err.value.message


def test_a_model_folder_with_weights_the_trainer_did_not_write_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "output"
    out.mkdir()
    for name in ("config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                 "training_args.bin", "tokenizer.json"):
        (out / name).write_bytes(b"x")
    (out / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    approved = approval.Approved(frozen=approval.Fingerprint(root=str(tmp_path)), data_dir=str(tmp_path))
    approval.seal_model(approved, out)  # a sharded model as the trainer writes it
    assert approved.model is not None and "model-00002-of-00002.safetensors" in approved.model.files
    (out / "model_zz.safetensors").write_bytes(b"the base's weights")
    with pytest.raises(StepError, match="holds weight files the trainer did not write: model_zz.safetensors"):
        approval.seal_model(approved, out)
    (out / "model_zz.safetensors").unlink()
    (out / "model-00002-of-00002.safetensors").write_bytes(b"swapped after training")
    assert approved.changes() == ["model/model-00002-of-00002.safetensors (changed: sha256 "
                                  f"{approved.model.files['model-00002-of-00002.safetensors'][:12]} -> "
                                  f"{approval.Fingerprint.take(out).files['model-00002-of-00002.safetensors'][:12]})"]


def _workflow(tmp_path: Path) -> tuple[FinetuneWorkflow, Session, RecordingFeedback]:
    scenario = _scenario(tmp_path)
    feedback = RecordingFeedback()
    components = Components(proposer=HeuristicProposer(scenario), coder=HeuristicCoder(scenario),
                            validator=FakeValidator(), trainer=FakeTrainer(), evaluator=FakeEvaluator(),
                            feedback=feedback, data=FakeData())
    workflow = FinetuneWorkflow(scenario, components, coder_max_loop=3, sota_min_delta=0.0,
                                workspace_root=tmp_path / "ws")
    session = Session.create(tmp_path / "log", state_cls=FinetuneSessionState, scenario=scenario)
    session.state.trace.baseline_val = 0.0
    return workflow, session, feedback


def test_a_change_between_validation_and_training_fails_the_loop_and_says_what(tmp_path: Path) -> None:
    workflow, session, feedback = _workflow(tmp_path)
    LoopEngine(workflow, session, loop_n=1, step_n=3).run()  # propose, code, validate
    approved = session.state.current.report.approved
    assert approved is not None and approved.changes() == []
    assert (approved.code_dir / "process_data.py").is_file()  # the heuristic coder's script, frozen
    approved.config_path.write_text(approved.config_path.read_text() + "learning_rate: 10.0\n")
    LoopEngine(workflow, session, loop_n=1).run()
    exp = session.state.trace.get(0)
    assert exp.failure is not None and exp.failure.stage == "train" and exp.failure.error_type is ErrorType.ENV
    assert "frozen/train.yaml (changed" in exp.failure.message
    assert exp.approved is not None and exp.artefacts["train.yaml"] == str(approved.config_path)


def test_a_fork_gets_its_own_frozen_copy(tmp_path: Path) -> None:
    workflow, session, _ = _workflow(tmp_path)
    LoopEngine(workflow, session, loop_n=1, step_n=3).run()
    state = FinetuneSessionState.model_validate_json(session.state.model_dump_json())
    old_id, state.session_id = state.session_id, "forked"
    fork_workspace(state, tmp_path / "ws", old_id)
    approved = state.current.report.approved
    assert approved.root == approval.frozen_dir(tmp_path / "ws", "forked", 0) and approved.changes() == []
    assert approved.data_dir == str(approval.data_run_dir(tmp_path / "ws", "forked", 0))


def test_the_guard_reads_the_full_runs_record_and_the_frozen_script(tmp_path: Path) -> None:
    """The full data run has its own folder: its recorded reads, its log and the script that ran (frozen) are the
    ones the integrity guard's data_script check reads."""
    from ftagent.integrity.training_data import data_script_check
    from ftagent.runners.decoys import record_attempts

    code, report, frozen, data_dir = _validated_workspace(tmp_path)
    approval.freeze_code(code, frozen)
    ws, bench = Path(code.workspace), tmp_path / "files" / "benchmarks" / "demo_add"
    record_attempts(ws, "debug", [])
    (data_dir / "logs").mkdir(parents=True)
    check = data_script_check(ws, bench, "demo_add", code_dir=frozen / "code", data_run=data_dir)
    assert check.passed is True
    (ws / "process_data.py").write_text(f"# reads {bench}\n")  # the workspace's copy, rewritten: not what ran
    assert "warning" not in data_script_check(ws, bench, "demo_add", code_dir=frozen / "code", data_run=data_dir).detail
    record_attempts(data_dir, "full", [f"opened {bench}/test.jsonl"])  # only the full run tried
    check = data_script_check(ws, bench, "demo_add", code_dir=frozen / "code", data_run=data_dir)
    assert check.passed is False and f"opened {bench}/test.jsonl" in check.detail
