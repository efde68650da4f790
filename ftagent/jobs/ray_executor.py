"""The ``ray`` executor: each task of a job is a Ray task that reserves the task's GPUs.

This process is the Ray driver: it connects to an existing cluster (``ray start --head`` ...), submits
one Ray task per job task and waits for all of them. Each Ray task runs the common supervisor
(:func:`ftagent.jobs.executors.execute_task`) on whichever node holds the GPUs; the supervisor
starts ``ftagent llm_finetune``. Paths in the plan (job folder, ``LOG_PATH``, ``WORKSPACE_PATH``,
``FT_FILE_PATH``) must be on storage that every node mounts at the same path (docs/distributed.md).

* GPUs: a task with ``"gpus": "0,1"`` asks for 2 GPUs (the indices only count; Ray picks the devices
  and sets ``CUDA_VISIBLE_DEVICES`` itself). ``gpu_resource`` names another resource to reserve
  instead (tests use a custom resource standing in for GPUs). A task asking for more GPUs than the
  largest node has reserves none itself: its trainer spreads over nodes through LLaMA-Factory's Ray
  integration (:mod:`ftagent.jobs.ray_training`).
* Failures: a Ray task whose worker or node dies is retried (``max_retries``) on another node; the
  supervisor resumes the task's latest session from its last snapshot.
* Cancel: ``ftagent job cancel`` writes ``.run/<task>.cancel`` on the shared storage; a running
  supervisor stops its task, a task still waiting for resources is cancelled here with ``ray.cancel``.
"""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path
from typing import Any

from ftagent.jobs.executors import (
    CANCELLED_RC,
    TaskRunState,
    TaskState,
    _now,
    cancel_path,
    execute_task,
    exit_path,
    finish_task,
    forwarded_env,
    prepare_job_dir,
    read_state,
    request_cancel,
    write_state,
)
from ftagent.jobs.ray_training import ENV_NODE_GPUS, ENV_TASK_GPUS
from ftagent.jobs.tasks import JobPlan, TaskPlan


def task_gpus(task: TaskPlan) -> int:
    """How many GPUs a task asks for (``gpus: "0,1"`` -> 2; unset -> 0)."""
    return len(task.spec.gpus.split(",")) if task.spec.gpus else 0


def task_options(task: TaskPlan, *, node_gpus: int, gpu_resource: str = "GPU", num_cpus: float = 1,
                 max_retries: int = 3, cluster_address: str = "auto",
                 base_env: dict[str, str] | None = None) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Ray ``.options(...)`` for a task and the plan variables the supervisor must not set.

    Args:
        task: the task's plan.
        node_gpus: ``gpu_resource`` of the largest alive node.
        gpu_resource: ``GPU`` or a custom resource name standing in for GPUs.
        num_cpus: CPUs reserved for the supervisor and ``ftagent`` itself.
        max_retries: retries when the worker or node dies (not when ``ftagent`` exits non-zero).
        cluster_address: address the multi-node trainer connects to.
        base_env: variables for every task's runtime env (forwarded from the submitting shell).

    Raises:
        ValueError: when the task wants GPUs and the cluster has none.
    """
    n = task_gpus(task)
    env = dict(base_env or {})
    opts: dict[str, Any] = {"num_cpus": num_cpus, "max_retries": max_retries, "retry_exceptions": False,
                            "name": f"ftjob:{task.name}"}
    if n and node_gpus < 1:
        raise ValueError(f"task {task.name} asks for {n} {gpu_resource} but no alive node has any")
    if n and n <= node_gpus:
        if gpu_resource == "GPU":
            opts["num_gpus"] = n
        else:
            opts["resources"] = {gpu_resource: n}
    elif n:  # larger than any node: the trainer places its own Ray workers (ray_training_overrides)
        env.update({ENV_TASK_GPUS: str(n), ENV_NODE_GPUS: str(node_gpus), "RAY_ADDRESS": cluster_address})
    opts["runtime_env"] = {"env_vars": env}
    return opts, ("CUDA_VISIBLE_DEVICES",)


def _ray_entry(task_json: str, job_dir: str, workdir: str, drop_env: tuple[str, ...], poll_s: float,
               grace_s: float) -> int:
    """Body of the Ray task (runs on the chosen node)."""
    import ray

    node = f"{socket.gethostname()}/{ray.get_runtime_context().get_node_id()[:8]}"
    return execute_task(TaskPlan.model_validate_json(task_json), job_dir, executor="ray", workdir=workdir,
                        drop_env=drop_env, node=node, poll_s=poll_s, grace_s=grace_s)


def cluster_gpus(nodes: list[dict[str, Any]], gpu_resource: str) -> int:
    """``gpu_resource`` of the largest alive node (from ``ray.nodes()``)."""
    return int(max((n.get("Resources", {}).get(gpu_resource, 0) for n in nodes if n.get("Alive")), default=0))


class RayExecutor:
    """Submit each task to a Ray cluster; blocks until every task ended."""

    name = "ray"

    def __init__(self, address: str | None = "auto", *, gpu_resource: str = "GPU", num_cpus: float = 1,
                 max_retries: int = 3, workdir: Path | str | None = None, poll_s: float = 0.5,
                 grace_s: float = 20.0) -> None:
        self.address = address
        self.gpu_resource, self.num_cpus, self.max_retries = gpu_resource, num_cpus, max_retries
        self.workdir = Path(workdir or Path.cwd()).resolve()
        self.poll_s, self.grace_s = poll_s, grace_s

    def _connect(self) -> Any:
        import ray

        if not ray.is_initialized():
            ray.init(address=self.address, namespace="ftagent", log_to_driver=False,
                     logging_level=logging.WARNING, configure_logging=True)
        return ray

    def submit(self, plan: JobPlan) -> dict[Any, TaskPlan]:
        """Write the job folder and submit every task; returns ObjectRef -> task."""
        ray = self._connect()
        job_dir = prepare_job_dir(plan)
        node_gpus = cluster_gpus(ray.nodes(), self.gpu_resource)
        gcs = ray.get_runtime_context().gcs_address
        options = [task_options(t, node_gpus=node_gpus, gpu_resource=self.gpu_resource, num_cpus=self.num_cpus,
                                max_retries=self.max_retries, cluster_address=gcs, base_env=forwarded_env())
                   for t in plan.tasks]  # validate all before submitting any
        remote = ray.remote(_ray_entry)
        refs = {}
        for task, (opts, drop) in zip(plan.tasks, options, strict=True):
            write_state(job_dir, TaskRunState(name=task.name, executor=self.name,
                                              history=[f"{_now()} submitted to ray ({_resources(opts)})"]))
            ref = remote.options(**opts).remote(task.model_dump_json(), str(job_dir), str(self.workdir), drop,
                                                self.poll_s, self.grace_s)
            refs[ref] = task
        return refs

    def run(self, plan: JobPlan) -> dict[str, int]:
        """Submit all tasks and wait for them; returns task name -> exit code."""
        refs = self.submit(plan)
        job_dir = Path(plan.job_dir)
        results: dict[str, int] = {}
        try:
            self._wait(refs, job_dir, results)
        except KeyboardInterrupt:
            request_cancel(job_dir)
            self._wait(refs, job_dir, results)
        return results

    def _wait(self, refs: dict[Any, TaskPlan], job_dir: Path, results: dict[str, int]) -> None:
        import ray

        cancelled: set[Any] = set()
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1, timeout=self.poll_s)
            for ref in ready:
                task = refs.pop(ref)
                results[task.name] = self._collect(ray, ref, task, job_dir)
            for ref, task in refs.items():
                state = read_state(job_dir, task.name)
                if ref not in cancelled and cancel_path(job_dir, task.name).exists() and (
                        state is None or state.state == "pending"):
                    ray.cancel(ref)  # still waiting for resources; a running one stops itself
                    cancelled.add(ref)

    def _collect(self, ray: Any, ref: Any, task: TaskPlan, job_dir: Path) -> int:
        state: TaskState
        try:
            return int(ray.get(ref))
        except ray.exceptions.TaskCancelledError:
            rc, state, note = CANCELLED_RC, "cancelled", "cancelled while waiting for resources"
        except ray.exceptions.RayError as exc:
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            rc, state, note = 1, "failed", f"ray: {type(exc).__name__}: {first}"
        if not exit_path(job_dir, task.name).exists():
            finish_task(job_dir, task.name, self.name, rc, state, note)
        return rc


def _resources(opts: dict[str, Any]) -> str:
    parts = [f"CPU={opts.get('num_cpus')}"]
    if "num_gpus" in opts:
        parts.append(f"GPU={opts['num_gpus']}")
    parts += [f"{k}={v}" for k, v in (opts.get("resources") or {}).items()]
    return ", ".join(parts)


def wait_for_exit(job_dir: Path | str, names: list[str], timeout_s: float) -> bool:
    """Poll until every named task wrote its exit file (helper for scripts and tests)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(exit_path(job_dir, n).exists() for n in names):
            return True
        time.sleep(0.2)
    return False


__all__ = ["RayExecutor", "cluster_gpus", "task_gpus", "task_options", "wait_for_exit"]
