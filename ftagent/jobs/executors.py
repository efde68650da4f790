"""Run the tasks of a job plan: the :class:`Executor` protocol, the per-task supervisor, ``local``.

Every executor runs the same supervisor, :func:`execute_task`, once per task attempt: it starts
``ftagent llm_finetune`` (the plan's command line) as a child process, appends its output to
``<job dir>/<task>.log``, polls for a cancel request, and writes the task's files under
``<job dir>/.run/``:

* ``<task>.state.json``  :class:`TaskRunState` (state, attempts, node, pid), updated at each change;
* ``<task>.exit``        the exit code once the task ended (read by ``ftagent job status`` and the UI);
* ``<task>.cancel``      written by ``ftagent job cancel``; the supervisor then stops the task.

An attempt that finds a session with snapshots under the task's ``LOG_PATH`` (left by an attempt
that died with its node) resumes it with ``ftagent llm_finetune --path <session dir>`` instead of
starting from scratch. ``local`` runs every task's supervisor in a thread of this process;
``ray`` (:mod:`ftagent.jobs.ray_executor`) runs it as a Ray task on the node holding the GPUs.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, Field

from ftagent.jobs.tasks import JOB_FILE, JobPlan, TaskPlan

RUN_DIR = ".run"
CANCELLED_RC = 130
TaskState = Literal["pending", "running", "finished", "failed", "cancelled"]
_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
_FORWARD_PREFIXES = ("FT_", "HF_", "TRANSFORMERS_", "LITELLM_", "CHAT_MODEL", "OPENAI_API_BASE", "OMP_NUM_THREADS")


class TaskRunState(BaseModel):
    """What the executor knows about one task (``.run/<task>.state.json``)."""

    name: str
    executor: str
    state: TaskState = "pending"
    attempts: int = 0
    node: str | None = None
    pid: int | None = None
    exit_code: int | None = None
    resumed_from: str | None = None
    history: list[str] = Field(default_factory=list)  # one line per attempt / state change


class Executor(Protocol):
    """Runs every task of a plan to completion; returns task name -> exit code."""

    name: str

    def run(self, plan: JobPlan) -> dict[str, int]:
        """Run all tasks (blocking) and return their exit codes."""
        ...


def _now() -> str:
    return datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")


def run_dir(job_dir: Path | str) -> Path:
    """``<job dir>/.run``."""
    return Path(job_dir) / RUN_DIR


def state_path(job_dir: Path | str, name: str) -> Path:
    return run_dir(job_dir) / f"{name}.state.json"


def cancel_path(job_dir: Path | str, name: str) -> Path:
    return run_dir(job_dir) / f"{name}.cancel"


def exit_path(job_dir: Path | str, name: str) -> Path:
    return run_dir(job_dir) / f"{name}.exit"


def read_state(job_dir: Path | str, name: str) -> TaskRunState | None:
    """The task's run state, or None when it has none yet (or it is unreadable)."""
    try:
        return TaskRunState.model_validate_json(state_path(job_dir, name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write_state(job_dir: Path | str, state: TaskRunState) -> None:
    """Write the task's run state atomically."""
    path = state_path(job_dir, state.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(state.model_dump_json(indent=1), encoding="utf-8")
    os.replace(tmp, path)


def finish_task(job_dir: Path | str, name: str, executor: str, rc: int, state: TaskState, note: str) -> None:
    """Record a final exit code and state (also used by executors for tasks that never started)."""
    st = read_state(job_dir, name) or TaskRunState(name=name, executor=executor)
    st.state, st.exit_code, st.pid = state, rc, None
    st.history.append(f"{_now()} {note}")
    write_state(job_dir, st)
    # the exit file is the completion marker that readers poll for: written whole or not at all
    path = exit_path(job_dir, name)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(f"{rc}\n", encoding="utf-8")
    os.replace(tmp, path)


def request_cancel(job_dir: Path | str, names: list[str] | None = None) -> list[str]:
    """Ask the running supervisors to stop tasks (all unfinished ones when ``names`` is None).

    Returns the names a cancel request was written for (tasks already ended are skipped).
    """
    plan = load_plan(job_dir)
    targets = names if names is not None else [t.name for t in plan.tasks]
    known = {t.name for t in plan.tasks}
    unknown = [n for n in targets if n not in known]
    if unknown:
        raise ValueError(f"unknown task(s) {', '.join(unknown)}; tasks of this job: {', '.join(sorted(known))}")
    done = []
    for name in targets:
        if exit_path(job_dir, name).exists():
            continue
        cancel_path(job_dir, name).write_text(_now() + "\n", encoding="utf-8")
        done.append(name)
    return done


def load_plan(job_dir: Path | str) -> JobPlan:
    """The job's ``job.json``; raises FileNotFoundError with a clear message when missing."""
    path = Path(job_dir) / JOB_FILE
    return JobPlan.model_validate_json(path.read_text(encoding="utf-8"))


def forwarded_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's ftagent-related variables (as ``run_ft_job.sh`` forwards them), never secrets."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items()
            if k.startswith(_FORWARD_PREFIXES) and not any(m in k for m in _SECRET_MARKERS)}


def latest_session(log_path: Path | str) -> Path | None:
    """The most recent session folder under a task's ``LOG_PATH`` that has at least one snapshot."""
    from ftagent.engine.session import list_snapshots

    root = Path(log_path)
    if not root.is_dir():
        return None
    candidates = [d for d in root.iterdir() if d.is_dir() and list_snapshots(d)]
    return max(candidates, key=lambda d: max(s.stat().st_mtime for s in list_snapshots(d)), default=None)


def task_argv(task: TaskPlan) -> tuple[list[str], str | None]:
    """The command of this attempt: resume the latest session when there is one, else the plan's."""
    session = latest_session(task.log_path)
    if session is None:
        return list(task.argv), None
    return [task.argv[0], "llm_finetune", "--path", str(session)], str(session)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: SIGKILL the child when the supervisor dies (a node failure takes the task with it)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _stop(proc: subprocess.Popen, grace_s: float) -> None:
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def execute_task(task: TaskPlan, job_dir: Path | str, *, executor: str, workdir: Path | str | None = None,
                 extra_env: Mapping[str, str] | None = None, drop_env: tuple[str, ...] = (),
                 node: str | None = None, poll_s: float = 0.5, grace_s: float = 20.0,
                 on_start: Callable[[int], None] | None = None) -> int:
    """Run one attempt of a task to its end; returns its exit code (``CANCELLED_RC`` when cancelled).

    Args:
        task: the task's plan (command line, ``LOG_PATH``, ``WORKSPACE_PATH``, environment).
        job_dir: the job folder (on storage every node sees).
        executor: ``local`` or ``ray`` (recorded in the state file).
        workdir: working directory of ``ftagent`` (its ``./.env`` is read there); default: job_dir.
        extra_env: variables set before the plan's own (e.g. forwarded from the submitting shell).
        drop_env: plan variables not to set (e.g. ``CUDA_VISIBLE_DEVICES`` when Ray assigns GPUs).
        node: where this attempt runs (default: the host name).
        poll_s: how often the cancel marker is checked.
        grace_s: seconds between SIGTERM and SIGKILL on cancel.
        on_start: called with the child's pid once it started.
    """
    job_dir = Path(job_dir)
    name = task.name
    st = read_state(job_dir, name) or TaskRunState(name=name, executor=executor)
    if cancel_path(job_dir, name).exists():
        finish_task(job_dir, name, executor, CANCELLED_RC, "cancelled", "cancelled before start")
        return CANCELLED_RC
    argv, resumed = task_argv(task)
    st.attempts += 1
    st.state, st.node, st.resumed_from, st.exit_code = "running", node or socket.gethostname(), resumed, None
    for folder in (task.log_path, task.workspace_path):
        Path(folder).mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **(extra_env or {}),
           **{k: v for k, v in task.env.items() if k not in drop_env}}
    cwd = Path(workdir) if workdir and Path(workdir).is_dir() else job_dir
    with open(task.log_file, "a", encoding="utf-8") as log:
        how = f"resuming {resumed}" if resumed else "starting"
        log.write(f"[job {executor}] task {name} attempt {st.attempts} on {st.node}: {how} {_now()}\n")
        if workdir and cwd != Path(workdir):
            log.write(f"[job {executor}] warning: working directory {workdir} missing on this node; using {cwd}\n")
        log.flush()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
        st.pid = proc.pid
        st.history.append(f"{_now()} attempt {st.attempts} on {st.node} pid {proc.pid}: {how}")
        write_state(job_dir, st)
        if on_start:
            on_start(proc.pid)
        cancelled = False
        try:
            while proc.poll() is None:
                if cancel_path(job_dir, name).exists():
                    cancelled = True
                    _stop(proc, grace_s)
                    break
                time.sleep(poll_s)
        finally:
            if proc.poll() is None:  # interrupted (Ray cancel, KeyboardInterrupt): never leave it behind
                _stop(proc, grace_s)
        rc = CANCELLED_RC if cancelled else _shell_rc(proc.returncode)
        log.write(f"[job {executor}] task {name} {'cancelled' if cancelled else 'finished'} "
                  f"with exit code {rc} {_now()}\n")
    state: TaskState = "cancelled" if cancelled else ("finished" if rc == 0 else "failed")
    finish_task(job_dir, name, executor, rc, state, f"attempt {st.attempts} {state} (exit {rc})")
    return rc


def _shell_rc(returncode: int | None) -> int:
    """``-N`` (killed by signal N) -> ``128 + N``, as a shell reports it."""
    if returncode is None:
        return 1
    return 128 - returncode if returncode < 0 else returncode


def prepare_job_dir(plan: JobPlan) -> Path:
    """Create the job folder, write ``job.json`` and a pending state per task."""
    job_dir = Path(plan.job_dir)
    run_dir(job_dir).mkdir(parents=True, exist_ok=True)
    (job_dir / JOB_FILE).write_text(plan.model_dump_json(indent=1), encoding="utf-8")
    return job_dir


class LocalExecutor:
    """All tasks at once on this machine, each supervised by a thread (the tmux runner, from Python)."""

    name = "local"

    def __init__(self, *, workdir: Path | str | None = None, poll_s: float = 0.5, grace_s: float = 20.0) -> None:
        self.workdir = Path(workdir or Path.cwd()).resolve()
        self.poll_s, self.grace_s = poll_s, grace_s

    def run(self, plan: JobPlan) -> dict[str, int]:
        """Start every task, wait for all of them; returns task name -> exit code."""
        job_dir = prepare_job_dir(plan)
        for task in plan.tasks:
            write_state(job_dir, TaskRunState(name=task.name, executor=self.name, history=[f"{_now()} queued"]))
        results: dict[str, int] = {}

        def _one(task: TaskPlan) -> None:
            try:
                results[task.name] = execute_task(task, job_dir, executor=self.name, workdir=self.workdir,
                                                  poll_s=self.poll_s, grace_s=self.grace_s)
            except Exception as exc:  # noqa: BLE001 - recorded, never lost in a thread
                finish_task(job_dir, task.name, self.name, 1, "failed", f"supervisor error: {exc!r}")
                results[task.name] = 1

        threads = [threading.Thread(target=_one, args=(t,), name=f"ftjob-{t.name}", daemon=True)
                   for t in plan.tasks]
        for th in threads:
            th.start()
        try:
            for th in threads:
                while th.is_alive():
                    th.join(timeout=0.5)
        except KeyboardInterrupt:
            request_cancel(job_dir)
            for th in threads:
                th.join()
        return results
