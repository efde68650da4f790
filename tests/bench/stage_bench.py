"""Stages on the demo (issue 40): step time of DPO and GRPO ÷ SFT, and validation after equal wall time.

One SFT probe loop (loop 0, the offline planner's recipe on ``builtin/tiny-qwen2`` / ``demo_add``) is run
once; then the finished session is forked (``--path <snapshot> --no-checkout``) into one session per
variant, each running loop 1 from loop 0's weights:

* **DPO** and **GRPO** (the offline planner's recipes for the stage, sampling included);
* **SFT** twice more, from the same weights, with ``max_steps`` set so that its loop-1 wall (validate +
  train) matches the DPO and the GRPO loop's wall (sampling + validate + train) — "SFT-only for the
  same time".

Reported side by side (numbers, no asserts): each loop-1 training step time (``train_runtime`` ÷ steps)
and the ratios DPO ÷ SFT and GRPO ÷ SFT; each variant's loop-1 wall, validation score, and the paired
interval vs loop 0 (the SOTA). The variants run through the real CLI with a plug-in proposer
(``FT_PROPOSER=tests.bench.stage_bench:ForcedStageProposer``) that forces loop 1's stage — the rest is
the product's own path (sampling step, validator, trainers, evaluation).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.bench.common import BenchResults

SECTION = "stages"
MAIN = "import sys; sys.argv[0] = 'ftagent'; from ftagent.cli.main import main; main()"
COMMON = ["--benchmark", "demo_add", "--base-model", "builtin/tiny-qwen2", "--quiet"]


class ForcedStageProposer:
    """``FT_PROPOSER`` plug-in: loop 0 as the offline planner proposes it; later loops run ``BENCH_STAGE`` from
    loop 0's weights (``BENCH_SFT_STEPS`` optimizer steps when that stage is SFT)."""

    def __init__(self, scenario: Any, settings: Any = None) -> None:
        import ftagent.planners.heuristic.policy as policy
        from ftagent.planners.heuristic.planner import HeuristicProposer

        policy.PROBE_STEPS = int(os.environ.get("BENCH_PROBE", policy.PROBE_STEPS))  # loop 0's length
        self.scenario, self.inner = scenario, HeuristicProposer(scenario, settings)

    def propose(self, trace: Any, ctx: Any) -> Any:
        from ftagent.core.types import Hypothesis
        from ftagent.planners.heuristic.planner import PLANNER
        from ftagent.planners.heuristic.policy import base_recipe, is_tiny
        from ftagent.planners.heuristic.stage_code import stage_hypothesis
        from ftagent.planners.heuristic.stages import StageChoice

        if not trace.experiments:
            return self.inner.propose(trace, ctx)
        stage, first = os.environ.get("BENCH_STAGE", "sft"), trace.experiments[0]
        if stage == "sft":
            # the continuation's learning rate is the preference stages' (1e-4 on the tiny model), not the probe's
            recipe = {**first.plan["recipe"], "max_steps": int(os.environ["BENCH_SFT_STEPS"]), "warmup_steps": 2,
                      "learning_rate": 1e-4}
            return Hypothesis(reason="bench: SFT-only for the same wall time", hypothesis="SFT from loop 0's weights",
                              task="Train", parent=0, planner=PLANNER, plan={"recipe": recipe}, stage="sft",
                              weights_from=0)
        choice = StageChoice(stage=stage, weights_from=0, reason="bench")
        return stage_hypothesis(choice, trace, self.scenario, PLANNER, first_recipe=base_recipe(self.scenario),
                                tiny=is_tiny(self.scenario))


def _env(root: Path, tools_env: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CHAT_MODEL", "OPENAI_API_KEY", "OPENAI_API_BASE")}
    env.update(FT_FILE_PATH=str(root / "files"), LOG_PATH=str(root / "log"), WORKSPACE_PATH=str(root / "ws"),
               FT_TOOLS_ENV=str(tools_env), FT_PLANNER="heuristic", FT_BENCHMARK_LIMIT="40",
               FT_UPPER_DATA_SIZE_LIMIT="2000", FT_FINAL_EVAL="none", FT_STAGES="sft,dpo,grpo",
               FT_PROPOSER="tests.bench.stage_bench:ForcedStageProposer",
               PYTHONPATH=str(Path(__file__).resolve().parents[2]), **extra)
    return env


def _run(root: Path, env: dict[str, str], *args: str) -> None:
    log = root / f"cli-{len(list(root.glob('cli-*.txt')))}.txt"
    with log.open("w", encoding="utf-8") as out:
        rc = subprocess.run([sys.executable, "-c", MAIN, "llm_finetune", *args], cwd=root, env=env, stdout=out,
                            stderr=subprocess.STDOUT, timeout=3600).returncode
    if rc != 0:
        raise RuntimeError(f"llm_finetune {' '.join(args)} exited {rc}: {log.read_text()[-2000:]}")


def _events(session: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (session / "events.jsonl").read_text().splitlines() if line.strip()]


def loop_facts(session: Path, loop: int) -> dict[str, Any]:
    """Loop ``loop``'s training step time, its wall (sampling, code, validate, train), validation and interval."""
    events = [e for e in _events(session) if e.get("loop") == loop]
    training = next((e for e in events if e["type"] == "training"), {})
    logged = max((p.get("step") or 0 for p in training.get("loss_history") or []), default=0)
    # a max_steps run ran all of them (an early stop fails the loop); the last logged step can be up to
    # logging_steps - 1 short of it (379 steps logged to 370), an epochs run (DPO) logs every step
    steps = int((training.get("config") or {}).get("max_steps") or logged)
    runtime = training.get("train_runtime_s")
    wall = sum(e["duration_s"] for e in events if e["type"] == "step_end" and e["step"] in ("code", "validate", "train"))
    val = next((e for e in events if e["type"] == "benchmark_result" and e["split"] == "validation"), {})
    feedback = next((e for e in events if e["type"] == "feedback"), {})
    sota = next((d for d in feedback.get("intervals") or [] if d.get("against") == "SOTA"
                 and d.get("split") == "validation"), None)
    return {"s_per_step": runtime / steps if runtime and steps else None, "steps": steps, "wall_s": wall,
            "val": val.get("score"), "vs_sota": sota, "stage": training.get("stage")}


def _sessions(root: Path) -> list[Path]:
    return sorted(p for p in (root / "log").iterdir() if p.is_dir())


def run(res: BenchResults, tools_env: Path, work: Path, quick: bool) -> None:
    """The stages section (see the module docstring)."""
    import ftagent.planners.heuristic.policy as heuristic

    root = work / "stages"
    root.mkdir(parents=True, exist_ok=True)
    probe = 150 if quick else 2 * heuristic.PROBE_STEPS  # a loop-0 model that answers some prompts right
    env = _env(root, tools_env, BENCH_PROBE=str(probe))
    started = time.monotonic()
    _run(root, env, *COMMON, "--loop-n", "1")
    base = _sessions(root)[-1]
    snapshot = sorted((base / "__session__").rglob("*_feedback"))[-1]
    sft0 = loop_facts(base, 0)
    res.add(SECTION, "loop 0 SFT step", sft0["s_per_step"], "s/step", f"{sft0['steps']} steps, val {sft0['val']}")
    facts: dict[str, dict[str, Any]] = {}
    for stage in ("dpo", "grpo"):
        _run(root, {**env, "BENCH_STAGE": stage}, "--path", str(snapshot), "--no-checkout", "--loop-n", "2", "--quiet")
        facts[stage] = loop_facts(_sessions(root)[-1], 1)
    fixed = sft0["wall_s"] - (sft0["s_per_step"] or 0.0) * sft0["steps"]  # an SFT loop's code + validate + start-up
    for stage in ("dpo", "grpo"):  # SFT-only from the same weights, for the same wall time
        steps = max(10, round((facts[stage]["wall_s"] - fixed) / max(sft0["s_per_step"] or 1.0, 1e-3)))
        _run(root, {**env, "BENCH_STAGE": "sft", "BENCH_SFT_STEPS": str(steps)}, "--path", str(snapshot),
             "--no-checkout", "--loop-n", "2", "--quiet")
        facts[f"sft@{stage}"] = loop_facts(_sessions(root)[-1], 1)
    for name, f in facts.items():
        interval = f["vs_sota"]
        text = (f"{interval['diff']:+.1f} [{interval['low']:+.1f}, {interval['high']:+.1f}] vs loop 0"
                if interval and interval.get("low") is not None else "no interval")
        res.add(SECTION, f"{name} step", f["s_per_step"], "s/step", f"{f['steps']} steps")
        res.add(SECTION, f"{name} loop-1 wall", f["wall_s"], "s", "sampling + code + validate + train")
        res.add(SECTION, f"{name} validation", f["val"], "accuracy", text)
    for stage in ("dpo", "grpo"):
        res.add_ratio(SECTION, f"{stage} step / SFT step", facts[stage]["s_per_step"], facts[f"sft@{stage}"]["s_per_step"])
        res.add_ratio(SECTION, f"{stage} validation / SFT-only validation (same wall)", facts[stage]["val"],
                      facts[f"sft@{stage}"]["val"])
    res.add(SECTION, "section wall", time.monotonic() - started, "s", f"loop 0 probe {probe} steps, 40 items a split")
