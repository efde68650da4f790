"""The files the offline planner writes: ``process_data.py`` from the datasets' default converters and
``train.yaml`` from a recipe.

A user's own file (``--dataset FILE``) is first filtered to the rows that fit the benchmark
(:mod:`.data_fit`, issue 35: a raw file mixing the task with distractors and junk): the rule of the
benchmark's validation items (a numeric relation such as "answer = N + 11", learnt from question and gold;
never the test split) is checked on each instruction template of the file; templates whose answers follow
it are kept, the others, empty, non-text and duplicate rows dropped; kept rows get the gold's answer form
and, where their numbers lie outside the digit counts the benchmark uses, its question wording. The
hypothesis and the feedback say what was kept and dropped (rows per template). A benchmark without such a
rule keeps every usable row. Then, as before, when the benchmark scores the last ``\\boxed{}`` (its
spec's answer rule), an answer without one becomes ``\\boxed{<its last number>}`` (a short non-numeric
answer is boxed whole), and the instruction is wrapped in the benchmark's prompt template when it has one
``{column}`` and the row does not already carry it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ftagent.core.types import ScenarioInfo


def data_selections(scenario: ScenarioInfo) -> dict[str, Any]:
    """The data step's decision (:class:`.data_fit.Selection`) per user file of the scenario."""
    from ftagent.core.paths import datasets_dir
    from ftagent.datasets.registry import is_user_dataset
    from ftagent.planners.heuristic.data_fit import select_for

    benchmark, file_path = getattr(scenario, "benchmark", ""), getattr(scenario, "file_path", "")
    if not benchmark or not file_path:
        return {}
    root = Path(getattr(scenario, "dataset_root", None) or datasets_dir(file_path))
    items = scenario.items_root() if hasattr(scenario, "items_root") else None  # the session's own copy
    holdout = getattr(scenario, "holdout", None)  # only the feedback part is read (issue 39 item 5)
    feedback = (tuple((holdout.files[d], tuple(int(i) for i in ids)) for d, ids in holdout.feedback.items()
                      if d in holdout.files) if holdout is not None else None)
    found = {name: select_for(str(root / name), str(file_path), benchmark, str(items) if items else None, feedback)
             for name in scenario.datasets if is_user_dataset(name)}
    return {name: sel for name, sel in found.items() if sel is not None}


def data_note(scenario: ScenarioInfo) -> str:
    """The data step's summary for the hypothesis and the feedback ("" without a user file)."""
    return " ".join(sel.summary() for sel in data_selections(scenario).values())


def benchmark_format(benchmark: str) -> tuple[bool, str]:
    """(the benchmark scores the last ``\\boxed{}``, its prompt template when it has one ``{column}``),
    from its spec's answer rule and prompt; (False, "") for a benchmark without a spec."""
    import re

    try:
        from ftagent.benchmarks import get_benchmark

        spec = get_benchmark(benchmark).spec
    except Exception:  # noqa: BLE001 - a plug-in benchmark without a spec: convert as it is
        return False, ""
    boxed = "boxed" in (spec.answer_rule or "")
    template = spec.prompt or ""
    return boxed, (template if len(re.findall(r"\{\w+\}", template)) == 1 else "")


# Pasted into process_data.py (self-contained): a user file's rows in the benchmark's format.
_FORMAT_CODE = r'''
def to_benchmark_format(row):
    """The row's answer as the benchmark scores it (\\boxed{}), its question in the benchmark's prompt."""
    out = str(row.get("output") or "").strip()
    if BOXED and "\\boxed{" not in out:
        numbers = re.findall(r"-?\d+(?:\.\d+)?", out.replace(",", ""))
        answer = numbers[-1] if numbers else (out if len(out) <= 40 else None)
        if answer is not None:
            row["output"] = "\\boxed{" + answer + "}"
    fixed = re.sub(r"\{\w+\}", "", TEMPLATE).strip()
    if TEMPLATE and fixed and fixed not in row.get("instruction", ""):
        row["instruction"] = re.sub(r"\{\w+\}", lambda m: row["instruction"], TEMPLATE)
    return row
'''


def render_process_data(scenario: ScenarioInfo, limit: int, seed: int = 0) -> str:
    """A self-contained ``process_data.py`` built from the datasets' default converters; a user file's
    rows are written in the benchmark's format (:func:`benchmark_format`)."""
    from ftagent.datasets.base import converter_source
    from ftagent.datasets.makeup import NUMBER_PATTERN
    from ftagent.datasets.registry import get_source, is_user_dataset
    from ftagent.planners.heuristic.fit_rules import script_source

    boxed, template = benchmark_format(getattr(scenario, "benchmark", ""))  # a bare namespace: no format
    selections = data_selections(scenario)
    blocks, calls = [], []
    for i, name in enumerate(scenario.datasets):
        src = converter_source(get_source(name))
        blocks.append(src.replace("def to_alpaca(", f"def convert_{i}(", 1))
        spec = selections[name].script_spec() if name in selections else None
        if spec is not None:  # the rows that fit the benchmark (data_fit), then its answer format
            blocks.append(f"SELECT_{i} = {spec!r}  # decided by the planner from the validation items")
            calls.append(f"    rows += [to_benchmark_format(r) for r in select_rows(convert_{i}(os.path.join(root, "
                         f"{name!r}), None, {seed}), SELECT_{i})][:per_dataset]")
        elif is_user_dataset(name):  # the user's raw answers: into the format the benchmark scores
            calls.append(f"    rows += [to_benchmark_format(r) for r in convert_{i}(os.path.join(root, {name!r}), "
                         f"per_dataset, {seed})]")
        else:
            calls.append(f"    rows += convert_{i}(os.path.join(root, {name!r}), per_dataset, {seed})")
    body = "\n\n".join(blocks)
    return f'''"""Generated by ftagent's heuristic planner: raw datasets -> Alpaca data.json."""
import argparse
import json
import os
import random
import re

BOXED = {boxed!r}  # the benchmark scores the last \\boxed{{}} of an answer
TEMPLATE = {template!r}  # the benchmark's prompt ({{column}} = the question)
NUMBER_PATTERN = {NUMBER_PATTERN!r}  # a number as rows write it
{_FORMAT_CODE}

{script_source()}

{body}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--debug", action="store_true", help="write about 100 rows only")
    args = ap.parse_args()
    root = os.environ["FT_DATASETS_DIR"]
    total = 100 if args.debug else {limit}
    per_dataset = max(1, total // {max(1, len(calls))})
    rows = []
{chr(10).join(calls) if calls else "    pass"}
    rows = [r for r in rows if r.get("instruction") and r.get("output")]
    random.Random({seed}).shuffle(rows)
    rows = rows[:total]
    with open("data.json", "w", encoding="utf-8") as fh:
        json.dump(rows, fh, ensure_ascii=False, indent=1)
    print(f"wrote {{len(rows)}} rows")


if __name__ == "__main__":
    main()
'''


def render_train_yaml(recipe: dict[str, Any], template: str) -> str:
    """The LLaMA-Factory config for a recipe (paths and system keys are injected by the validator)."""
    cfg: dict[str, Any] = {"stage": "sft", "do_train": True, "template": template}
    cfg.update({k: v for k, v in recipe.items() if v is not None})
    cfg.setdefault("logging_steps", 10)
    cfg.setdefault("save_strategy", "no")
    return yaml.safe_dump(cfg, sort_keys=False)
