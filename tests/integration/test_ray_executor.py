"""``ftagent job run --executor ray`` on a real local Ray cluster (head + one worker on this machine).

The cluster is started with ``ray start --head --block`` and ``ray start --address ... --block`` in
their own process groups, with a dedicated temp dir and free ports, and a custom resource
``fake_gpu`` (1 per node) standing in for GPUs. The tasks run the resumable fake ``ftagent`` of
tests/unit/test_executors.py (a real ``llm_finetune`` takes minutes per task on this machine), except
one: the real ``ftagent`` on one demo loop (issue 32 item 10).
Teardown kills only the processes these tests started (by pid / process group); it never runs
``ray stop`` (which would stop every Ray cluster on the machine).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ftagent.jobs import executors as ex
from tests.unit.test_executors import fake_events, write_fake_ftagent

pytestmark = pytest.mark.integration
ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'ftagent[ray]')")
RAY = Path(sys.executable).with_name("ray")
FTAGENT = Path(sys.executable).with_name("ftagent")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        kids.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    return kids


def _descendants(pid: int) -> list[int]:
    kids, out, todo = _children(), [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


class Cluster:
    """A head and worker nodes started by this test; ``stop`` kills exactly those processes."""

    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # short: unix socket paths
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []
        self.env = {**os.environ, "OMP_NUM_THREADS": "1", "RAY_USAGE_STATS_ENABLED": "0"}

    def _start(self, args: list[str], log: str) -> subprocess.Popen:
        proc = subprocess.Popen([str(RAY), "start", "--block", "--node-ip-address", "127.0.0.1",
                                 "--resources", json.dumps({"fake_gpu": 1}), *args],
                                stdout=open(self.tmp / log, "w"), stderr=subprocess.STDOUT,
                                env=self.env, start_new_session=True)
        self.procs.append(proc)
        return proc

    def start_head(self) -> None:
        self._start(["--head", "--port", str(self.port), "--num-cpus", "2", "--include-dashboard=false",
                     "--dashboard-port", str(_free_port()), "--ray-client-server-port", str(_free_port()),
                     "--object-store-memory", str(200 * 1024**2), "--temp-dir", str(self.tmp)], "head.log")
        self.wait_for_gpus(1)

    def start_worker(self) -> subprocess.Popen:
        proc = self._start(["--address", self.address, "--num-cpus", "1",
                            "--object-store-memory", str(100 * 1024**2)], f"worker{len(self.procs)}.log")
        self.wait_for_gpus(2)
        return proc

    def wait_for_gpus(self, n: int, timeout_s: float = 90) -> None:
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            res = subprocess.run([str(RAY), "status", "--address", self.address], env=self.env,
                                 capture_output=True, text=True)
            if f"/{n}.0 fake_gpu" in res.stdout:
                return
            time.sleep(1)
        raise AssertionError(f"cluster never reached {n} fake_gpu: {(self.tmp / 'head.log').read_text()[-2000:]}")

    def kill(self, proc: subprocess.Popen) -> None:
        """SIGKILL a node: its `ray start` process group (raylet and agents) at once."""
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def stop(self) -> None:
        pids = [p for proc in self.procs for p in _descendants(proc.pid)]
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        time.sleep(3)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)
        shutil.rmtree(self.tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster():
    c = Cluster()
    try:
        c.start_head()
        c.worker = c.start_worker()
        yield c
    finally:
        c.stop()


def _job(tmp_path: Path, cluster: Cluster, tasks: list[dict], job_id: str, **env: str) -> tuple[list[str], dict]:
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps({"tasks": tasks}))
    full_env = {**cluster.env, "FTAGENT_BIN": str(write_fake_ftagent(tmp_path)), "FT_JOB_LOG_BASE": str(tmp_path / "log"),
                "FT_JOB_WORKSPACE_BASE": str(tmp_path / "ws"), **env}
    argv = [str(FTAGENT), "job", "run", str(path), "--executor", "ray", "--address", cluster.address,
            "--gpu-resource", "fake_gpu", "--job-id", job_id]
    return argv, full_env


def _tasks(n: int) -> list[dict]:
    return [{"model": f"org/m{i}", "benchmark": "demo_add", "gpus": str(i)} for i in range(n)]


def _sessions(job_dir: Path, name: str) -> list[Path]:
    return [d for d in (job_dir / name).iterdir() if d.is_dir()]


def test_tasks_finish_with_gpus_reserved(cluster, tmp_path):
    argv, env = _job(tmp_path, cluster, _tasks(3), "ok", FT_FAKE_STEPS="3", FT_FAKE_DELAY="0.5")
    res = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    job = tmp_path / "log" / "ok"
    spans = []
    for i in range(3):
        name = f"demo_add_m{i}"
        assert (job / ".run" / f"{name}.exit").read_text().strip() == "0"
        st = ex.read_state(job, name)
        assert (st.executor, st.state, st.attempts) == ("ray", "finished", 1)
        (session,) = _sessions(job, name)
        evs = fake_events(session)
        assert [e["kind"] for e in evs][-1] == "fake_end" and len(list((session / "__session__/0").iterdir())) == 3
        assert evs[0]["env"]["LOG_PATH"] == str(job / name) + "/" and evs[0]["env"]["CUDA_VISIBLE_DEVICES"] is None
        spans.append((st.node, evs[0]["t"], evs[-1]["t"]))
    # 3 tasks x 1 fake_gpu on 2 nodes x 1 fake_gpu: never more than one task per node at a time
    for a in range(3):
        for b in range(a + 1, 3):
            if spans[a][0] == spans[b][0]:
                assert spans[a][2] <= spans[b][1] or spans[b][2] <= spans[a][1], spans
    assert len({s[0] for s in spans}) == 2, spans


def test_submission_overhead_vs_local(cluster, tmp_path):
    times = {}
    for executor in ("local", "ray"):
        argv, env = _job(tmp_path, cluster, _tasks(1), f"oh-{executor}", FT_FAKE_STEPS="1", FT_FAKE_DELAY="0")
        argv[argv.index("--executor") + 1] = executor
        t0 = time.perf_counter()
        res = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        times[executor] = time.perf_counter() - t0
        assert res.returncode == 0, res.stdout + res.stderr
    print(f"\none quick task end to end: local {times['local']:.2f}s, ray {times['ray']:.2f}s, "
          f"ratio {times['ray'] / times['local']:.1f}x")
    assert times["ray"] < 60


def test_cancel_running_and_waiting_tasks(cluster, tmp_path):
    argv, env = _job(tmp_path, cluster, _tasks(3), "cx", FT_FAKE_STEPS="500", FT_FAKE_DELAY="0.2")
    driver = subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    job = tmp_path / "log" / "cx"
    try:
        deadline = time.time() + 90
        running: list[str] = []
        while time.time() < deadline and len(running) < 2:
            running = [f"demo_add_m{i}" for i in range(3)
                       if (ex.read_state(job, f"demo_add_m{i}") or ex.TaskRunState(name="", executor="")).state
                       == "running"]
            time.sleep(0.3)
        assert len(running) == 2, "two tasks should hold the two fake GPUs"
        (waiting,) = {f"demo_add_m{i}" for i in range(3)} - set(running)
        assert ex.read_state(job, waiting).state == "pending"
        subprocess.run([str(FTAGENT), "job", "cancel", str(job), "--task", waiting], check=True, env=env)
        assert set(running) <= set(ex.request_cancel(job))  # the rest
        out, _ = driver.communicate(timeout=90)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 1, out
    for name in running + [waiting]:
        assert ex.read_state(job, name).state == "cancelled", (name, out)
        assert (job / ".run" / f"{name}.exit").read_text().strip() == str(ex.CANCELLED_RC)
    assert not (job / waiting).exists() or not _sessions(job, waiting)  # never started
    for name in running:
        (session,) = _sessions(job, name)
        pid = fake_events(session)[0]["pid"]
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_task_resumes_after_its_node_dies(cluster, tmp_path):
    argv, env = _job(tmp_path, cluster, _tasks(2), "nd", FT_FAKE_STEPS="30", FT_FAKE_DELAY="0.3")
    driver = subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    job = tmp_path / "log" / "nd"
    try:
        victim, deadline = None, time.time() + 90
        worker_tree = set(_descendants(cluster.worker.pid))
        while time.time() < deadline and victim is None:
            for name in ("demo_add_m0", "demo_add_m1"):
                st = ex.read_state(job, name)
                if st and st.pid and st.state == "running" and _ppid(st.pid) in worker_tree:
                    if len(list((job / name).glob("*/__session__/0/*"))) >= 2:
                        victim = name
            worker_tree |= set(_descendants(cluster.worker.pid))
            time.sleep(0.2)
        assert victim, "no task ran on the worker node"
        cluster.kill(cluster.worker)
        t_kill = time.time()
        out, _ = driver.communicate(timeout=180)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, out
    st = ex.read_state(job, victim)
    (session,) = _sessions(job, victim)
    assert (st.state, st.attempts, st.resumed_from) == ("finished", 2, str(session)), st
    starts = [e for e in fake_events(session) if e["kind"] == "fake_start"]
    assert len(starts) == 2 and starts[1]["argv"] == ["llm_finetune", "--path", str(session)]
    assert starts[1]["start"] >= 2 and starts[1]["t"] > t_kill  # continued after its snapshots, not from 0
    assert sorted(int(p.name.split("_")[0]) for p in (session / "__session__/0").iterdir()) == list(range(30))
    other = "demo_add_m1" if victim == "demo_add_m0" else "demo_add_m0"
    assert ex.read_state(job, other).attempts == 1
    print(f"\nnode killed; task {victim} resumed at step {starts[1]['start']} "
          f"{starts[1]['t'] - t_kill:.1f}s after the kill")


def test_the_real_ftagent_runs_one_demo_task_on_the_cluster(cluster, tmp_path, tools_env, tiny_model):
    """Issue 32 item 10: the real ``ftagent llm_finetune`` (not the fake) as a Ray task: one loop of the demo
    (tiny-qwen2, demo_add with small splits, heuristic planner), started on a node of the two-node cluster."""
    files = tmp_path / "files"
    shutil.copytree(tiny_model, files / "models" / "builtin" / "tiny-qwen2")  # built once per test session
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps({"tasks": [{"model": "builtin/tiny-qwen2", "benchmark": "demo_add", "gpus": "0",
                                           "loop_n": 1, "timeout": "15m"}]}))
    env = {k: v for k, v in cluster.env.items() if not k.startswith(("FT_", "CHAT_", "OPENAI_", "FTAGENT_BIN"))}
    env.update(FT_FILE_PATH=str(files), FT_TOOLS_ENV=str(tools_env), FT_ENV_TYPE="local", FT_PLANNER="heuristic",
               FT_BENCHMARK_LIMIT="8", FT_UPPER_DATA_SIZE_LIMIT="200", FT_JOB_LOG_BASE=str(tmp_path / "log"),
               FT_JOB_WORKSPACE_BASE=str(tmp_path / "ws"), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", LITELLM_LOCAL_MODEL_COST_MAP="True")
    argv = [str(FTAGENT), "job", "run", str(path), "--executor", "ray", "--address", cluster.address,
            "--gpu-resource", "fake_gpu", "--job-id", "real"]
    t0 = time.perf_counter()
    res = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    took = time.perf_counter() - t0
    job = tmp_path / "log" / "real"
    logs = "".join(p.read_text(errors="replace")[-3000:] for p in job.rglob("*.log")) if job.is_dir() else ""
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:] + logs
    names = [p.name for p in job.iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert len(names) == 1, names
    name = names[0]
    st = ex.read_state(job, name)
    assert (st.executor, st.state, st.attempts) == ("ray", "finished", 1) and st.node, st
    (session,) = _sessions(job, name)
    report = json.loads((session / "report.json").read_text())
    assert report["status"] == "completed" and len(report["loops"]) == 1, report
    assert report["loops"][0]["val_score"] is not None, report["loops"][0]  # trained and evaluated
    assert report["baseline_val"] is not None and report["planner"] == "heuristic"
    assert str(session).startswith(str(job / name))  # LOG_PATH from the job, on the node that ran it
    print(f"\nthe real ftagent: one demo loop as a Ray task on node {st.node} in {took:.0f}s")
