"""A job plan for people (``ftagent job run --dry-run``) and the warnings a plan deserves on this machine.

``--json`` keeps the machine form (``job/run_ft_job.sh`` reads it with jq); people get one block per task.
"""

from __future__ import annotations

from ftagent.jobs.tasks import JobPlan


def describe_plan(plan: JobPlan, executor: str) -> list[str]:
    """The plan as lines: the job, then per task its log, workspace, environment and command."""
    lines = [f"job:        {plan.job_id}", f"job dir:    {plan.job_dir}", f"executor:   {executor}",
             f"tasks:      {len(plan.tasks)}"]
    for task in plan.tasks:
        lines += ["", f"== task {task.index}: {task.name} ==", f"log:        {task.log_file}",
                  f"workspace:  {task.workspace_path}", "env:"]
        lines += [f"  {key}={value}" for key, value in task.env.items()]
        lines.append(f"command:    {task.command}")
    return lines


def gpu_warnings(plan: JobPlan, gpu_count: int, why_none: str = "") -> list[str]:
    """One line per task whose ``gpus`` this machine cannot give (local executor: the GPUs are here).

    ``CUDA_VISIBLE_DEVICES`` naming GPUs that do not exist hides them all: such a task trains on the CPU
    (or fails its GPU checks), which the user should hear before the job starts, not hours later.
    """
    out = []
    for task in plan.tasks:
        wanted = sorted(task.spec.gpu_set())
        missing = [g for g in wanted if g >= gpu_count]
        if not missing:
            continue
        have = "no GPU" + (f" ({why_none})" if why_none else "") if gpu_count == 0 else \
            f"{gpu_count} GPU(s) (indices 0-{gpu_count - 1})"
        out.append(f"task {task.index} ({task.name}) asks for GPU(s) {task.spec.gpus} but this machine has {have}: "
                   f"GPU {', '.join(map(str, missing))} cannot be given, so CUDA_VISIBLE_DEVICES={task.spec.gpus} "
                   "leaves the task without "
                   + ("any GPU (it trains on the CPU)" if len(missing) == len(wanted) else "those GPUs"))
    return out
