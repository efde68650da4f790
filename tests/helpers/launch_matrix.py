"""The launch-plan matrix of docs/gpu.md: every real config in tests/fixtures/model_configs on each profile.

``python -m tests.helpers.launch_matrix --write`` regenerates the tables between the markers in
docs/gpu.md; tests/unit/test_launch_matrix_docs.py fails when the committed tables are stale, and
tests/unit/test_plan_agreement.py checks that ``ftagent plan --hardware`` and a session's own plan agree on
every cell.

Two tables: the default (ZeRO-3 CPU offload neither asked for nor fast: the host's RAM changes nothing,
checked at both sizes), and the cells that change with ``FT_CPU_OFFLOAD=true`` at two RAM sizes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ftagent.tools.launch.offload import OffloadPolicy
from ftagent.tools.launch.plan import MOE_KEYS, LaunchPlan, launch_plan
from ftagent.tools.launch.profiles import parse_hardware_spec
from ftagent.tools.opencompass.inference import inference_settings

REPO = Path(__file__).parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "model_configs"
DOC = REPO / "docs" / "gpu.md"
PROFILES = ("1xA10G", "1xL40S", "2xL40S", "4xA100-40GB", "8xH100", "1xV100", "1xT4")
RAM_SIZES = (64.0, 1024.0)  # GB of host RAM
START, END = "<!-- launch-plan-matrix:start -->", "<!-- launch-plan-matrix:end -->"
OFF_START, OFF_END = "<!-- launch-plan-offload:start -->", "<!-- launch-plan-offload:end -->"

REASONS = {"ftagent.memory": "no method fits", "vllm.memory": "no room for vLLM's KV cache"}


def models() -> list[tuple[str, dict]]:
    """(HF name, config) of every dense fixture (the memory estimate does not model experts)."""
    out = []
    for folder in sorted(p for p in FIXTURES.iterdir() if (p / "config.json").is_file()):
        cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        if not any(int(cfg.get(k) or 0) > 1 for k in MOE_KEYS):
            out.append((folder.name.replace("__", "/"), cfg))
    return out


def plan_of(name: str, cfg: dict, spec: str, *, ram_gb: float, asked: bool) -> LaunchPlan:
    """The plan of one cell: the launch plan with models.yaml's settings for ``name`` (CPU Adam not built)."""
    return launch_plan(cfg, parse_hardware_spec(spec), name=name, inference=inference_settings(name).values,
                       cpu_ram_gb=ram_gb, offload=OffloadPolicy(asked=asked))


def cell(p: LaunchPlan) -> str:
    if p.refused:
        return "refused: " + "; ".join(REASONS.get(v.rule, v.setting) for v in p.refused)
    method = {"full_gc": "full", "lora": "lora", "qlora": "qlora"}.get(p.method, p.method)
    ds = {"ds_z3_config.json": " ZeRO-3", "ds_z3_offload_config.json": " ZeRO-3 offload"}.get(p.deepspeed or "", "")
    length = f"len {p.max_model_len:,}" + (" (KV cache)" if p.max_model_len_wanted else "")
    return (f"{method}{ds}, {p.precision}, cutoff ≤ {p.max_cutoff_len:,}; vLLM {p.vllm_dtype} TP "
            f"{p.tensor_parallel_size} × DP {p.data_parallel_size}, {length}")


def render() -> str:
    """The default table (one row per model, one column per profile)."""
    head = "| model | " + " | ".join(PROFILES) + " |\n|---|" + "---|" * len(PROFILES) + "\n"
    rows = [f"| {name} | " + " | ".join(cell(plan_of(name, cfg, spec, ram_gb=RAM_SIZES[0], asked=False))
                                        for spec in PROFILES) + " |\n" for name, cfg in models()]
    return head + "".join(rows)


def render_offload() -> str:
    """The cells ``FT_CPU_OFFLOAD=true`` changes, at each RAM size."""
    head = ("| model | hardware | " + " | ".join(f"{r:,.0f} GB RAM" for r in RAM_SIZES) + " |\n|---|---|"
            + "---|" * len(RAM_SIZES) + "\n")
    rows = []
    for name, cfg in models():
        for spec in PROFILES:
            default = cell(plan_of(name, cfg, spec, ram_gb=RAM_SIZES[0], asked=False))
            asked = [cell(plan_of(name, cfg, spec, ram_gb=r, asked=True)) for r in RAM_SIZES]
            if any(c != default for c in asked):
                rows.append(f"| {name} | {spec} | " + " | ".join(asked) + " |\n")
    return head + "".join(rows)


def _replace(text: str, start: str, end: str, body: str) -> str:
    before, rest = text.split(start, 1)
    _, after = rest.split(end, 1)
    return f"{before}{start}\n{body}{end}{after}"


def write(doc: Path = DOC) -> None:
    text = _replace(doc.read_text(encoding="utf-8"), START, END, render())
    doc.write_text(_replace(text, OFF_START, OFF_END, render_offload()), encoding="utf-8")


def committed(doc: Path = DOC, start: str = START, end: str = END) -> str:
    text = doc.read_text(encoding="utf-8")
    return text.split(start, 1)[1].split(end, 1)[0].lstrip("\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help="rewrite the tables in docs/gpu.md")
    args = parser.parse_args()
    if args.write:
        write()
    else:
        print(render(), end="")
        print(render_offload(), end="")
