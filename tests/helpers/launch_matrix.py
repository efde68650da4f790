"""The launch-plan matrix of docs/gpu.md: every real config in tests/fixtures/model_configs on each profile.

``python -m tests.helpers.launch_matrix --write`` regenerates the table between the markers in
docs/gpu.md; tests/unit/test_launch_matrix_docs.py fails when the committed table is stale.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ftagent.tools.launch.plan import MOE_KEYS, LaunchPlan, launch_plan
from ftagent.tools.launch.profiles import parse_hardware_spec

REPO = Path(__file__).parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "model_configs"
DOC = REPO / "docs" / "gpu.md"
PROFILES = ("1xA10G", "1xL40S", "2xL40S", "4xA100-40GB", "8xH100", "1xT4")
START, END = "<!-- launch-plan-matrix:start -->", "<!-- launch-plan-matrix:end -->"


REASONS = {"ftagent.memory": "no method fits", "vllm.memory": "no room for vLLM's KV cache"}


def plans() -> list[LaunchPlan]:
    out = []
    for folder in sorted(p for p in FIXTURES.iterdir() if (p / "config.json").is_file()):
        cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        if any(int(cfg.get(k) or 0) > 1 for k in MOE_KEYS):
            continue  # the memory estimate does not model experts (the plan says so): not in the table
        for spec in PROFILES:
            out.append(launch_plan(cfg, parse_hardware_spec(spec), name=folder.name.replace("__", "/")))
    return out


def _cell(p: LaunchPlan) -> str:
    if p.refused:
        return "refused: " + "; ".join(REASONS.get(v.rule, v.setting) for v in p.refused)
    method = {"full_gc": "full", "lora": "lora", "qlora": "qlora"}.get(p.method, p.method)
    ds = {"ds_z3_config.json": " ZeRO-3", "ds_z3_offload_config.json": " ZeRO-3 offload"}.get(p.deepspeed or "", "")
    return (f"{method}{ds}, {p.precision}, cutoff ≤ {p.max_cutoff_len:,}; vLLM TP {p.tensor_parallel_size} × DP "
            f"{p.data_parallel_size}, len {p.max_model_len:,}")


def render() -> str:
    """The markdown table (one row per model, one column per profile)."""
    rows: dict[str, dict[str, str]] = {}
    for p in plans():
        rows.setdefault(p.model, {})[p.hardware.spec] = _cell(p)
    head = "| model | " + " | ".join(PROFILES) + " |\n|---|" + "---|" * len(PROFILES) + "\n"
    return head + "".join(f"| {m} | " + " | ".join(r[s] for s in PROFILES) + " |\n" for m, r in rows.items())


def write(doc: Path = DOC) -> None:
    text = doc.read_text(encoding="utf-8")
    before, rest = text.split(START, 1)
    _, after = rest.split(END, 1)
    doc.write_text(f"{before}{START}\n{render()}{END}{after}", encoding="utf-8")


def committed(doc: Path = DOC) -> str:
    text = doc.read_text(encoding="utf-8")
    return text.split(START, 1)[1].split(END, 1)[0].lstrip("\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help="rewrite the table in docs/gpu.md")
    args = parser.parse_args()
    if args.write:
        write()
    else:
        print(render(), end="")
