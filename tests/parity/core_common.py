"""Shared by the core parity tests: ftagent's rendered config for a benchmark, one scoring run, oracles.

ftagent's side is never re-typed: the dataset block takes the evaluator and post-processor the benchmark
adapter resolves from its YAML and ``ftagent.benchmarks.components``; the model block is the one
``render_config`` writes (its model-level ``pred_postprocessor``). ``core_score.py`` reads both back
from the rendered file inside the tool env.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ftagent.benchmarks import get_benchmark
from ftagent.benchmarks.base import DatasetBlock
from ftagent.tools.opencompass.render import ModelSpec, render_config
from tests.parity.harness import HERE, ParityTable, load_corpus, run_in_tools

SCRIPT = HERE / "core_score.py"


def ours_config(key: str, folder: Path, *, judge: dict[str, str] | None = None,
                backend: str = "hf") -> Path:
    """Render ftagent's OpenCompass config for benchmark ``key`` (one dataset block) into ``folder``."""
    bench = get_benchmark(key)
    block = DatasetBlock(abbr=f"{key}-validation", path=str(folder / "validation.jsonl"),
                         input_columns=bench.spec.input_columns, output_column=bench.spec.output_column,
                         rounds=[{"role": "HUMAN", "prompt": bench.spec.prompt}], max_out_len=bench.spec.max_out_len,
                         evaluator=bench.evaluator, evaluator_kwargs=bench.evaluator_kwargs,
                         postprocessor=bench.postprocessor, postprocessor_kwargs=dict(bench.postprocessor_kwargs),
                         judge=judge if bench.supports_judge else None)
    extra = {"api_base": "http://127.0.0.1:9/v1/", "served_name": "m"} if backend == "vllm-server" else {}
    model = ModelSpec(backend=backend, abbr=f"ft-{key}", path="/m/full", tokenizer_path="/m/full", **extra)
    path = folder / f"{key}_eval.py"
    path.write_text(render_config([block], model, benchmark=key, split="validation"), encoding="utf-8")
    return path


def _case(c: dict[str, Any]) -> dict[str, Any]:
    return {"output": c["output"], "gold": c["gold"], "stock_gold": c.get("stock_gold", c["gold"]),
            "row": c.get("row") or {}}


def score_corpus(tools_python: Path, key: str, folder: Path, stock: dict[str, str] | None,
                 oracle: list[dict[str, Any]] | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The corpus of ``key`` scored by ftagent's path and stock's (and the oracle outputs by ftagent's)."""
    corpus = load_corpus(key)
    payload = {"ours": str(ours_config(key, folder)), "stock": stock, "cases": [_case(c) for c in corpus],
               "oracle": [_case(c) for c in oracle or []]}
    return corpus, run_in_tools(tools_python, SCRIPT, payload)


def oracle_cases(corpus: list[dict[str, Any]], write: Callable[[dict[str, Any]], str],
                 wrong: Callable[[dict[str, Any]], str]) -> list[dict[str, Any]]:
    """Per distinct gold of the corpus: the gold written as a model would, an empty output, a wrong one.

    Each case carries ``expect`` (True for the gold, False for empty and wrong).
    """
    seen, out = set(), []
    for c in corpus:
        key = repr(c["gold"]) + repr(sorted((c.get("row") or {}).items()))
        if key in seen:
            continue
        seen.add(key)
        row = c.get("row") or {}
        out += [{"output": write(c), "gold": c["gold"], "row": row, "expect": True},
                {"output": "", "gold": c["gold"], "row": row, "expect": False},
                {"output": wrong(c), "gold": c["gold"], "row": row, "expect": False}]
    return out


def check(parity: ParityTable, key: str, reference: str, corpus: list[dict[str, Any]], result: dict[str, Any],
          deliberate: dict[int, str] | None = None) -> None:
    """Record the row; every disagreement must be deliberate, and each listed one must still occur."""
    outputs = [c["output"] for c in corpus]
    row = parity.record(key, reference, outputs, result["ours"], result["stock"], deliberate=deliberate)
    assert row.unexplained == [], "\n" + parity.explain(row, outputs, result["ours"], result["stock"])
    stale = sorted(set(deliberate or {}) - set(row.deliberate))
    assert stale == [], f"listed as deliberate but agreeing: {stale}"


def check_oracle(key: str, oracle: list[dict[str, Any]], verdicts: list[bool]) -> None:
    """Gold written as a model would → 100 %; empty and wrong → 0 % (through ftagent's path)."""
    gold = [v for c, v in zip(oracle, verdicts, strict=True) if c["expect"]]
    bad = [v for c, v in zip(oracle, verdicts, strict=True) if not c["expect"]]
    assert gold and all(gold), f"{key}: gold outputs scored {100 * sum(gold) / len(gold):.0f} %: " + repr(
        [c["output"][:80] for c, v in zip(oracle, verdicts, strict=True) if c["expect"] and not v])
    assert bad and not any(bad), f"{key}: empty/wrong outputs scored {100 * sum(bad) / len(bad):.0f} %: " + repr(
        [c["output"][:80] for c, v in zip(oracle, verdicts, strict=True) if not c["expect"] and v])
