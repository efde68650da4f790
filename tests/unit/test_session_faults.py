"""Issue 34 (session-level faults of a fault audit): each test reproduces one on real files.

* 34.1 a full workspace disk during validate: the session stops (env_error) instead of 20 doomed
  micro-batch runs and ``completed``. Real: the workspace is a 2 MB tmpfs (root and mount(8) needed).
* 34.6 a ``--dataset`` whose ``system`` column is not text is refused at start (exit 2, no session); a
  session whose every loop failed for one cause (or on ENV) ends ``no_progress``, exit 3 — not
  ``completed``, exit 0.
* 34.5 a ``--base-model`` folder that is no complete model is refused at start (exit 2, one line, nothing
  written) by llm_finetune and both job runners; a crash after the session exists still ends it (``failed``).
* 34.4 a full ``LOG_PATH``: the report is written atomically (the previous one kept, never 0 bytes) and the
  run ends with one error that says how to go on (exit 1), not an ``OSError`` traceback.
* 34.2 an interrupted Hub download, offline: the real ``snapshot_download`` returns the half-download
  without an error; it is never marked complete (benchmarks) or used (datasets).
* 34.9 a benchmark with no training source (no ``related_datasets``, no ``--dataset``) and the heuristic
  planner: exit 2 at start saying what to add (the LLM planner may select or generate data: allowed).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftagent.core.errors import ErrorType, StepFailure
from ftagent.core.types import ValidationReport
from ftagent.engine.events import read_events
from ftagent.engine.loop import LoopEngine
from ftagent.engine.session import Session
from ftagent.finetune.components import Components
from ftagent.finetune.state import FinetuneSessionState
from ftagent.finetune.workflow import FinetuneWorkflow
from ftagent.planners.heuristic.planner import HeuristicCoder, HeuristicProposer
from tests.helpers.weights import safetensors_bytes
from tests.unit.test_finetune_workflow import (
    FakeData,
    FakeEvaluator,
    FakeTrainer,
    RecordingFeedback,
    _scenario,
)


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 2 MB tmpfs at ``tmp_path/small`` (skips without root or mount(8))."""
    where = tmp_path / "small"
    where.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root and mount(8) for a 2 MB tmpfs")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def _fill(path: Path) -> None:
    """Write to ``path`` until the disk is full (raises the real OSError ENOSPC)."""
    with open(path, "wb") as fh:
        for _ in range(64):
            fh.write(b"\0" * 2**18)
            fh.flush()
            os.fsync(fh.fileno())


class WritingValidator:
    """Writes its config and a checkpoint into the workspace, as the real validator does."""

    def __init__(self, via_subprocess: bool) -> None:
        self.via_subprocess, self.calls = via_subprocess, 0

    def validate(self, code, ctx):
        self.calls += 1
        out = Path(code.workspace) / "debug" / "model.safetensors"
        out.parent.mkdir(parents=True, exist_ok=True)
        if not self.via_subprocess:
            _fill(out)  # an OSError out of the validator itself
        run = subprocess.run([sys.executable, "-c", f"import pathlib; pathlib.Path({str(out)!r}).write_bytes("
                              "b'0' * 2**23)"], capture_output=True, text=True)
        assert run.returncode != 0, "the 2 MB disk took 8 MB"
        return ValidationReport(passed=False, failure=StepFailure(
            stage="validate", error_type=ErrorType.UNKNOWN, log_tail=run.stderr[-2000:],
            message=f"micro-batch run failed: {run.stderr.strip().splitlines()[-1]}"))


@pytest.mark.parametrize("via_subprocess", [False, True])
def test_a_full_workspace_disk_during_validate_stops_the_session(tmp_path, small_disk, via_subprocess):
    """Old main: each failure was a new code round (UNKNOWN), every loop the same, then ``completed``."""
    scenario = _scenario(tmp_path).model_copy(update={"workspace_root": str(small_disk)})
    validator = WritingValidator(via_subprocess)
    components = Components(proposer=HeuristicProposer(scenario), coder=HeuristicCoder(scenario),
                            validator=validator, trainer=FakeTrainer(), evaluator=FakeEvaluator(),
                            feedback=RecordingFeedback(), data=FakeData())
    workflow = FinetuneWorkflow(scenario, components, coder_max_loop=3, sota_min_delta=0.0,
                                workspace_root=small_disk)
    session = Session.create(tmp_path / "log", state_cls=FinetuneSessionState, scenario=scenario)
    summary = LoopEngine(workflow, session, loop_n=3).run()
    assert summary.status == "env_error" and validator.calls == 1, (summary, validator.calls)
    assert summary.message.startswith(("validation stopped: the disk is full", "the validate step stopped"))
    assert str(small_disk) in summary.message and "GiB free" in summary.message and "--path" in summary.message
    end = [e for e in read_events(session.events_path) if e.type == "session_end"]
    assert [e.status for e in end] == ["env_error"]


# -- 34.6: a non-text system column; no progress is not a success -----------------------------------------
REPO = Path(__file__).resolve().parents[2]


def _cli(tmp_path: Path, *args: str, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "CHAT_", "OPENAI_"))}
    env.update({"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "FT_FILE_PATH": str(tmp_path / "files"),
                "LOG_PATH": str(tmp_path / "log"), "WORKSPACE_PATH": str(tmp_path / "ws"),
                "FT_PLANNER": "heuristic", **(extra_env or {})})
    return subprocess.run([sys.executable, "-m", "ftagent", "llm_finetune", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180)


@pytest.mark.parametrize("system", [7, {"role": "a tutor"}, ["be brief"]])
def test_a_non_text_system_column_is_refused_at_start(tmp_path, system):
    """Old main: accepted; every micro-batch then failed on it and the session ended ``completed``, exit 0."""
    import json

    rows = [{"instruction": f"What is {i} + 1?", "output": str(i + 1), "system": system if i == 3 else "Be brief."}
            for i in range(6)]
    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    proc = _cli(tmp_path, "--benchmark", "demo_add", "--base-model", "builtin/tiny-qwen2",
                "--dataset", "./data.jsonl", "--loop-n", "1")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "`system` must be text" in lines[0] and "first: row 3" in lines[0], proc.stderr
    assert not (tmp_path / "log").exists() and not (tmp_path / "ws").exists()


class SameFailureValidator:
    def __init__(self, error_type: ErrorType = ErrorType.DATA, vary: bool = False) -> None:
        self.error_type, self.vary, self.calls = error_type, vary, 0

    def validate(self, code, ctx):
        self.calls += 1
        words = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta")
        detail = f"KeyError '{words[self.calls % 8]}'" if self.vary else "row 3: system is an int"
        return ValidationReport(passed=False, failure=StepFailure(
            stage="validate", error_type=self.error_type,
            message=f"micro-batch run failed in {code.workspace}: {detail}"))


def _session(tmp_path: Path, validator, loops: int, log: Path | None = None):
    scenario = _scenario(tmp_path)
    components = Components(proposer=HeuristicProposer(scenario), coder=HeuristicCoder(scenario),
                            validator=validator, trainer=FakeTrainer(), evaluator=FakeEvaluator(),
                            feedback=RecordingFeedback(), data=FakeData())
    workflow = FinetuneWorkflow(scenario, components, coder_max_loop=2, sota_min_delta=0.0,
                                workspace_root=tmp_path / "ws")
    session = Session.create(log or tmp_path / "log", state_cls=FinetuneSessionState, scenario=scenario)
    return LoopEngine(workflow, session, loop_n=loops).run(), session


def test_every_loop_failing_for_one_cause_is_no_progress(tmp_path):
    summary, session = _session(tmp_path, SameFailureValidator(), loops=3)
    assert summary.status == "no_progress" and summary.loops_done == 3, summary
    assert "all 3 loop(s) failed with the same cause" in summary.message and "--path" in summary.message
    end = [e for e in read_events(session.events_path) if e.type == "session_end"]
    assert [(e.status, e.message) for e in end] == [("no_progress", summary.message)]


@pytest.mark.parametrize("error_type,vary,loops,status", [
    (ErrorType.ENV, True, 1, "no_progress"),      # the environment: no plan changes it, one loop is enough
    # different failures: the planner was trying things (no_progress's rule); but no loop scored a model,
    # so the session is no success either (issue 43: was "completed", exit 0)
    (ErrorType.DATA, True, 3, "no_model"),
    (ErrorType.DATA, False, 1, "no_model"),       # one failed loop is no pattern yet: no model all the same
])
def test_no_progress_needs_env_or_one_repeated_cause(tmp_path, error_type, vary, loops, status):
    summary, _ = _session(tmp_path, SameFailureValidator(error_type, vary), loops=loops)
    assert summary.status == status, summary


def test_a_session_with_no_progress_exits_3_with_the_reason(monkeypatch, tmp_path):
    """The CLI's exit code: a batch job (``ftagent job``) records such a task as failed, not finished."""
    from typer.testing import CliRunner

    import ftagent.finetune.app as app_module
    from ftagent.cli.main import app
    from ftagent.engine.loop import RunSummary

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(app_module, "run_finetune", lambda options: RunSummary(
        "no_progress", 3, 18, "no progress: all 3 loop(s) failed with the same cause: [validate/DATA] x"))
    result = CliRunner().invoke(app, ["llm_finetune", "--benchmark", "demo_add", "--base-model", "builtin/tiny-qwen2"])
    assert result.exit_code == 3, result.output
    assert "no progress: all 3 loop(s) failed" in result.output


# -- 34.5: an incomplete model folder; a crash after the session exists ---------------------------------
def _model_folder(root: Path, *, config: str | None = '{"model_type": "qwen2"}', weights: bool = True,
                  tokenizer: bool = True) -> Path:
    root.mkdir(parents=True)
    if config is not None:
        (root / "config.json").write_text(config)
    if weights:
        (root / "model.safetensors").write_bytes(safetensors_bytes(b"\0" * 16))
    if tokenizer:
        (root / "tokenizer.json").write_text("{}")
    return root


@pytest.mark.parametrize("kw,fragment", [
    ({"config": None}, "no config.json"),
    ({"config": "{not json"}, "config.json is not readable JSON"),
    ({"config": "{}"}, "config.json has no model_type"),
    ({"weights": False, "tokenizer": False}, "no weights (*.safetensors or *.bin); no tokenizer"),
])
def test_an_incomplete_model_folder_is_refused_before_anything_is_written(tmp_path, kw, fragment):
    """Old main: the folder was accepted; the memory estimator's ValueError (exit 1) came after the session
    existed, and that session had no session_end (shown running for good)."""
    model = _model_folder(tmp_path / "my-model", **kw)
    proc = _cli(tmp_path, "--benchmark", "demo_add", "--base-model", str(model), "--loop-n", "1")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: base model") and fragment in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "log").exists() and not (tmp_path / "ws").exists()


def test_both_job_runners_refuse_an_incomplete_model_folder(tmp_path, monkeypatch):
    import json
    import shutil

    from typer.testing import CliRunner

    from ftagent.cli.main import app

    model = _model_folder(tmp_path / "no-config", config=None)
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps({"tasks": [{"model": str(model), "benchmark": "demo_add"}]}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FT_FILE_PATH", str(tmp_path / "ft"))
    res = CliRunner().invoke(app, ["job", "run", str(tasks), "--dry-run", "--log-base", str(tmp_path / "log")])
    assert res.exit_code == 2 and "task 0:" in res.output and "no config.json" in res.output, res.output
    if not (shutil.which("jq") and shutil.which("bash")):
        return
    never = tmp_path / "never-run"  # the task's ftagent: must not start
    never.write_text("#!/bin/sh\ntouch \"$0.ran\"\n")
    never.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "TMUX"))}
    env.update(FTAGENT_PYTHON=sys.executable, FTAGENT_BIN=str(never), TMUX_TMPDIR=str(tmp_path),
               FT_JOB_LOG_BASE=str(tmp_path / "log"), FT_JOB_WORKSPACE_BASE=str(tmp_path / "ws"),
               FT_FILE_PATH=str(tmp_path / "ft"), PYTHONPATH=str(REPO))
    proc = subprocess.run(["bash", str(REPO / "job" / "run_ft_job.sh"), str(tasks)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no config.json" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert not (tmp_path / "never-run.ran").exists()


class CrashingScenario:
    """A scenario builder that crashes (a bug, not an input) after the session exists."""

    def __init__(self, settings, runner, emit, **_):
        pass

    def prepare(self):
        return None

    def build(self, prepared):
        raise ValueError("Unrecognized model in /models/x. Should have a `model_type` key in its config.json")


def test_a_crash_after_the_session_exists_still_ends_it(tmp_path, monkeypatch):
    from ftagent.finetune.app import FinetuneOptions, run_finetune

    monkeypatch.chdir(tmp_path)
    for name, value in {"LOG_PATH": tmp_path / "log", "WORKSPACE_PATH": tmp_path / "ws", "FT_FILE_PATH": tmp_path / "ft",
                        "FT_ENV_TYPE": "local", "FT_PLANNER": "heuristic",
                        "FT_SCEN": "tests.unit.test_session_faults:CrashingScenario"}.items():
        monkeypatch.setenv(name, str(value))
    with pytest.raises(ValueError, match="Unrecognized model"):
        run_finetune(FinetuneOptions(benchmark="demo_add", base_model="builtin/tiny-qwen2", loop_n=1, quiet=True))
    (session_dir,) = [p.parent for p in (tmp_path / "log").rglob("events.jsonl")]
    ends = [e for e in read_events(session_dir / "events.jsonl") if e.type == "session_end"]
    assert [e.status for e in ends] == ["failed"] and "ValueError: Unrecognized model" in ends[0].message


class InterruptedScenario(CrashingScenario):
    """A scenario with no baseline to run: the next stage is the forecast."""

    def build(self, prepared):
        return None

    def baseline(self, scenario, trace, limit):
        return None


def test_a_signal_after_the_session_exists_ends_it_interrupted(tmp_path, monkeypatch):
    """CI (0d21b10): an MCP run SIGTERMed during the forecast's probe wrote no session_end — only the baseline's
    stage caught KeyboardInterrupt. Now the one path that ends a crashed session ends an interrupted one too."""
    from ftagent.finetune.app import FinetuneOptions, run_finetune
    from ftagent.finetune.lifecycle import Terminated

    monkeypatch.chdir(tmp_path)
    for name, value in {"LOG_PATH": tmp_path / "log", "WORKSPACE_PATH": tmp_path / "ws", "FT_FILE_PATH": tmp_path / "ft",
                        "FT_ENV_TYPE": "local", "FT_PLANNER": "heuristic",
                        "FT_SCEN": "tests.unit.test_session_faults:InterruptedScenario"}.items():
        monkeypatch.setenv(name, str(value))
    def forecast(*_, **__):
        raise Terminated("terminated by SIGTERM")  # what the handler raises while the forecast's probe trains

    monkeypatch.setattr("ftagent.finetune.session_forecast.record_forecast", forecast)
    with pytest.raises(Terminated):
        run_finetune(FinetuneOptions(benchmark="demo_add", base_model="builtin/tiny-qwen2", loop_n=1, quiet=True))
    (session_dir,) = [p.parent for p in (tmp_path / "log").rglob("events.jsonl")]
    ends = [e for e in read_events(session_dir / "events.jsonl") if e.type == "session_end"]
    assert [(e.status, e.message) for e in ends] == [("interrupted", "terminated by SIGTERM")]


# -- 34.4: a full LOG_PATH ------------------------------------------------------------------------------
def _full_log_session(tmp_path: Path, small_disk: Path):
    from ftagent.views.report import write_report
    from tests.unit.test_finetune_workflow import FakeValidator

    summary, session = _session(tmp_path, FakeValidator(), loops=1, log=small_disk)
    assert summary.status == "completed"
    _, js = write_report(session.dir)
    before = js.read_bytes()
    with pytest.raises(OSError):
        _fill(small_disk / "filler")
    return session, js, before


def test_a_full_log_path_keeps_the_report_and_says_how_to_go_on(tmp_path, small_disk):
    """Old main: a raw OSError traceback from the report writer, report.json left at 0 bytes."""
    from ftagent.core.errors import EnvironmentFailure
    from ftagent.views.report import write_report

    session, js, before = _full_log_session(tmp_path, small_disk)
    (session.dir / "events.jsonl").open("a").write("")  # the log is still readable
    with pytest.raises(EnvironmentFailure) as info:
        write_report(session.dir)
    message = str(info.value)
    assert "No space left on device" in message and f"ftagent report {session.dir}" in message
    assert f"--path {session.dir}" in message
    assert js.read_bytes() == before and len(before) > 0  # the previous report, whole
    assert not [p for p in session.dir.iterdir() if p.name.endswith(".tmp")]


def test_ftagent_report_on_a_full_disk_is_one_error_exit_1(tmp_path, small_disk):
    session, js, before = _full_log_session(tmp_path, small_disk)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "CHAT_", "OPENAI_"))}
    proc = subprocess.run([sys.executable, "-m", "ftagent", "report", str(session.dir)], cwd=tmp_path,
                          env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: cannot write the report") and "--path" in lines[0]
    assert js.read_bytes() == before


class LogFillingScenario(CrashingScenario):
    """Its build writes into LOG_PATH until the disk is full (a real ENOSPC out of the session's run)."""

    def build(self, prepared):
        _fill(Path(os.environ["LOG_PATH"]) / "filler")


def test_a_full_log_path_during_the_run_ends_with_what_to_free(tmp_path, small_disk, monkeypatch):
    from ftagent.core.errors import EnvironmentFailure
    from ftagent.finetune.app import FinetuneOptions, run_finetune

    monkeypatch.chdir(tmp_path)
    for name, value in {"LOG_PATH": small_disk, "WORKSPACE_PATH": tmp_path / "ws", "FT_FILE_PATH": tmp_path / "ft",
                        "FT_ENV_TYPE": "local", "FT_PLANNER": "heuristic",
                        "FT_SCEN": "tests.unit.test_session_faults:LogFillingScenario"}.items():
        monkeypatch.setenv(name, str(value))
    with pytest.raises(EnvironmentFailure) as info:
        run_finetune(FinetuneOptions(benchmark="demo_add", base_model="builtin/tiny-qwen2", loop_n=1, quiet=True))
    message = str(info.value)
    assert message.startswith("the session stopped: the disk is full") and str(small_disk) in message
    assert "--path" in message


# -- 34.2: an interrupted download, offline -------------------------------------------------------------
def _half_download(folder: Path, name: str) -> None:
    """What a killed ``snapshot_download(local_dir=folder)`` leaves: one file half-written in the Hub's cache."""
    cache = folder / ".cache" / "huggingface" / "download"
    (cache / f"{name}.incomplete").parent.mkdir(parents=True, exist_ok=True)
    (cache / f"{name}.incomplete").write_text('[{"question": "half')
    (cache / ".gitignore").write_text("*\n")


@pytest.fixture
def offline(monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def test_an_interrupted_benchmark_download_offline_is_never_marked_complete(tmp_path, offline):
    """Old main: snapshot_download returned, .complete was written, the run crashed reading the data, and the
    folder counted as complete for good."""
    from huggingface_hub import snapshot_download

    from ftagent.benchmarks import get_benchmark
    from ftagent.benchmarks.base import COMPLETE
    from ftagent.benchmarks.domain_adapters import ensure_raw, raw_dir
    from ftagent.core.errors import EnvironmentFailure

    probe = tmp_path / "probe"
    _half_download(probe, "PQA_test.json")
    assert Path(snapshot_download(repo_id="x/y", repo_type="dataset", local_dir=str(probe))) == probe.resolve()

    raw = raw_dir(tmp_path, "bioprobench_pqa")
    _half_download(raw, "PQA_test.json")
    with pytest.raises(EnvironmentFailure) as info:
        ensure_raw(get_benchmark("bioprobench_pqa"), tmp_path)
    message = str(info.value)
    assert str(raw) in message and "HF_HUB_OFFLINE" in message and "PQA_test.json.incomplete" in message
    assert f"create {COMPLETE}" in message and not (raw / COMPLETE).exists()
    with pytest.raises(EnvironmentFailure):  # and again: nothing was marked in between
        ensure_raw(get_benchmark("bioprobench_pqa"), tmp_path)
    (raw / COMPLETE).write_text("ok\n")  # what old main left: the marker over the half-download
    with pytest.raises(EnvironmentFailure, match="was interrupted"):
        ensure_raw(get_benchmark("bioprobench_pqa"), tmp_path)


def test_an_interrupted_dataset_download_offline_is_never_used(tmp_path, offline):
    from ftagent.core.errors import EnvironmentFailure
    from ftagent.datasets import prepare

    out = prepare.dataset_dir("bioprobench", tmp_path)
    staging = out.with_name(f".{out.name}.partial")
    _half_download(staging, "PQA.json")
    with pytest.raises(EnvironmentFailure) as info:
        prepare.prepare_dataset("bioprobench", tmp_path)
    assert str(staging) in str(info.value) and "HF_HUB_OFFLINE" in str(info.value)
    assert not out.exists() and not prepare.is_prepared("bioprobench", tmp_path)


def test_a_download_that_returns_with_a_half_written_file_is_refused(tmp_path, monkeypatch):
    """Online too: a call that returned while a file is still ``.incomplete`` (a second process, a bug)."""
    import huggingface_hub

    from ftagent.benchmarks.base import COMPLETE, hub_snapshot
    from ftagent.core.errors import EnvironmentFailure

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download",
                        lambda **kw: _half_download(Path(kw["local_dir"]), "data/test.parquet") or kw["local_dir"])
    with pytest.raises(EnvironmentFailure, match="is unfinished"):
        hub_snapshot("org/bench", tmp_path / "raw")
    assert not (tmp_path / "raw" / COMPLETE).exists()


# -- 34.9: no training source ---------------------------------------------------------------------------
NO_SOURCE_YAML = """\
name: times_three
description: "Multiply by 3; reply with the number only."
data: {file: times_three.jsonl}
prompt: "{question}"
answer: answer
metric: exact_match
"""


def _no_source_benchmark(folder: Path) -> Path:
    import json

    (folder / "times_three.yaml").write_text(NO_SOURCE_YAML)
    with (folder / "times_three.jsonl").open("w") as fh:
        for n in range(10, 70):
            fh.write(json.dumps({"question": f"What is {n} times 3?", "answer": str(3 * n)}) + "\n")
    return folder / "times_three.yaml"


def test_a_benchmark_without_a_training_source_is_refused_at_start(tmp_path):
    """Old main: 10 code rounds that each wrote 0 rows, then ``completed``, exit 0."""
    bench = _no_source_benchmark(tmp_path)
    proc = _cli(tmp_path, "--benchmark", str(bench), "--base-model", "builtin/tiny-qwen2", "--loop-n", "1")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "has no training data" in lines[0], proc.stderr
    assert "--dataset" in lines[0] and "related_datasets" in lines[0]
    assert not (tmp_path / "log").exists() and not (tmp_path / "ws").exists()


@pytest.mark.parametrize("dataset,planner,refused", [
    (None, "heuristic", True),
    ("demo_add", "heuristic", False),   # --dataset: a source
    (None, "llm", False),               # the LLM planner selects (or generates) the data itself
])
def test_the_training_source_check(tmp_path, monkeypatch, dataset, planner, refused):
    from ftagent.core.errors import UserInputError
    from ftagent.finetune.resolve import check_training_source

    monkeypatch.setenv("FT_FILE_PATH", str(tmp_path / "ft"))
    if refused:
        with pytest.raises(UserInputError, match="has no training data"):
            check_training_source(planner, dataset, "times_three", [])
    else:
        check_training_source(planner, dataset, "times_three", [])
