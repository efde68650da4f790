"""``tasks.json`` for batch jobs: the pydantic model, validation and the per-task run plan.

``job/run_ft_job.sh`` calls ``python -m ftagent.jobs.tasks plan tasks.json --job-id ID ...``; the plan
(JSON on stdout) is the single source of truth for task names, environment and command lines, and it
is saved as ``<job_dir>/job.json`` so ``ftagent job status`` and the UI know every task of a job,
including tasks that have not written anything yet.

Exit codes of the module: 0 ok, 2 invalid ``tasks.json`` (one ``error: ...`` line per problem).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ftagent.core.durations import parse_duration
from ftagent.core.errors import UserInputError, validation_lines
from ftagent.core.settings import MAX_DESCRIPTION_CHARS

DEFAULT_TIMEOUT = "12h"
JOB_FILE = "job.json"
_GPUS = re.compile(r"\d+(,\d+)*")
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class TaskSpec(BaseModel):
    """One entry of ``tasks.json``; unknown fields are errors."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    benchmark: str = Field(min_length=1)
    gpus: str | None = None
    port: int | None = Field(default=None, ge=1, le=65535)
    timeout: str = DEFAULT_TIMEOUT
    benchmark_description: str | None = Field(default=None, max_length=MAX_DESCRIPTION_CHARS)
    scenario: str | None = None
    loop_n: int | None = Field(default=None, ge=1)
    dataset: str | None = Field(default=None, min_length=1,
                                description="a dataset name, 'all', or your own data file (relative to tasks.json)")
    config: str | None = Field(default=None, min_length=1,
                               description="a run file (ftagent llm_finetune --config), relative to tasks.json")

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if isinstance(value, str):
            value = value.replace(" ", "")
            if not _GPUS.fullmatch(value):
                raise ValueError(f"'{value}' is not a comma-separated list of GPU indices like \"0,1\"")
            indices = value.split(",")
            twice = sorted({g for g in indices if indices.count(g) > 1}, key=int)
            if twice:  # CUDA_VISIBLE_DEVICES=0,0 is no two GPUs: CUDA makes every device after a repeat invisible
                raise ValueError(f"'{value}' names GPU {','.join(twice)} more than once: list each GPU once")
        return value

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, value: str) -> str:
        try:
            parse_duration(value)
        except UserInputError as exc:
            raise ValueError(str(exc)) from exc
        return value

    def gpu_set(self) -> set[int]:
        return {int(g) for g in self.gpus.split(",")} if self.gpus else set()


class TasksFile(BaseModel):
    """The whole ``tasks.json``: ``{"tasks": [...]}``."""

    model_config = ConfigDict(extra="forbid")

    tasks: list[TaskSpec] = Field(min_length=1)


class TaskPlan(BaseModel):
    """What the job script runs for one task (persisted in ``job.json``)."""

    index: int
    name: str
    spec: TaskSpec
    window: str
    log_path: str
    workspace_path: str
    log_file: str
    env: dict[str, str]
    argv: list[str]
    command: str


class JobPlan(BaseModel):
    """A whole job: where it writes and every task's plan."""

    job_id: str
    tmux_session: str
    job_dir: str
    tasks: list[TaskPlan]


def _check_benchmark(i: int, item: dict[str, Any], base_dir: Path | None) -> list[str]:
    """Validate ``item["benchmark"]`` against the benchmark registry; a benchmark file becomes absolute."""
    from ftagent.benchmarks import resolve_benchmark
    from ftagent.benchmarks.schema import is_benchmark_file

    benchmark = item.get("benchmark")
    if not isinstance(benchmark, str) or not benchmark:
        return []
    if is_benchmark_file(benchmark) and base_dir is not None and not Path(benchmark).expanduser().is_absolute():
        benchmark = item["benchmark"] = str((base_dir / benchmark).resolve())
    if not is_benchmark_file(benchmark):
        from ftagent.benchmarks import benchmark_keys
        from ftagent.core.registry import did_you_mean

        keys = benchmark_keys()
        if benchmark not in keys:
            return [f"task {i} unknown benchmark '{benchmark}'.{did_you_mean(benchmark, keys)} "
                    "See `ftagent benchmarks list`."]
    try:
        resolve_benchmark(benchmark)
    except UserInputError as exc:
        return [f"task {i} benchmark: {exc}"]
    return []


def _check_dataset(i: int, item: dict[str, Any], base_dir: Path | None) -> list[str]:
    """Validate ``item["dataset"]``: a registered name or 'all', or a data file (made absolute, checked)."""
    from ftagent.datasets.registry import resolve_dataset_choice
    from ftagent.datasets.user_file.layout import detect_layout
    from ftagent.datasets.user_file.reading import looks_like_file, read_records

    dataset = item.get("dataset")
    if not isinstance(dataset, str) or not dataset:
        return []
    try:
        if not looks_like_file(dataset):
            resolve_dataset_choice(dataset, None, [])  # a name: checked against the registry alone
            return []
        path = Path(dataset).expanduser()
        if not path.is_absolute() and base_dir is not None:
            item["dataset"] = str((base_dir / path).resolve())
            path = Path(item["dataset"])
        detect_layout(Path(path), read_records(Path(path)))  # the check llm_finetune makes, before the job starts
    except UserInputError as exc:
        return [f"task {i} dataset: {exc}"]
    return []


# a run file's keys that are fields of a task under another name (the rest keep the option's name, or are
# not task fields: those reach the task's llm_finetune through --config)
_TASK_FIELD = {"base_model": "model", "user_target_scenario": "scenario"}


def _with_run_file(item: dict[str, Any], base_dir: Path | None) -> dict[str, Any]:
    """A task with ``config``: the run file's values under the task's field names, the task's own fields on top;
    ``config`` made absolute (the task's command gets ``--config``)."""
    from ftagent.core.run_config import effective_options, load_run_file

    if not isinstance(item.get("config"), str) or not item["config"]:
        return item
    path = Path(item["config"]).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = (base_dir / path).resolve()
    from_file = {_TASK_FIELD.get(k, k): v for k, v in effective_options(load_run_file(path)).items()}
    return {**{k: v for k, v in from_file.items() if k in TaskSpec.model_fields}, **item, "config": str(path)}


def default_description(benchmark: str) -> str:
    """The registry's description of a validated benchmark key or file ('' when it has none)."""
    from ftagent.benchmarks import default_description as describe

    return describe(benchmark)


def task_descriptions(tasks: TasksFile) -> list[str]:
    """Each task's benchmark description from the registry (what start-up resolves an empty one to)."""
    return [t.benchmark_description or default_description(t.benchmark) for t in tasks.tasks]


def validate_tasks(raw: Any, base_dir: Path | None = None) -> tuple[TasksFile | None, list[str]]:
    """Validate parsed ``tasks.json`` content; returns the model (or None) and every error found.

    Benchmarks are checked against the benchmark registry (built-in keys, ``FT_BENCHMARK_PATHS``
    files, plug-ins) or are benchmark YAML files, relative paths taken from ``base_dir`` (the
    folder of tasks.json; default: the working directory).
    """
    if isinstance(raw, list):
        raw = {"tasks": raw}
    if not isinstance(raw, dict) or not isinstance(raw.get("tasks"), list) or not raw["tasks"]:
        return None, ['expected {"tasks": [ {"model": ..., "benchmark": ...}, ... ]} with at least one task']
    errors = [f"unknown top-level field '{k}' (allowed: tasks)" for k in raw if k != "tasks"]
    specs: list[tuple[int, TaskSpec]] = []
    for i, item in enumerate(raw["tasks"]):
        if not isinstance(item, dict):
            errors.append(f"task {i} must be a JSON object")
            continue
        item = dict(item)
        try:
            item = _with_run_file(item, base_dir)
        except UserInputError as exc:
            errors.append(f"task {i} config: {exc}")
            continue
        errors += _check_benchmark(i, item, base_dir)
        errors += _check_dataset(i, item, base_dir)
        try:
            specs.append((i, TaskSpec.model_validate(item)))
        except ValidationError as exc:
            errors += validation_lines(exc, f"task {i}", known=list(TaskSpec.model_fields))
    for a, (i, ta) in enumerate(specs):
        for j, tb in specs[a + 1:]:
            shared = ta.gpu_set() & tb.gpu_set()
            if shared:
                errors.append(f"task {i} and task {j} share GPU(s) {','.join(map(str, sorted(shared)))}")
    if errors:
        return None, errors
    return TasksFile(tasks=[t for _, t in specs]), []


def read_tasks_file(path: Path) -> tuple[TasksFile | None, list[str]]:
    """Read and validate a ``tasks.json`` file (benchmark and dataset files relative to its folder).

    The errors do not name the file: every caller prints each as ``error: <tasks.json>: <error>``.
    """
    path = Path(path)
    if not path.is_file():
        return None, ["no such file"]
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return None, [f"not valid JSON: {exc}"]
    return validate_tasks(raw, path.resolve().parent)


def task_names(tasks: list[TaskSpec]) -> list[str]:
    """``<benchmark>_<model basename>``, made filesystem-safe and unique (``_2``, ``_3`` ...)."""
    names: list[str] = []
    for t in tasks:
        bench = Path(t.benchmark).stem if t.benchmark.lower().endswith((".yaml", ".yml")) else t.benchmark
        base = _SAFE.sub("-", f"{bench}_{t.model.rstrip('/').split('/')[-1]}").strip("-.")
        name, k = base, 2
        while name in names:
            name, k = f"{base}_{k}", k + 1
        names.append(name)
    return names


def build_plan(tasks: TasksFile, *, job_id: str, log_base: Path, workspace_base: Path,
               ftagent_bin: str, descriptions: list[str]) -> JobPlan:
    """Turn validated tasks into the concrete per-task environment and command line.

    ``descriptions``: each task's benchmark description as ``ftagent job``'s start-up resolved it
    (:func:`ftagent.finetune.start.resolve_tasks`), or :func:`task_descriptions` for a caller without
    a start-up (``python -m ftagent.jobs.tasks plan``).
    """
    job_dir = Path(log_base).resolve() / job_id
    plans = []
    for i, (name, t) in enumerate(zip(task_names(tasks.tasks), tasks.tasks, strict=True)):
        log_path = job_dir / name
        env = {"LOG_PATH": f"{log_path}/", "WORKSPACE_PATH": str(Path(workspace_base).resolve() / job_id / name)}
        if t.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = t.gpus
        if t.port is not None:
            env["OPENAI_API_BASE"] = f"http://localhost:{t.port}"
        description = t.benchmark_description or descriptions[i]
        argv = [ftagent_bin, "llm_finetune", "--benchmark", t.benchmark, "--base-model", t.model,
                "--timeout", t.timeout]
        if description:
            argv += ["--benchmark-description", description]
        if t.scenario:
            argv += ["--user-target-scenario", t.scenario]
        if t.loop_n is not None:
            argv += ["--loop-n", str(t.loop_n)]
        if t.dataset:
            argv += ["--dataset", t.dataset]
        if t.config:  # the options a task has no field for (upper_data_size_limit, ...); the flags above win
            argv += ["--config", t.config]
        plans.append(TaskPlan(index=i, name=name, spec=t, window=name, log_path=env["LOG_PATH"],
                              workspace_path=env["WORKSPACE_PATH"], log_file=str(job_dir / f"{name}.log"),
                              env=env, argv=argv, command=shlex.join(argv)))
    session = "ftjob-" + _SAFE.sub("-", job_id).replace(".", "-")
    return JobPlan(job_id=job_id, tmux_session=session, job_dir=str(job_dir), tasks=plans)


def load_job_plan(job_dir: Path) -> JobPlan | None:
    """The ``job.json`` of a job directory, or None when absent or unreadable."""
    path = Path(job_dir) / JOB_FILE
    try:
        return JobPlan.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValidationError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    """``python -m ftagent.jobs.tasks {validate,plan} tasks.json [...]``."""
    parser = argparse.ArgumentParser(prog="python -m ftagent.jobs.tasks")
    parser.add_argument("action", choices=["validate", "plan"])
    parser.add_argument("tasks_file", type=Path)
    parser.add_argument("--job-id", default="job")
    parser.add_argument("--log-base", type=Path, default=Path("log"))
    parser.add_argument("--workspace-base", type=Path, default=Path("git_ignore_folder/workspace"))
    parser.add_argument("--ftagent-bin", default="ftagent")
    args = parser.parse_args(argv)
    tasks, errors = read_tasks_file(args.tasks_file)
    if tasks is None:
        for err in errors:
            print(f"error: {args.tasks_file}: {err}", file=sys.stderr)
        return 2
    if args.action == "validate":
        print(f"{args.tasks_file}: {len(tasks.tasks)} task(s) OK")
        return 0
    plan = build_plan(tasks, job_id=args.job_id, log_base=args.log_base,
                      workspace_base=args.workspace_base, ftagent_bin=args.ftagent_bin,
                      descriptions=task_descriptions(tasks))
    print(plan.model_dump_json(indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
