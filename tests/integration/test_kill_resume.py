"""Kill ``ftagent llm_finetune`` for real, then resume it (issue #22).

The real CLI runs in a subprocess (tiny model ``builtin/tiny-qwen2``, ``demo_add``, the heuristic planner,
``--loop-n 1``, 10 benchmark items, 200 training rows). One chain per test:

1. a fresh run is killed during ``train`` (SIGKILL, or SIGTERM as ``ftagent job cancel`` sends it);
2. ``--path <session>`` resumes it in place and is killed during ``evaluate`` by the other signal;
3. a last resume (``--no-checkout``, or in place) runs to the end.

After every kill: within 5 s no process of the session is left (every descendant seen while it ran, and
anything running in its folders); a SIGTERM also writes the ``session_end`` event (``interrupted``). The
end scores (validation and test, with their metrics), the model's answers on the wrongly answered items
and the training loss curve equal those of one
uninterrupted run of the same command (the module's ``reference``, same seed).

Cost: the heuristic planner's probe run is 300 steps; the tests set it to ``PROBE_STEPS`` through a
two-line wrapper around the CLI entry point (``ftagent.cli.main.main``), the same for every run here,
so that a chain stays a few minutes on two loaded cores.

The Docker variant (``FT_ENV_TYPE=docker``) runs when an engine answers and the tool image is built; it
skips with the reason otherwise (it never builds the image).
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
PROBE_STEPS = 60
WRAPPER = ("import sys, ftagent.planners.heuristic.policy as p; p.PROBE_STEPS = int(sys.argv.pop(1)); "
           "sys.argv[0] = 'ftagent'; from ftagent.cli.main import main; main()")
COMMAND = ["llm_finetune", "--benchmark", "demo_add", "--base-model", "builtin/tiny-qwen2", "--loop-n", "1",
           "--quiet"]
GONE_WITHIN_S = 20.0  # a loaded 2-core machine: psutil's tree walk and torch's exit; an escaped tool lives minutes
RUN_TIMEOUT_S = 1200


def _env(root: Path, tools_env: Path, env_type: str = "local") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("CHAT_MODEL", "OPENAI_API_KEY", "OPENAI_API_BASE", "CHAT_STREAM")}
    env.update(FT_FILE_PATH=str(root / "files"), LOG_PATH=str(root / "log"), WORKSPACE_PATH=str(root / "ws"),
               FT_TOOLS_ENV=str(tools_env), FT_ENV_TYPE=env_type, FT_PLANNER="heuristic",
               FT_BENCHMARK_LIMIT="10", FT_UPPER_DATA_SIZE_LIMIT="200", PYTHONUNBUFFERED="1")
    return env


def _start(root: Path, env: dict[str, str], *args: str) -> subprocess.Popen:
    n = len(list(root.glob("out-*.txt")))
    out = open(root / f"out-{n}.txt", "w", encoding="utf-8")  # noqa: SIM115 - the child writes it
    # its own session: the test's process group never gets the signals meant for ftagent
    return subprocess.Popen([sys.executable, "-c", WRAPPER, str(PROBE_STEPS), *args], cwd=root, env=env,
                            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def _output(root: Path) -> str:
    return "\n".join(p.read_text(encoding="utf-8", errors="replace")[-3000:] for p in sorted(root.glob("out-*.txt")))


def _sessions(root: Path) -> list[Path]:
    log = root / "log"
    return sorted(p for p in log.iterdir() if p.is_dir()) if log.is_dir() else []


def _events_since_start(session: Path) -> list:
    events = list(read_events(session / "events.jsonl"))
    starts = [i for i, e in enumerate(events) if e.type == "session_start"]
    return events[starts[-1]:] if starts else []


def _results(session: Path) -> dict:
    """What an identical run must reproduce: the loop's scores and metrics, and its training loss curve."""
    events = list(read_events(session / "events.jsonl"))
    scores = {e.split: (e.score, e.metrics) for e in events if e.type == "benchmark_result" and not e.baseline}
    outputs = {e.split: [s.get("model_output") for s in e.error_samples]  # the model's answers, item by item
               for e in events if e.type == "benchmark_result" and not e.baseline}
    losses = [[(h.get("step"), h.get("loss")) for h in e.loss_history] for e in events if e.type == "training"]
    end = [e.status for e in events if e.type == "session_end"]
    return {"scores": scores, "outputs": outputs, "final_loss_curve": losses[-1] if losses else None,
            "end": end[-1] if end else None}


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _running(procs: list[psutil.Process]) -> list[str]:
    alive = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{proc.pid} {' '.join(proc.cmdline())[:120]}")
        except psutil.Error:
            continue
    return alive


def _in_folders(root: Path) -> list[psutil.Process]:
    """Processes whose working directory or command line is inside this test's folders."""
    mine = []
    for proc in psutil.process_iter(["cwd", "cmdline"]):
        try:
            text = f"{proc.info['cwd'] or ''} {' '.join(proc.info['cmdline'] or [])}"
        except psutil.Error:
            continue
        if str(root) in text and proc.pid != os.getpid():
            mine.append(proc)
    return mine


def _wait_for_phase(proc: subprocess.Popen, root: Path, step: str, marker: str, seen: dict[int, psutil.Process],
                    timeout: float = RUN_TIMEOUT_S) -> None:
    """Return once ``step`` runs and a tool process whose command line has ``marker`` is working."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"ftagent ended (rc {proc.returncode}) before {step}:\n{_output(root)}"
        for child in _descendants(proc.pid):
            seen.setdefault(child.pid, child)
        sessions = _sessions(root)
        events = _events_since_start(sessions[-1]) if sessions else []
        in_step = bool(events) and [e.step for e in events if e.type == "step_start"][-1:] == [step]
        working = any(marker in " ".join(_safe_cmdline(c)) for c in _descendants(proc.pid))
        if step == "train":  # training has really begun (LLaMA-Factory logs steps), not just started
            working = working and any(e.type == "progress" and e.phase == "train" and (e.done or 0) >= 10
                                      for e in events)
        if in_step and working:
            for child in _descendants(proc.pid):
                seen.setdefault(child.pid, child)
            return
        time.sleep(0.2)
    raise AssertionError(f"never reached {step} with a running {marker!r}:\n{_output(root)}")


def _safe_cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


def _kill_and_check(proc: subprocess.Popen, root: Path, sig: signal.Signals, step: str, marker: str) -> Path:
    """Signal ftagent during ``step``; assert nothing of the session is left within 5 s; return the session."""
    seen: dict[int, psutil.Process] = {}
    _wait_for_phase(proc, root, step, marker, seen)
    tools = list(seen.values())
    assert len(tools) >= 2, f"expected a tool process tree under ftagent, saw {_running(tools)}"
    session = _sessions(root)[-1]
    proc.send_signal(sig)
    t0 = time.monotonic()
    while time.monotonic() - t0 < GONE_WITHIN_S and (_running(tools) or _running(_in_folders(root))):
        time.sleep(0.1)
    left = _running(tools) + _running(_in_folders(root))
    if sig == signal.SIGTERM:  # ftagent itself ends the run and writes the report: it may take longer
        left = [p for p in left if not p.startswith(f"{proc.pid} ")]
    assert not left, f"left {GONE_WITHIN_S}s after {sig.name} during {step}: {left}"
    print(f"{sig.name} during {step}: every tool process gone after {time.monotonic() - t0:.2f}s")
    proc.wait(timeout=120)
    if sig == signal.SIGTERM:
        end = [e for e in _events_since_start(session) if e.type == "session_end"]
        assert end and end[-1].status == "interrupted", f"no session_end after SIGTERM:\n{_output(root)}"
        assert not _running(_in_folders(root))
    return session


def _finish(root: Path, env: dict[str, str], *args: str) -> Path:
    proc = _start(root, env, *args)
    assert proc.wait(timeout=RUN_TIMEOUT_S) == 0, _output(root)
    return _sessions(root)[-1] if "--no-checkout" in args else Path(args[args.index("--path") + 1])


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tools_env) -> dict:
    """One uninterrupted run of the same command (shared by the tests)."""
    root = tmp_path_factory.mktemp("reference")
    t0 = time.monotonic()
    proc = _start(root, _env(root, tools_env), *COMMAND)
    assert proc.wait(timeout=RUN_TIMEOUT_S) == 0, _output(root)
    (session,) = _sessions(root)
    results = _results(session)
    assert results["end"] == "completed" and set(results["scores"]) == {"validation", "test"}, results
    print(f"reference run {time.monotonic() - t0:.0f}s: {json.dumps(results['scores'])}")
    return results


CHAINS = {
    "sigkill-train_sigterm-evaluate_no-checkout": (signal.SIGKILL, signal.SIGTERM, True),
    "sigterm-train_sigkill-evaluate_in-place": (signal.SIGTERM, signal.SIGKILL, False),
}


@pytest.mark.parametrize("first,second,fork", list(CHAINS.values()), ids=list(CHAINS))
def test_killed_runs_leave_nothing_and_resume_to_the_same_scores(tmp_path, tools_env, reference, first, second,
                                                                 fork):
    env = _env(tmp_path, tools_env)
    t0 = time.monotonic()
    session = _kill_and_check(_start(tmp_path, env, *COMMAND), tmp_path, first, "train", "llamafactory-cli")
    again = _start(tmp_path, env, "llm_finetune", "--path", str(session), "--quiet")
    assert _kill_and_check(again, tmp_path, second, "evaluate", "opencompass") == session
    last = _finish(tmp_path, env, "llm_finetune", "--path", str(session), "--quiet",
                   *(["--no-checkout"] if fork else []))
    assert (last != session) == fork
    results = _results(last)
    assert results["end"] == "completed", _output(tmp_path)
    assert results["scores"] == reference["scores"]
    assert results["outputs"] == reference["outputs"]
    assert results["final_loss_curve"] == reference["final_loss_curve"]
    registry = tmp_path / "files" / "run" / "children"
    assert not list(registry.glob("*.json")), "every record of a killed run is cleaned up by the resume"
    print(f"chain {first.name}/{second.name} fork={fork}: {time.monotonic() - t0:.0f}s, "
          f"scores {json.dumps(results['scores'])}")


def _docker_ready(tools_env: Path) -> str:
    """The reason the Docker variant cannot run here, or '' when it can."""
    try:
        from ftagent.core.settings import load_settings
        from ftagent.runners.docker import connect
        from ftagent.runners.images import image_exists, spec_from_settings

        client = connect()
        spec = spec_from_settings(load_settings(), flavour="cpu", client=client)
    except Exception as exc:  # noqa: BLE001 - any failure here means: no usable engine
        return f"no Docker engine: {exc}"
    if not image_exists(client, spec.tag):
        return f"the tool image {spec.tag} is not built (`ftagent env build-images`); not building it here"
    return ""


def test_docker_sigkill_during_train_leaves_no_container(tmp_path, tools_env):
    reason = _docker_ready(tools_env)
    if reason:
        pytest.skip(reason)
    import docker

    client = docker.from_env()
    env = _env(tmp_path, tools_env, env_type="docker")
    proc = _start(tmp_path, env, *COMMAND)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, _output(tmp_path)
        events = _events_since_start(_sessions(tmp_path)[-1]) if _sessions(tmp_path) else []
        if any(e.type == "progress" and e.phase == "train" and (e.done or 0) >= 10 for e in events):
            break
        time.sleep(0.5)
    running = _owned_by(client, proc.pid)
    assert running, f"no container of ftagent {proc.pid} while it trains"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    t0 = time.monotonic()
    while time.monotonic() - t0 < GONE_WITHIN_S:
        left = _owned_by(client, proc.pid, all_states=True)
        if not left:
            break
        time.sleep(0.2)
    assert not left, f"containers left {GONE_WITHIN_S}s after SIGKILL: {[c.id[:12] for c in left]}"


DOCKER_STAND_IN = """
import sys
from pathlib import Path
from ftagent.runners import reaper
from ftagent.runners.docker import DockerRunner
reaper.activate(Path(sys.argv[2]), "sess-docker")
DockerRunner(image=sys.argv[1], use_gpu=False, network="none").run(["sleep", "300"], tool="data",
                                                                  workdir=Path(sys.argv[3]))
"""


def _owned_by(client, pid: int, all_states: bool = False) -> list:
    # sparse: no per-container inspect, which races with the removal this test waits for
    return [c for c in client.containers.list(all=all_states, sparse=True, filters={"label": "org.ftagent.owner"})
            if f":{pid}:" in (c.attrs.get("Labels") or {}).get("org.ftagent.owner", "")]


def test_docker_runner_containers_die_with_ftagent(tmp_path):
    """The runner's own guarantee, with any small local image: SIGKILL the process that started a container."""
    try:
        import docker

        client = docker.from_env()
        client.ping()
    except Exception as exc:  # noqa: BLE001 - no engine
        pytest.skip(f"no Docker engine: {exc}")
    images = [t for i in client.images.list() for t in i.tags if t.startswith(("ftagent-base:", "ftagent-tools:"))]
    if not images:
        pytest.skip("no ftagent image on this engine (`ftagent env build-images`); not building one here")
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-c", DOCKER_STAND_IN, images[0], str(tmp_path / "registry"),
                             str(tmp_path / "wd")], env={**os.environ, "PYTHONPATH": str(repo)},
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _owned_by(client, proc.pid):
            assert proc.poll() is None, "the stand-in ended before its container ran"
            time.sleep(0.2)
        (container,) = _owned_by(client, proc.pid)
        assert container.attrs["Labels"]["org.ftagent.session"] == "sess-docker"
        assert list((tmp_path / "registry").glob("*.json")), "the container is recorded while it runs"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        t0 = time.monotonic()
        while time.monotonic() - t0 < GONE_WITHIN_S and _owned_by(client, proc.pid, all_states=True):
            time.sleep(0.1)
        assert not _owned_by(client, proc.pid, all_states=True), f"container left {GONE_WITHIN_S}s after SIGKILL"
        print(f"container gone {time.monotonic() - t0:.2f}s after SIGKILL")
        from ftagent.runners import reaper

        assert reaper.reap_leftovers(tmp_path / "registry", docker_client=client).empty  # nothing left to end
        assert not list((tmp_path / "registry").glob("*.json"))
    finally:
        for c in _owned_by(client, proc.pid, all_states=True):
            c.remove(force=True)
