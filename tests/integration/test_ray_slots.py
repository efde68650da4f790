"""``FT_SLOT_EXECUTOR=ray`` on a real local Ray cluster (issue 41): trials hold their slots as Ray tasks.

A head node with two ``fake_gpu`` (a custom resource standing in for GPUs, as in test_ray_executor.py) lends
the slots of the session's scheduler (:class:`ftagent.engine.parallel.Scheduler`, the same one as the local
slots) through :class:`ftagent.jobs.ray_slots.RaySlotPool`; the trials are a scripted workflow whose
training sleeps. Checked: two trials run at once, each while its lease task holds one ``fake_gpu`` on this
node; while another Ray task holds one ``fake_gpu``, only one trial runs at a time (Ray arbitrates); every
lease is given back at the end (the cluster's two ``fake_gpu`` free again).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from ftagent.core.slots import Slot
from ftagent.engine.events import read_events
from ftagent.engine.loop import LoopEngine
from ftagent.engine.session import Session
from tests.helpers.signals import ctrl_c_raises
from tests.integration.test_ray_executor import Cluster
from tests.unit._workflows import RecordingWorkflow, TraceState

pytestmark = pytest.mark.integration
ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'ftagent[ray]')")


class TwoGpuCluster(Cluster):
    """A head node with two ``fake_gpu``."""

    def _start(self, args, log):  # type: ignore[no-untyped-def]
        import os
        import subprocess

        from tests.integration.test_ray_executor import RAY

        proc = subprocess.Popen([str(RAY), "start", "--block", "--node-ip-address", "127.0.0.1",
                                 "--resources", json.dumps({"fake_gpu": 2}), *args],
                                stdout=open(self.tmp / log, "w"), stderr=subprocess.STDOUT,  # noqa: SIM115
                                env=self.env, start_new_session=True)
        self.procs.append(proc)
        assert os.getpgid(proc.pid) == proc.pid
        return proc

    def start_head(self) -> None:
        from tests.integration.test_ray_executor import _free_port

        self._start(["--head", "--port", str(self.port), "--num-cpus", "2", "--include-dashboard=false",
                     "--dashboard-port", str(_free_port()), "--ray-client-server-port", str(_free_port()),
                     "--object-store-memory", str(200 * 1024**2), "--temp-dir", str(self.tmp)], "head.log")
        self.wait_for_gpus(2)


@pytest.fixture(scope="module")
def cluster():
    c = TwoGpuCluster()
    try:
        c.start_head()
        yield c
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.stop()


def _concurrency(session: Session) -> int:
    """The most trials whose train step ran at the same time (from the events)."""
    edges = []
    for ev in read_events(session.events_path):
        if getattr(ev, "step", None) == "train" and ev.type in ("step_start", "step_end"):
            edges.append((ev.ts, 1 if ev.type == "step_start" else -1))
    now = most = 0
    for _ts, d in sorted(edges, key=lambda e: (e[0], e[1])):
        now += d
        most = max(most, now)
    return most


def _run(tmp_path: Path, cluster: Cluster, name: str, loops: int) -> tuple[Session, object]:
    from ftagent.jobs.ray_slots import RaySlotPool

    session = Session.create(tmp_path / name, state_cls=TraceState)
    pool = RaySlotPool([Slot(index=0, gpus=["0"], gpu_indices=[0]), Slot(index=1, gpus=["1"], gpu_indices=[1])],
                       address=cluster.address, gpu_resource="fake_gpu", lease_dir=session.dir / ".slots")
    wf = RecordingWorkflow(plan={(i, "train"): "sleep:1.5" for i in range(loops)})
    wf.serial_steps = ("propose", "feedback")  # type: ignore[attr-defined]
    summary = LoopEngine(wf, session, loop_n=loops, pool=pool).run()
    assert summary.status == "completed", summary
    return session, pool


def test_trials_hold_their_slots_as_ray_tasks_and_wait_while_ray_has_no_gpu_free(tmp_path: Path, cluster) -> None:
    session, _ = _run(tmp_path, cluster, "free", 4)
    assert _concurrency(session) == 2
    held = [json.loads(p.read_text()) for p in (session.dir / ".slots").glob("*.held")]
    node = ray.get_runtime_context().get_node_id()
    assert len(held) == 4 and {h["node"] for h in held} == {node}  # one lease per trial, on this node
    starts = [e for e in read_events(session.events_path) if e.type == "trial_start"]
    assert sorted(e.loop for e in starts) == [0, 1, 2, 3]

    @ray.remote(resources={"fake_gpu": 1}, num_cpus=0)
    def other_work(seconds: float, started: str) -> float:  # another user of the node's GPUs
        Path(started).touch()
        time.sleep(seconds)
        return seconds

    started = tmp_path / "other_work.started"
    busy = other_work.remote(12.0, str(started))
    deadline = time.time() + 60  # it holds one fake_gpu now (Ray leases a worker slowly on a loaded machine)
    while time.time() < deadline and not started.exists():
        time.sleep(0.1)
    assert started.exists()
    t0 = time.time()
    session2, _ = _run(tmp_path, cluster, "contended", 3)
    assert _concurrency(session2) == 1, "a trial ran on the fake_gpu another Ray task held"
    ray.get(busy)
    assert time.time() - t0 > 3 * 1.5
    deadline = time.time() + 30
    while time.time() < deadline and ray.available_resources().get("fake_gpu", 0) < 2:
        time.sleep(0.5)
    assert ray.available_resources().get("fake_gpu", 0) == 2  # every lease given back


def test_a_lease_is_released_when_the_scheduler_stops_early(tmp_path: Path, cluster) -> None:
    from ftagent.jobs.ray_slots import RaySlotPool

    session = Session.create(tmp_path / "stop", state_cls=TraceState)
    pool = RaySlotPool([Slot(index=0, gpus=["0"], gpu_indices=[0]), Slot(index=1, gpus=["1"], gpu_indices=[1])],
                       address=cluster.address, gpu_resource="fake_gpu", lease_dir=session.dir / ".slots")
    wf = RecordingWorkflow(plan={(i, "train"): "sleep:3" for i in range(4)})
    wf.serial_steps = ("propose", "feedback")  # type: ignore[attr-defined]
    timer = threading.Timer(2.5, lambda: os.kill(os.getpid(), signal.SIGINT))  # Ctrl-C
    with ctrl_c_raises():
        timer.start()
        summary = LoopEngine(wf, session, loop_n=4, pool=pool).run()
        timer.cancel()  # ended before it fired (then the assertion below says so): never a Ctrl-C to pytest
    assert summary.status == "interrupted", summary
    deadline = time.time() + 30
    while time.time() < deadline and ray.available_resources().get("fake_gpu", 0) < 2:
        time.sleep(0.5)
    assert ray.available_resources().get("fake_gpu", 0) == 2
