"""Start-up lookups (issue #22 item 4): how often one session looks its benchmark and models.yaml up.

Runs a real one-loop demo in-process (``ftagent llm_finetune --benchmark demo_add --base-model
builtin/tiny-qwen2 --loop-n 1``, heuristic planner, local runner, a scratch FT_FILE_PATH) with counting
wrappers around

* ``BENCHMARKS.get`` — the benchmark registry lookup (every ``get_benchmark``/``resolve_benchmark``
  ends there), and
* every read of a file named ``models.yaml`` (``Path.read_text``) and every call of
  ``ftagent.tools.opencompass.inference.load_models_yaml``,

and prints, as JSON, the counts before loop 0 (everything up to the loop engine's start: options,
scenario, baseline, components), inside the loop, and inside each evaluation (baseline and loop), with
the caller of each lookup so a regression says where it came from.

Usage::

    FT_TOOLS_ENV=/path/to/tools/env .venv/bin/python -m tests.bench.startup_lookups [--keep DIR]

It needs the tool env (real LLaMA-Factory + OpenCompass); a run takes 3-5 minutes on CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import traceback
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Any

OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "LITELLM_LOCAL_MODEL_COST_MAP": "True", "OMP_NUM_THREADS": "1"}


class LookupCounter:
    """Counting wrappers for the registry lookup and the models.yaml reads, tagged by phase."""

    def __init__(self) -> None:
        self.phase = "startup"  # "startup" until the loop engine runs, then "loop"
        self.evaluation: str | None = None  # "baseline" or "loop" while an evaluation runs
        self.events: list[dict[str, Any]] = []

    def _caller(self) -> str:
        frames = [f for f in traceback.extract_stack()[:-3] if "/ftagent/" in f.filename
                  and not f.filename.endswith(("benchmarks/__init__.py", "benchmarks/registry.py"))]
        if not frames:
            return "?"
        f = frames[-1]
        return f"{f.filename.split('/ftagent/', 1)[1]}:{f.lineno} {f.name}"

    def record(self, kind: str) -> None:
        self.events.append({"kind": kind, "phase": self.phase, "evaluation": self.evaluation,
                            "caller": self._caller()})

    def count(self, kind: str, **where: Any) -> int:
        return sum(1 for e in self.events if e["kind"] == kind and all(e[k] == v for k, v in where.items()))

    def summary(self) -> dict[str, Any]:
        evals = Counter(e["evaluation"] for e in self.events if e["kind"] == "evaluation")
        out: dict[str, Any] = {
            "registry_lookups_before_loop0": self.count("registry", phase="startup"),
            "registry_lookups_in_loops": self.count("registry", phase="loop"),
            "registry_lookups_in_baseline_evaluation": self.count("registry", evaluation="baseline"),
            "registry_lookups_in_loop_evaluations": self.count("registry", evaluation="loop"),
            "models_yaml_reads": self.count("models_yaml"),
            "models_yaml_reads_before_loop0": self.count("models_yaml", phase="startup"),
            "models_yaml_reads_in_evaluations": sum(1 for e in self.events if e["kind"] == "models_yaml"
                                                    and e["evaluation"] is not None),
            "load_models_yaml_calls": self.count("load_models_yaml"),
            "evaluations": dict(evals),
        }
        out["callers"] = {kind: Counter(f"{e['phase']}/{e['evaluation'] or '-'} {e['caller']}"
                                        for e in self.events if e["kind"] == kind)
                          for kind in ("registry", "models_yaml")}
        return out


@contextmanager
def counting() -> Any:
    """Install the wrappers (undone on exit); yields the :class:`LookupCounter`."""
    import ftagent.tools.opencompass.evaluator as evaluator_mod
    import ftagent.tools.opencompass.inference as inference_mod
    from ftagent.benchmarks.registry import BENCHMARKS
    from ftagent.engine.loop import LoopEngine

    counter = LookupCounter()
    saved: list[tuple[Any, str, Any]] = []

    def patch(obj: Any, name: str, new: Any) -> None:
        saved.append((obj, name, obj.__dict__.get(name, getattr(obj, name)) if isinstance(obj, type)
                      else getattr(obj, name)))
        setattr(obj, name, new)

    registry_get = BENCHMARKS.get

    def get(name: str) -> Any:
        counter.record("registry")
        return registry_get(name)

    patch(BENCHMARKS, "get", get)
    read_text = Path.read_text

    def counted_read_text(self: Path, *args: Any, **kwargs: Any) -> str:
        if self.name == "models.yaml":
            counter.record("models_yaml")
        return read_text(self, *args, **kwargs)

    patch(Path, "read_text", counted_read_text)
    load = inference_mod.load_models_yaml

    def counted_load(*args: Any, **kwargs: Any) -> Any:
        counter.record("load_models_yaml")
        return load(*args, **kwargs)

    patch(inference_mod, "load_models_yaml", counted_load)
    engine_run = LoopEngine.run

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        counter.phase = "loop"
        return engine_run(self, *args, **kwargs)

    patch(LoopEngine, "run", run)

    def in_evaluation(label: str, fn: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            counter.evaluation = label
            counter.record("evaluation")
            try:
                return fn(*args, **kwargs)
            finally:
                counter.evaluation = None
        return wrapped

    patch(evaluator_mod, "evaluate_baseline", in_evaluation("baseline", evaluator_mod.evaluate_baseline))
    cls = evaluator_mod.OpenCompassEvaluator
    patch(cls, "evaluate_splits", in_evaluation("loop", cls.evaluate_splits))
    try:
        yield counter
    finally:
        for obj, name, old in reversed(saved):
            setattr(obj, name, old)


def run_demo(scratch: Path) -> dict[str, Any]:
    """One real loop of demo_add on the tiny model in ``scratch``; the counts as a dict."""
    env = {**OFFLINE, "FT_PLANNER": "heuristic", "FT_ENV_TYPE": "local", "FT_FILE_PATH": str(scratch / "files"),
           "LOG_PATH": str(scratch / "log"), "WORKSPACE_PATH": str(scratch / "workspace")}
    os.environ.update(env)
    if not os.environ.get("FT_TOOLS_ENV"):
        raise SystemExit("set FT_TOOLS_ENV to the tool env (real LLaMA-Factory + OpenCompass)")
    import ftagent.finetune.scenario  # noqa: F401 - the modules the wrappers patch are imported first
    from ftagent.finetune.app import FinetuneOptions, run_finetune

    with counting() as counter:
        summary = run_finetune(FinetuneOptions(benchmark="demo_add", base_model="builtin/tiny-qwen2", loop_n=1,
                                               quiet=True))
    out = counter.summary()
    out["session_status"] = summary.status
    out["loops_done"] = summary.loops_done
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="scratch folder to use and keep (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        result = run_demo(args.keep.absolute())
    else:
        with tempfile.TemporaryDirectory(prefix="ftagent-lookups-") as tmp:
            result = run_demo(Path(tmp))
    print("STARTUP_LOOKUPS " + json.dumps(result, indent=2, default=dict), file=sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
