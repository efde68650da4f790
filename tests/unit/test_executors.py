"""Executors: the per-task supervisor, resume after a lost attempt, cancel, and the ``local`` executor.

Running the real ``ftagent llm_finetune`` would take minutes per task here, so (as in
test_job_script.py) the tasks run a small fake ``ftagent`` written below (``FTAGENT_BIN``). It behaves
like a resumable session: it creates ``<LOG_PATH>/<session>/`` with ``events.jsonl`` and writes one
snapshot ``__session__/0/<seq>_step<seq>`` per step with short sleeps; started with ``--path
<session>`` it continues after the last snapshot. The Ray integration test reuses it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ftagent.cli import app
from ftagent.jobs import executors as ex
from ftagent.jobs.tasks import build_plan, task_descriptions, validate_tasks

FAKE_FTAGENT = '''#!{python}
"""Fake ftagent llm_finetune: a resumable session of FT_FAKE_STEPS steps, FT_FAKE_DELAY seconds each."""
import json, os, sys, time
from pathlib import Path

args = sys.argv[1:]
steps, delay = int(os.environ.get("FT_FAKE_STEPS", "4")), float(os.environ.get("FT_FAKE_DELAY", "0.2"))
if "--path" in args:
    session = Path(args[args.index("--path") + 1])
    done = [int(p.name.split("_")[0]) for p in (session / "__session__" / "0").iterdir()]
    start = max(done) + 1
else:
    session = Path(os.environ["LOG_PATH"]) / ("s%d" % time.time_ns())
    start = 0
(session / "__session__" / "0").mkdir(parents=True, exist_ok=True)
events = session / "events.jsonl"

def event(**kw):
    with open(events, "a") as fh:
        fh.write(json.dumps(dict(kw, t=time.time())) + "\\n")

event(kind="fake_start", start=start, pid=os.getpid(), argv=args,
      env={{k: os.environ.get(k) for k in ("LOG_PATH", "WORKSPACE_PATH", "CUDA_VISIBLE_DEVICES", "FT_MARK")}})
print("fake ftagent", "resumed at" if start else "started at", start, flush=True)
for i in range(start, steps):
    time.sleep(delay)
    snap = session / "__session__" / "0" / ("%d_step%d" % (i, i))
    tmp = snap.with_name("." + snap.name)
    tmp.write_text(json.dumps({{"step": i}}))
    os.replace(tmp, snap)
    event(kind="fake_step", seq=i)
event(kind="fake_end")
print("fake ftagent done", flush=True)
sys.exit(int(os.environ.get("FT_FAKE_RC", "0")))
'''


def write_fake_ftagent(folder: Path, python: str = sys.executable) -> Path:
    """Write the fake ``ftagent`` executable into ``folder``; returns its path."""
    path = folder / "fake-ftagent"
    path.write_text(FAKE_FTAGENT.format(python=python))
    path.chmod(0o755)
    return path


def fake_events(session: Path) -> list[dict]:
    """The fake's events of one session."""
    return [json.loads(line) for line in (session / "events.jsonl").read_text().splitlines()]


def make_plan(tmp_path: Path, tasks: list[dict], job_id: str = "j1"):
    """A job plan over the fake ftagent."""
    spec, errors = validate_tasks({"tasks": tasks})
    assert spec is not None, errors
    return build_plan(spec, job_id=job_id, log_base=tmp_path / "log", workspace_base=tmp_path / "ws",
                      ftagent_bin=str(write_fake_ftagent(tmp_path)), descriptions=task_descriptions(spec))


TWO = [{"model": "builtin/tiny-qwen2", "benchmark": "demo_add", "gpus": "0"},
       {"model": "m/other", "benchmark": "demo_add", "gpus": "1"}]


@pytest.fixture(autouse=True)
def _fast(monkeypatch):
    monkeypatch.setenv("FT_FAKE_DELAY", "0.1")
    monkeypatch.setenv("FT_FAKE_STEPS", "3")


def test_local_executor_runs_all_tasks(tmp_path, monkeypatch):
    monkeypatch.setenv("FT_MARK", "forwarded")
    plan = make_plan(tmp_path, TWO)
    plan.tasks[1].env["FT_FAKE_RC"] = "3"  # second task fails: its exit code is recorded, the first unaffected
    results = ex.LocalExecutor(workdir=tmp_path, poll_s=0.05).run(plan)
    assert results == {"demo_add_tiny-qwen2": 0, "demo_add_other": 3}
    job = Path(plan.job_dir)
    assert json.loads((job / "job.json").read_text())["job_id"] == "j1"
    for task, rc, state in ((plan.tasks[0], 0, "finished"), (plan.tasks[1], 3, "failed")):
        assert (job / ".run" / f"{task.name}.exit").read_text().strip() == str(rc)
        st = ex.read_state(job, task.name)
        assert (st.state, st.attempts, st.exit_code, st.pid) == (state, 1, rc, None)
        (session,) = [d for d in Path(task.log_path).iterdir() if d.is_dir()]
        evs = fake_events(session)
        assert [e["kind"] for e in evs] == ["fake_start", "fake_step", "fake_step", "fake_step", "fake_end"]
        assert evs[0]["env"]["LOG_PATH"] == task.log_path and evs[0]["env"]["FT_MARK"] == "forwarded"
        assert evs[0]["env"]["WORKSPACE_PATH"] == task.workspace_path and Path(task.workspace_path).is_dir()
        assert "fake ftagent done" in Path(task.log_file).read_text()
    assert evs[0]["env"]["CUDA_VISIBLE_DEVICES"] == "1"  # local: the listed GPUs


def test_second_attempt_resumes_from_last_snapshot(tmp_path, monkeypatch):
    monkeypatch.setenv("FT_FAKE_STEPS", "5")
    plan = make_plan(tmp_path, TWO[:1])
    task, job = plan.tasks[0], Path(plan.job_dir)
    ex.prepare_job_dir(plan)
    started: list[int] = []
    # attempt 1 dies after two snapshots (as if its node died: SIGKILL, no exit file written)
    th = threading.Thread(target=lambda: ex.execute_task(task, job, executor="test", poll_s=0.05,
                                                         on_start=started.append))
    th.start()
    deadline = time.time() + 20
    while time.time() < deadline and sum(1 for _ in Path(task.log_path).glob("*/__session__/0/*")) < 2:
        time.sleep(0.02)
    (session,) = Path(task.log_path).iterdir()
    os.killpg(started[0], 9)
    th.join()
    os.remove(job / ".run" / f"{task.name}.exit")  # a dead node writes no exit file
    done_before = {p.name for p in (session / "__session__" / "0").iterdir()}
    assert ex.task_argv(task) == ([task.argv[0], "llm_finetune", "--path", str(session)], str(session))
    rc = ex.execute_task(task, job, executor="test", poll_s=0.05)
    assert rc == 0
    starts = [e for e in fake_events(session) if e["kind"] == "fake_start"]
    assert starts[1]["argv"] == ["llm_finetune", "--path", str(session)]
    assert starts[1]["start"] == max(int(n.split("_")[0]) for n in done_before) + 1
    assert sorted(int(p.name.split("_")[0]) for p in (session / "__session__" / "0").iterdir()) == list(range(5))
    st = ex.read_state(job, task.name)
    assert st.attempts == 2 and st.resumed_from == str(session) and st.state == "finished"
    assert f"attempt 2 on {st.node}: resuming {session}" in Path(task.log_file).read_text()


def test_cancel_one_task_then_the_rest(tmp_path, monkeypatch):
    monkeypatch.setenv("FT_FAKE_STEPS", "200")
    plan = make_plan(tmp_path, TWO)
    job = Path(plan.job_dir)
    runner = threading.Thread(target=lambda: results.update(ex.LocalExecutor(poll_s=0.05, grace_s=2).run(plan)))
    results: dict[str, int] = {}
    runner.start()
    deadline = time.time() + 20
    while time.time() < deadline and not all(
            (ex.read_state(job, t.name) or ex.TaskRunState(name="", executor="")).state == "running"
            for t in plan.tasks):
        time.sleep(0.05)
    res = CliRunner().invoke(app, ["job", "cancel", str(job), "--task", plan.tasks[0].name])
    assert res.exit_code == 0 and f"cancel requested for: {plan.tasks[0].name}" in res.output
    t0 = time.time()
    while time.time() - t0 < 10 and not (job / ".run" / f"{plan.tasks[0].name}.exit").exists():
        time.sleep(0.05)
    assert ex.read_state(job, plan.tasks[0].name).state == "cancelled"
    assert ex.read_state(job, plan.tasks[1].name).state == "running"  # the other keeps going
    res = CliRunner().invoke(app, ["job", "cancel", str(job)])
    assert res.exit_code == 0 and res.output.strip() == f"cancel requested for: {plan.tasks[1].name}"
    runner.join(timeout=15)
    assert results == {t.name: ex.CANCELLED_RC for t in plan.tasks}
    pid = max(e["pid"] for s in Path(plan.tasks[1].log_path).iterdir() for e in fake_events(s) if "pid" in e)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    res = CliRunner().invoke(app, ["job", "cancel", str(job)])
    assert "nothing to cancel" in res.output
    res = CliRunner().invoke(app, ["job", "cancel", str(job), "--task", "nope"])
    assert res.exit_code == 2 and "unknown task(s) nope" in res.output


def test_cancel_before_start_never_runs(tmp_path):
    plan = make_plan(tmp_path, TWO[:1])
    job = ex.prepare_job_dir(plan)
    assert ex.request_cancel(job) == [plan.tasks[0].name]
    assert ex.execute_task(plan.tasks[0], job, executor="test") == ex.CANCELLED_RC
    assert not Path(plan.tasks[0].log_path).exists()


def test_forwarded_env_drops_secrets():
    env = {"FT_X": "1", "HF_TOKEN": "t", "OPENAI_API_KEY": "k", "OPENAI_API_BASE": "b", "PATH": "/bin",
           "OMP_NUM_THREADS": "1", "FT_DB_PASSWORD": "p"}
    assert ex.forwarded_env(env) == {"FT_X": "1", "OPENAI_API_BASE": "b", "OMP_NUM_THREADS": "1"}


def test_cli_run_local_and_status(tmp_path):
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps({"tasks": TWO}))
    fake = write_fake_ftagent(tmp_path)
    env = {**os.environ, "FTAGENT_BIN": str(fake), "FT_FAKE_DELAY": "0.05", "FT_FAKE_STEPS": "2",
           "FT_JOB_LOG_BASE": str(tmp_path / "log"), "FT_JOB_WORKSPACE_BASE": str(tmp_path / "ws")}
    cmd = [str(Path(sys.executable).with_name("ftagent"))]
    res = subprocess.run([*cmd, "job", "run", str(tasks), "--job-id", "cli1"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "demo_add_tiny-qwen2: exit 0" in res.stdout and "demo_add_other: exit 0" in res.stdout
    res = subprocess.run([*cmd, "job", "run", str(tasks), "--job-id", "cli1"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "already exists" in res.stderr
    res = CliRunner().invoke(app, ["job", "status", str(tmp_path / "log" / "cli1")])
    assert res.exit_code == 0, res.output
    assert "demo_add_other: finished exit 0 (local, attempt 1" in res.output


def test_cli_run_rejects_bad_input(tmp_path):
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps({"tasks": [{"model": "m"}]}))
    res = CliRunner().invoke(app, ["job", "run", str(tasks)])
    assert res.exit_code == 2 and "'benchmark' is required" in res.output
    tasks.write_text(json.dumps({"tasks": TWO}))
    res = CliRunner().invoke(app, ["job", "run", str(tasks), "--executor", "slurm"])
    assert res.exit_code == 2 and "use local or ray" in res.output


def test_task_gpu_set_reaches_every_launcher(tmp_path, monkeypatch):
    """tasks.json ``gpus`` -> the task's CUDA_VISIBLE_DEVICES (local), a Ray GPU reservation (ray), and
    inside the task: the GPUs ftagent sees, the torchrun width and the Docker DeviceRequest ids."""
    from types import SimpleNamespace

    import pynvml

    from ftagent.core.hardware import GIB, detect_gpus
    from ftagent.jobs.ray_executor import task_options
    from ftagent.runners.docker import gpu_device_ids
    from ftagent.tools.llamafactory.launch import launch_env, visible_gpus

    tasks, errors = validate_tasks({"tasks": [{"model": "m1", "benchmark": "demo_add", "gpus": "2,3"},
                                              {"model": "m2", "benchmark": "demo_add", "gpus": "0"}]})
    assert not errors
    plan = build_plan(tasks, job_id="j", log_base=tmp_path / "log", workspace_base=tmp_path / "ws", ftagent_bin="ft", descriptions=task_descriptions(tasks))
    first, second = plan.tasks
    assert first.env["CUDA_VISIBLE_DEVICES"] == "2,3" and second.env["CUDA_VISIBLE_DEVICES"] == "0"
    opts, drop = task_options(first, node_gpus=4)
    assert opts["num_gpus"] == 2 and "CUDA_VISIBLE_DEVICES" in drop  # Ray assigns the devices itself
    # inside task 1 (4 GPUs on the node, CUDA_VISIBLE_DEVICES=2,3 from its plan)
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: 4)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: i)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetName", lambda h: "NVIDIA H100")
    monkeypatch.setattr(pynvml, "nvmlDeviceGetUUID", lambda h: f"GPU-{h}")
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMemoryInfo", lambda h: SimpleNamespace(total=80 * GIB, used=0, free=0))
    monkeypatch.setattr(pynvml, "nvmlSystemGetDriverVersion", lambda: "580")
    monkeypatch.setattr(pynvml, "nvmlSystemGetCudaDriverVersion", lambda: 13000)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", first.env["CUDA_VISIBLE_DEVICES"])
    hardware = detect_gpus()
    assert [g.index for g in hardware.gpus] == [2, 3]
    assert launch_env(hardware, {}) == {"FORCE_TORCHRUN": "1", "NPROC_PER_NODE": "2"}
    gpus = visible_gpus(hardware)
    assert gpus == "2,3" and gpu_device_ids(gpus, environ={}) == ["2", "3"]  # docker: the same two devices
