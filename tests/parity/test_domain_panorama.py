"""PANORAMA parity: ftagent's scoring path vs the official LGAI-Research/PANORAMA scoring code.

The official per-output scores are recorded in ``reference/panorama.json`` (how: see
``official_panorama.py``); with ``FTAGENT_OFFICIAL_PANORAMA=<checkout>`` this test also recomputes
them live (with ``FTAGENT_OFFICIAL_PYTHON``, a venv holding the official requirements) and checks
the recording is current. ftagent's side is ``evaluate_subtask`` on one output at a time,
exactly as ``DomainEvaluator`` scores each detail row.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ftagent.benchmarks.domain import evaluate_subtask
from tests.parity.harness import load_corpus

REFERENCE = Path(__file__).resolve().parent / "reference" / "panorama.json"

# Why ftagent scores these outputs differently on purpose (corpus index → reason); the outputs are
# the same in the zero-shot and the CoT corpora. The official scripts call the OpenAI API in JSON mode,
# so their parser never meets anything but bare JSON: json.loads(text) or nothing. A local model has
# no JSON mode, and the official prompts themselves show the answer inside a ```json fence.
_FENCE = "a ```json fence around the JSON, the prompt's own display format: the official json.loads fails"
_THINK = "closed <think> block before the JSON: the reasoning is not the answer, the JSON after it is"
_PROSE = "prose before the JSON object: the official json.loads of the whole text fails"
_TRUNC = "answer key complete, then cut off inside the reason: the answer was given"
_CODE = "cut off after a complete \"code\": \"102\" (closing quote): the answer was given"
_TWO = "two JSON objects: ftagent takes the first (the official json.loads fails on the extra data)"
DELIBERATE = {
    "par4pc": {4: _FENCE, 12: _THINK, 22: _PROSE, 23: _PROSE, 33: _TRUNC, 34: _TWO},
    "pi4pc": {5: _FENCE, 10: _THINK, 17: _PROSE, 18: _PROSE, 24: _TRUNC},
    "noc4pc": {5: _FENCE, 8: _THINK, 15: _PROSE, 16: _PROSE, 17: _CODE, 18: _TRUNC, 29: _TWO},
}
KEYS = ("panorama_par4pc", "panorama_par4pc_cot", "panorama_pi4pc", "panorama_pi4pc_cot",
        "panorama_noc4pc", "panorama_noc4pc_cot")


@functools.lru_cache(maxsize=1)
def _reference() -> dict[str, Any]:
    """The recorded official scores; recomputed and compared when the official checkout is given
    (run by ``FTAGENT_OFFICIAL_PYTHON``, a venv with the official requirements, default this python)."""
    recorded = json.loads(REFERENCE.read_text(encoding="utf-8"))
    if os.environ.get("FTAGENT_OFFICIAL_PANORAMA"):
        python = os.environ.get("FTAGENT_OFFICIAL_PYTHON", sys.executable)
        script = Path(__file__).resolve().parent / "official_panorama.py"
        proc = subprocess.run([python, str(script)], capture_output=True, text=True, timeout=1800,
                              env={**os.environ, "MPLBACKEND": "Agg"})
        assert proc.returncode == 0, proc.stderr[-3000:]
        live = json.loads(proc.stdout)
        assert live["keys"] == recorded["keys"], "reference/panorama.json is stale: rerun official_panorama.py --write"
    return recorded


def ours(task: str, output: str, item: dict[str, Any]) -> dict[str, Any]:
    """ftagent's metrics for one output (what DomainEvaluator computes per detail row)."""
    return evaluate_subtask("panorama", task, [output], [item])


def _pairs(task: str, case: dict[str, Any], ref: dict[str, Any]) -> tuple[Any, Any]:
    got = ours(task, case["output"], case["item"])
    if task == "par4pc":
        return ((round(got["macro_f1"] / 100, 4), got["custom_score"], got["exact_match"] == 100.0),
                (ref["f1"], ref["custom"], ref["exact"]))
    if task == "pi4pc":
        return (round(got["custom_score"] * 2 / 100), got["gold_hit_rate"] == 100.0), (ref["score"], ref["gold_hit"])
    return (got["accuracy"] == 100.0, got["valid_count"] == 1), (ref["correct"], ref["valid"])


@pytest.mark.parametrize("key", KEYS)
def test_panorama_matches_the_official_scorer(key, parity):
    reference = _reference()
    task = key.split("_")[1]
    corpus = load_corpus(key)
    refs = reference["keys"][key]
    assert len(corpus) >= 30 and len(refs) == len(corpus)
    pairs = [_pairs(task, c, r) for c, r in zip(corpus, refs, strict=True)]
    outputs = [c["output"] for c in corpus]
    scorer = reference["scorers"]["par4pc_f1" if task == "par4pc" else task]
    # the table records the core per-output score; the other official columns must agree too
    row = parity.record(key, f"official {reference['repo']}@{reference['commit'][:7]}:{scorer}", outputs,
                        [p[0][0] for p in pairs], [p[1][0] for p in pairs], deliberate=DELIBERATE[task])
    assert row.unexplained == [], parity.explain(row, outputs, [p[0] for p in pairs], [p[1] for p in pairs])
    rest = [i for i, (a, b) in enumerate(pairs) if a[1:] != b[1:] and i not in DELIBERATE[task]]
    assert rest == [], [(i, pairs[i], outputs[i]) for i in rest]
    # every deliberate entry is a real disagreement (a stale entry would hide nothing and mislead)
    assert sorted(row.deliberate) == sorted(DELIBERATE[task])


@pytest.mark.parametrize("key", ["panorama_par4pc", "panorama_pi4pc", "panorama_noc4pc"])
def test_panorama_all_subtasks_key_scores_like_its_single_task_keys(key, parity):
    """``panorama`` runs the three sub-tasks with the same scorer: its rows are the single-task rows."""
    task = key.split("_")[1]
    corpus = load_corpus(key)
    single = [ours(task, c["output"], c["item"]) for c in corpus]
    outputs = [c["output"] for c in corpus]
    core = {"par4pc": "macro_f1", "pi4pc": "gold_hit_rate", "noc4pc": "accuracy"}[task]
    refs = _reference()["keys"][key]
    if task == "par4pc":
        theirs = [r["f1"] * 100 for r in refs]
    else:
        theirs = [100.0 * r["gold_hit" if task == "pi4pc" else "correct"] for r in refs]
    row = parity.record(f"panorama/{task}", "official (as the single-task key)", outputs,
                        [round(s[core], 2) for s in single], theirs, deliberate=DELIBERATE[task], tol=0.01)
    assert row.unexplained == []


def _oracle(task: str, item: dict[str, Any], cot: bool) -> str:
    reason = '"reason": "Regarding Claim 1, the reference discloses every limitation.", ' if cot else ""
    if task == "par4pc":
        return "{" + reason + f'"answer": {json.dumps(item["gold_answers"])}' + "}"
    if task == "pi4pc":
        return "{" + reason + f'"answer": {item["gold_answers"][0]}' + "}"
    return "{" + reason + f'"code": "{item["answer"]["code"]}"' + "}"


@pytest.mark.parametrize("key", KEYS)
def test_panorama_oracle_scores_full_marks_and_empty_or_wrong_score_zero(key):
    task, cot = key.split("_")[1], key.endswith("_cot")
    items = [c["item"] for c in load_corpus(key)]
    core = {"par4pc": "macro_f1", "pi4pc": "gold_hit_rate", "noc4pc": "macro_f1"}[task]
    gold = evaluate_subtask("panorama", task, [_oracle(task, it, cot) for it in items], items)
    # NOC4PC's real sample items are all "102": the macro-F1 over ALLOW/102/103 of a perfect answer
    # sheet is then 100/3 (the two absent classes score 0 with zero_division=0, as in the official).
    assert gold[core] == pytest.approx(100.0 / 3 if task == "noc4pc" else 100.0)
    assert gold["accuracy" if task != "par4pc" else "exact_match"] == pytest.approx(100.0)
    empty = evaluate_subtask("panorama", task, [""] * len(items), items)
    assert empty[core] == 0.0
    wrong = {"par4pc": '{"answer": "H"}', "pi4pc": '{"answer": 999}', "noc4pc": '{"code": "ALLOW"}'}[task]
    assert evaluate_subtask("panorama", task, [wrong] * len(items), items)[core] == 0.0
