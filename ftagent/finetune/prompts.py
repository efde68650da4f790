"""Training prompts for the sampling step (issue 40): from training data only, never a benchmark item.

The prompts (and their golds) are Alpaca rows the session already trained on or would train on:

1. the ``data.json`` of the nearest loop in the start weights' lineage (``weights_from``) whose stage trains
   on Alpaca rows (SFT, GRPO) — the data that made the weights being sampled;
2. else the latest succeeded loop with Alpaca rows (e.g. the SFT loop a DPO-only lineage builds on);
3. else the datasets' default conversion (the offline planner's ``process_data.py``, run through the same
   runner and sandbox as every data script, into ``<loop>/prompts/``).

Each prompt is the user turn LLaMA-Factory trains (``instruction`` + "\\n" + ``input``) and its gold the
row's ``output``. The benchmark's validation and test items never enter: every source is training data, and
the rows then go through the contamination scan (:meth:`DataProcessor.scan <ftagent.tools.llamafactory.
data_script.DataProcessor.scan>`) like any ``data.json``, so a prompt that copies a benchmark item fails the
loop (DATA) before any sample is drawn.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftagent.core.errors import ErrorType, StepError
from ftagent.core.stage_specs import stage_spec
from ftagent.core.untrusted import read_bytes

if TYPE_CHECKING:
    from ftagent.core.trace import Experiment, Trace
    from ftagent.core.types import Hypothesis
    from ftagent.engine.loop import StepContext
    from ftagent.finetune.state import FinetuneSessionState
    from ftagent.tools.llamafactory.data_script import DataProcessor

PROMPTS_DIR = "prompts"
SEED = 0
MAX_DATA_BYTES = 1 << 30  # a training data.json read for its prompts


def _alpaca_data(exp: Experiment | None) -> Path | None:
    """The ``data.json`` an experiment whose stage trains on Alpaca rows trained on: the full data run's,
    frozen and unchanged since (``approved``), else its workspace's (a workflow that froze nothing); None
    for another stage's rows or data that changed after it trained."""
    if exp is None or exp.hypothesis is None or stage_spec(exp.hypothesis.stage).data != "alpaca":
        return None
    approved = getattr(exp, "approved", None)
    if approved is not None and approved.data is not None:
        return None if approved.changes() else Path(approved.data_file)
    path = Path(exp.artefacts.get("workspace", "")) / "data.json"
    return path if exp.artefacts.get("workspace") and path.is_file() else None


def _from_trace(trace: Trace, hypothesis: Hypothesis) -> tuple[Path, str] | None:
    seen: set[int] = set()
    loop = hypothesis.weights_from
    while loop is not None and loop not in seen:  # the lineage of the start weights
        seen.add(loop)
        exp = trace.get(loop)
        path = _alpaca_data(exp)
        if path is not None:
            return path, f"data.json of loop {loop} (the start weights' training data)"
        loop = exp.hypothesis.weights_from if exp is not None and exp.hypothesis is not None else None
    for exp in reversed(trace.experiments):
        path = _alpaca_data(exp) if exp.succeeded else None
        if path is not None:
            return path, f"data.json of loop {exp.loop} (the latest loop trained on Alpaca rows)"
    return None


def _default_conversion(workspace: Path, data: DataProcessor, ctx: StepContext[FinetuneSessionState]) -> Path:
    """The datasets' default Alpaca conversion (the offline planner's script), run like any data script."""
    from ftagent.planners.heuristic.render import render_process_data

    folder = workspace / PROMPTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "process_data.py").write_text(render_process_data(data.scenario, data.scenario.upper_data_size_limit),
                                            encoding="utf-8")
    data.run_script(folder, ctx, debug=False)
    return folder / "data.json"


def prompt_rows(rows: list[Any]) -> list[dict[str, str]]:
    """``{prompt, gold}`` of each usable Alpaca row (the user turn as LLaMA-Factory builds it), first of
    each prompt kept."""
    out: dict[str, dict[str, str]] = {}
    for row in rows:
        if not isinstance(row, dict) or not isinstance(row.get("instruction"), str) or not isinstance(row.get("output"), str):
            continue
        prompt = "\n".join(t for t in (row["instruction"], row.get("input") or "") if t)
        if prompt.strip() and row["output"].strip():
            out.setdefault(prompt, {"prompt": prompt, "gold": row["output"]})
    return list(out.values())


def training_prompts(trace: Trace, hypothesis: Hypothesis, workspace: Path, max_prompts: int, *,
                     data: DataProcessor, ctx: StepContext[FinetuneSessionState]) -> tuple[list[dict[str, str]], str]:
    """At most ``max_prompts`` seeded ``{prompt, gold}`` rows from training data, scanned; and their source.

    Raises:
        StepError(DATA): no training rows, or a row the contamination scan flags.
    """
    found = _from_trace(trace, hypothesis)
    path, source = found if found is not None else (_default_conversion(workspace, data, ctx),
                                                    "the datasets' default Alpaca conversion")
    try:  # a folder a data script wrote: no link followed, no special file opened (core.untrusted)
        raw = json.loads(read_bytes(path.parent, path.name, limit=MAX_DATA_BYTES).decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise StepError(f"training prompts unreadable ({source}): {exc}", error_type=ErrorType.DATA) from exc
    rows = prompt_rows(raw if isinstance(raw, list) else [])
    if not rows:
        raise StepError(f"no training prompt with a gold answer in {source}", error_type=ErrorType.DATA,
                        suggestion="Train an SFT loop first, or check the training datasets.")
    if len(rows) > max_prompts:
        rows = random.Random(SEED).sample(rows, max_prompts)
    data.scan([{"instruction": r["prompt"], "input": "", "output": r["gold"]} for r in rows], ctx,
              "training prompts (sampling)")
    return rows, source
