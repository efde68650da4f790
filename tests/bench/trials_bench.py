"""K trials at once (issue 41), measured side by side in one run (``make bench``, section ``trials``).

* **CPU, real sessions** — ``ftagent llm_finetune`` on ``demo_add`` (``FT_BENCHMARK_LIMIT=20``, tiny-qwen2, the
  offline planner) with ``FT_PARALLEL_TRIALS=1`` and ``=2`` on this machine, every trial single-threaded
  (``OMP_NUM_THREADS=1``: the local runner's CPU default, and one core per slot). So that both sides run the same
  work, every trial trains the first recipe for the same number of steps (the bench narrows the offline
  policy to it; the parallel side's variants change only the learning rate). Reported: trials per hour
  (trials ÷ the trials' wall time, from the first trial step to the last step end) with 2 slots ÷ 1 slot
  (goal ≥ 1.6), the scheduler's overhead per trial — a trial's wall time outside its steps plus the time its
  slot waited between trials, ÷ the mean trial (goal ≤ 5 %) — and the busy fraction of the 2-slot run
  (``views.trials.busy_fraction``, goal ≥ 0.85).
* **Evaluation waves** — the ``vllm-server`` backend through the CPU stand-in of vLLM with two replicas
  (``--data-parallel-size 2``): a split in waves of 16 (models.yaml's batch) vs in one wave
  (``serving.server_spec``): inference time and the replicas' busy fraction.
* **Fake GPUs** — the same scheduler (``ftagent.engine.parallel``) with 4 slots of one fake GPU each and a
  workflow whose steps sleep (a trial: 3 s of "training and evaluation"), trials per hour with 4 slots ÷ 1
  (goal ≥ 3.5) and its overhead.

The machine is shared: the load average is printed with every section; numbers from a loaded machine are
slower and noisier (the CPU ratio most: two trials at once need two idle cores).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.bench.common import BenchResults, load_average

SECTION = "trials"
WRAPPER = (
    "import sys, ftagent.planners.heuristic.planner as p, ftagent.planners.heuristic.policy as q, "
    "ftagent.planners.heuristic.spread as s; q.PROBE_STEPS = int(sys.argv.pop(1)); "
    "s.VARIANTS = (('learning_rate', 0.5), ('learning_rate', 2.0), ('learning_rate', 0.25), ('learning_rate', 4.0)); "
    "p.next_recipe = lambda parent, sota, last, scen: (q.base_recipe(scen), 'bench: the first recipe again', "
    "'bench: every trial trains the same steps'); "
    "sys.argv[0] = 'ftagent'; from ftagent.cli.main import main; main()")


def trial_stats(session_dir: Path) -> dict[str, Any]:
    """Trials per hour, overhead per trial and busy fraction of a session, from its events."""
    from ftagent.engine.events import read_events
    from ftagent.views.session import load_session
    from ftagent.views.trials import busy_fraction

    view = load_session(session_dir)
    busy = busy_fraction(view)
    events = list(read_events(session_dir / "events.jsonl"))
    start: dict[int, float] = {}
    end: dict[int, float] = {}
    steps: dict[int, float] = {}
    slot_of: dict[int, int] = {}
    for ev in events:
        if ev.loop is None:
            continue
        if ev.type == "trial_start":
            start.setdefault(ev.loop, ev.ts)
            slot_of[ev.loop] = ev.slot if ev.slot is not None else 0
        elif ev.type == "step_start":
            start.setdefault(ev.loop, ev.ts)
        elif ev.type == "step_end":
            steps[ev.loop] = steps.get(ev.loop, 0.0) + ev.duration_s
        elif ev.type == "loop_end":
            end[ev.loop] = ev.ts
    done = sorted(i for i in end if i in start)
    walls = [end[i] - start[i] for i in done]
    inside = [end[i] - start[i] - steps.get(i, 0.0) for i in done]
    idle = []  # a slot's wait between one trial's end and the next trial's start on it
    by_slot: dict[int, list[int]] = {}
    for i in done:
        by_slot.setdefault(slot_of.get(i, 0), []).append(i)
    for loops in by_slot.values():
        loops.sort(key=lambda i: start[i])
        idle += [max(0.0, start[b] - end[a]) for a, b in zip(loops, loops[1:], strict=False)]
    mean = statistics.mean(walls) if walls else None
    overhead = (sum(inside) + sum(idle)) / len(done) if done else None
    return {"trials": len(done), "wall_s": busy.wall_s, "per_hour": 3600 * len(done) / busy.wall_s if busy.wall_s else None,
            "mean_trial_s": mean, "overhead_s": overhead, "busy": busy.fraction}


def run_session(work: Path, tools_env: Path, k: int, loops: int, probe_steps: int) -> Path:
    """One real session with ``k`` slots; returns its folder."""
    root = work / f"slots{k}"
    root.mkdir(parents=True, exist_ok=True)
    env = {key: v for key, v in os.environ.items() if key not in ("CHAT_MODEL", "OPENAI_API_KEY", "OPENAI_API_BASE")}
    env.update(FT_FILE_PATH=str(work / "files"), LOG_PATH=str(root / "log"), WORKSPACE_PATH=str(root / "ws"),
               FT_TOOLS_ENV=str(tools_env), FT_ENV_TYPE="local", FT_PLANNER="heuristic", FT_BENCHMARK_LIMIT="20",
               FT_UPPER_DATA_SIZE_LIMIT="200", FT_FINAL_EVAL="none", FT_PARALLEL_TRIALS=str(k), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-c", WRAPPER, str(probe_steps), "llm_finetune", "--benchmark", "demo_add",
           "--base-model", "builtin/tiny-qwen2", "--loop-n", str(loops), "--quiet"]
    with open(root / "out.txt", "w", encoding="utf-8") as out:
        rc = subprocess.run(cmd, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
    sessions = sorted(p for p in (root / "log").iterdir() if p.is_dir())
    if rc not in (0, 3) or not sessions:  # 3: no progress (every trial scored 0): the timings still count
        raise RuntimeError(f"the {k}-slot session failed (exit {rc}): {(root / 'out.txt').read_text()[-2000:]}")
    return sessions[-1]


def run_fake(work: Path, k: int, trials: int, step_s: float) -> dict[str, Any]:
    """The real scheduler, ``k`` fake-GPU slots, a workflow whose train and evaluate steps sleep."""
    from ftagent.core.slots import Slot
    from ftagent.engine.loop import LoopEngine
    from ftagent.engine.parallel import LocalSlotPool
    from ftagent.engine.session import Session
    from tests.unit._workflows import RecordingWorkflow, TraceState

    plan = {(i, s): f"sleep:{step_s * (2 if s == 'train' else 1)}" for i in range(trials) for s in ("train", "evaluate")}
    wf = RecordingWorkflow(plan=plan)
    wf.serial_steps = ("propose", "feedback")  # type: ignore[attr-defined]
    session = Session.create(work / f"fake{k}", state_cls=TraceState)
    pool = LocalSlotPool([Slot(index=i, gpus=[str(i)], gpu_indices=[i]) for i in range(k)])
    t0 = time.perf_counter()
    LoopEngine(wf, session, loop_n=trials, pool=pool).run()
    stats = trial_stats(session.dir)
    stats["elapsed_s"] = time.perf_counter() - t0
    return stats


def _report(res: BenchResults, label: str, stats: dict[str, Any]) -> None:
    res.add(SECTION, f"{label}: trials per hour", stats["per_hour"], "trials/h",
            f"{stats['trials']} trials in {stats['wall_s']:.0f} s of trials")
    if stats["mean_trial_s"]:
        res.add(SECTION, f"{label}: mean trial", stats["mean_trial_s"], "s")
        res.add(SECTION, f"{label}: scheduler overhead per trial", stats["overhead_s"], "s")


def run(res: BenchResults, tools_env: Path | None, work: Path, quick: bool) -> None:
    """The section: fake GPUs first (seconds), then the real CPU sessions (minutes)."""
    trials = 8 if quick else 16
    one, four = run_fake(work, 1, trials, 1.0), run_fake(work, 4, trials, 1.0)
    _report(res, "fake GPU, 1 slot", one)
    _report(res, "fake GPU, 4 slots", four)
    res.add_ratio(SECTION, "fake GPU: trials/h 4 slots / 1 slot", four["per_hour"], one["per_hour"], target_min=3.5)
    res.add_ratio(SECTION, "fake GPU: overhead / trial (4 slots)", four["overhead_s"], four["mean_trial_s"])
    if tools_env is None:
        res.skipped[f"{SECTION} (CPU sessions)"] = "FT_TOOLS_ENV is not set to a tool env (run `make tools`)"
        return
    print(f"[{SECTION}] evaluation waves through the stand-in, load average {load_average()}", flush=True)
    run_waves(res, tools_env, work, items=20 if quick else 40)
    loops, probe = (2, 30) if quick else (4, 60)
    print(f"[{SECTION}] real sessions, {loops} trials each, load average {load_average()}", flush=True)
    single = trial_stats(run_session(work, tools_env, 1, loops, probe))
    print(f"[{SECTION}] 1 slot done, load average {load_average()}", flush=True)
    double = trial_stats(run_session(work, tools_env, 2, loops, probe))
    print(f"[{SECTION}] 2 slots done, load average {load_average()}", flush=True)
    _report(res, "CPU, 1 slot", single)
    _report(res, "CPU, 2 slots", double)
    res.add_ratio(SECTION, "CPU: trials/h 2 slots / 1 slot", double["per_hour"], single["per_hour"], target_min=1.6)
    res.add_ratio(SECTION, "CPU: overhead / trial (2 slots)", double["overhead_s"], double["mean_trial_s"], target_max=0.05)
    res.add(SECTION, "CPU, 2 slots: busy fraction", double["busy"], "", "train+eval s ÷ (slots × trials' wall)")
    res.add_ratio(SECTION, "CPU: busy fraction (2 slots)", double["busy"], 1.0, target_min=0.85)


def run_waves(res: BenchResults, tools_env: Path, work: Path, items: int = 40) -> None:
    """The vllm-server backend on CPU through the stand-in with two replicas (``--data-parallel-size 2``):
    a split in waves of models.yaml's 16 vs in one wave (serving.server_spec), replicas' busy fraction
    and the inference time (tiny-qwen2, demo_add, ``items`` per split, validation + test in one run)."""
    import json

    from ftagent.benchmarks import get_benchmark
    from ftagent.core.settings import load_settings
    from ftagent.models.builtin import build_builtin
    from ftagent.runners.local import LocalRunner
    from ftagent.tools.opencompass import serving
    from ftagent.tools.opencompass.runs import evaluate_splits_of_path
    from tests.integration.test_vllm_server_eval import StandInServe

    python = tools_env / "bin" / "python"
    model = build_builtin("tiny-qwen2", work / "models" / "builtin" / "tiny-qwen2", python)
    default = serving.SERVER_SEQS_PER_REPLICA
    runs: dict[str, list[tuple[float, float]]] = {"waves of 16": [], "one wave": []}
    for n, (label, per_replica) in enumerate((("waves of 16", 1), ("one wave", default), ("one wave", default),
                                              ("waves of 16", 1))):  # ABBA: a load change hits both alike
        stats_file = work / f"stats-{n}.json"

        class Serve(StandInServe):
            def __init__(self, python: Path, stats: Path, **override: str) -> None:
                super().__init__(python, **override)
                self.stats = stats

            def __call__(self, request):  # type: ignore[no-untyped-def]
                return [*super().__call__(request), "--stats-file", str(self.stats)]

        serving.SERVER_SEQS_PER_REPLICA = per_replica
        try:
            settings = load_settings(file_path=work / f"ft-waves-{n}", benchmark_limit=items,
                                     eval_backend="vllm-server")
            evaluate_splits_of_path(model, None, benchmark=get_benchmark("demo_add"), splits=("validation", "test"),
                                    settings=settings, runner=LocalRunner(tools_env, sandbox="none"),
                                    work_dir=work / f"waves-{n}", model_name="builtin/tiny-qwen2",
                                    timeout=1800, serve_command=Serve(python, stats_file, data_parallel_size=2))
        finally:
            serving.SERVER_SEQS_PER_REPLICA = default
        stats = json.loads(stats_file.read_text(encoding="utf-8"))
        spans = stats["spans"]
        wall = max(s[2] for s in spans) - min(s[1] for s in spans)
        runs[label].append((wall, sum(stats["busy_s"]) / (stats["replicas"] * wall)))
    results = {}
    for label, pairs in runs.items():
        wall, busy = (sum(x[0] for x in pairs) / len(pairs), sum(x[1] for x in pairs) / len(pairs))
        results[label] = (wall, busy)
        res.add(SECTION, f"eval, 2 replicas, {label}: inference", wall, "s", f"mean of {len(pairs)} runs (ABBA)")
        res.add(SECTION, f"eval, 2 replicas, {label}: replicas busy", busy, "", "busy s ÷ (2 × inference s)")
    res.add_ratio(SECTION, "eval: replicas busy, one wave / waves of 16", results["one wave"][1],
                  results["waves of 16"][1], target_min=1.0)
    res.add_ratio(SECTION, "eval: inference time, one wave / waves of 16", results["one wave"][0],
                  results["waves of 16"][0])
