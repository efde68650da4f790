"""Recompute ``reference/panorama.json``: PANORAMA's official scoring code on the parity corpora.

Usage (the official code is never copied here; it is imported from a local checkout)::

    git clone https://github.com/LGAI-Research/PANORAMA /tmp/panorama   # or fetch + git archive
    python -m venv /tmp/offvenv && /tmp/offvenv/bin/pip install pandas numpy pydantic scikit-learn \
        python-dotenv "datasets<3"
    FTAGENT_OFFICIAL_PANORAMA=/tmp/panorama /tmp/offvenv/bin/python tests/parity/official_panorama.py [--write]

What runs, per output, is the official OpenAI-provider path of ``benchmarks/<task>/inference.py``
(``response.content.strip()`` → ``json.loads`` → on ``JSONDecodeError`` the empty answer) followed by
that script's own extraction and scoring functions, and for PAR4PC's macro-F1 the official
``benchmarks/par4pc/evaluation.py:main`` run on a one-row ``evaluation_results.csv`` in the layout
``inference.py`` writes. The LLM client packages the scripts import at module level (langchain_*)
are replaced by empty stand-ins: they are only used to call the model, which is not called here.

Without ``--write`` it prints the JSON; with it, it rewrites ``tests/parity/reference/panorama.json``.
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CORPORA = HERE / "corpora"
REFERENCE = HERE / "reference" / "panorama.json"
KEYS = ("panorama_par4pc", "panorama_par4pc_cot", "panorama_pi4pc", "panorama_pi4pc_cot",
        "panorama_noc4pc", "panorama_noc4pc_cot")
REPO = "LGAI-Research/PANORAMA"


def _stub_llm_clients() -> None:
    """Empty stand-ins for the LLM client modules the official scripts import but scoring never uses."""
    for name, attrs in {"langchain_openai": ["ChatOpenAI"], "langchain_anthropic": ["ChatAnthropic"],
                        "langchain": [], "langchain.schema": ["HumanMessage", "SystemMessage"],
                        "langchain_google_genai": ["ChatGoogleGenerativeAI"]}.items():
        try:
            importlib.import_module(name)
        except ImportError:
            mod = types.ModuleType(name)
            for attr in attrs:
                setattr(mod, attr, type(attr, (), {}))
            sys.modules[name] = mod


def _load(checkout: Path, rel: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(rel.replace("/", "_").removesuffix(".py"), checkout / rel)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _json_or(raw: str, empty: dict[str, Any]) -> Any:
    """The OpenAI branch of the official ``main``: ``json.loads(content.strip())`` or the empty answer."""
    try:
        return json.loads(raw.strip())
    except json.JSONDecodeError:
        return empty


def _par4pc_f1(evaluation: types.ModuleType, row: dict[str, Any]) -> float:
    """Macro-F1 of a one-row results CSV, printed by the official ``evaluation.main``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "evaluation_results.csv"
        with path.open("w", newline="", encoding="utf-8-sig") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(row))
            writer.writeheader()
            writer.writerow(row)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            evaluation.main(str(path))
    m = re.search(r"Macro F1-Score \(Gold\):\s+([0-9.]+)", out.getvalue())
    if not m:
        raise RuntimeError(f"no macro F1 in the official output:\n{out.getvalue()}")
    return float(m.group(1))


def score_par4pc(inference: types.ModuleType, evaluation: types.ModuleType, output: str,
                 item: dict[str, Any]) -> dict[str, Any]:
    """Official PAR4PC per-output scores: exact match, custom score (0-100) and per-item F1 (0-1)."""
    import numpy as np  # noqa: PLC0415 - the official venv's numpy

    gold = inference.process_answer_string(np.array(item["gold_answers"]))
    silver = inference.process_answer_string(np.array(item.get("silver_answers") or [], dtype=str))
    try:
        pred = inference.process_llm_response(_json_or(output, {"answer": []}))
        error = ""
    except Exception as exc:  # noqa: BLE001 - the official retry loop records any failure this way
        pred, error = [], f"LLM call failed (attempt 3/3): {type(exc).__name__}: {exc}"
    custom, max_score = inference.calculate_custom_score(pred, gold, silver)
    row = {"identifier": "x", "gold_answers": inference.format_answer_list_for_csv(np.array(item["gold_answers"])),
           "predicted_answers": ",".join(pred), "is_correct": inference.evaluate_prediction(pred, gold),
           "error": error, "model_score": custom, "max_score": max_score}
    return {"pred": pred, "exact": bool(row["is_correct"]), "custom": float(custom),
            "f1": _par4pc_f1(evaluation, row)}


def score_pi4pc(inference: types.ModuleType, output: str, item: dict[str, Any]) -> dict[str, Any]:
    """Official PI4PC per-output scores: the 0/1/2 paragraph score and its category."""
    try:
        pred = inference.process_llm_response_paragraphs(_json_or(output, {"answer": None}))
    except Exception:  # noqa: BLE001 - a failed call scores as no prediction
        pred = None
    options = [int(k) for k in item["options"]]
    res = inference.calculate_paragraph_score(pred, [int(x) for x in item["gold_answers"]],
                                              [int(x) for x in item.get("silver_answers") or []], options)
    return {"pred": pred, "score": res["score"], "gold_hit": res["category"] == "Gold"}


def score_noc4pc(inference: types.ModuleType, output: str, item: dict[str, Any]) -> dict[str, Any]:
    """Official NOC4PC per-output result: the parsed code, and whether it equals the gold code."""
    answer = item["answer"]
    gold = str(answer.get("code")).strip().upper() if answer.get("code") else None
    try:
        code, _reason = inference.process_llm_response_rejection(_json_or(output, {"code": None, "reason": None}))
    except Exception:  # noqa: BLE001
        code = None
    return {"pred": code, "valid": code is not None,
            "correct": bool(code is not None and inference.evaluate_rejection_prediction(code, gold))}


def compute(checkout: Path) -> dict[str, Any]:
    """Score every corpus of :data:`KEYS` with the official code of ``checkout``."""
    _stub_llm_clients()
    sys.path.insert(0, str(checkout))
    mods = {t: _load(checkout, f"benchmarks/{t}/inference.py") for t in ("par4pc", "pi4pc", "noc4pc")}
    par_eval = _load(checkout, "benchmarks/par4pc/evaluation.py")
    commit = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or os.environ.get("FTAGENT_OFFICIAL_PANORAMA_COMMIT", "")
    result: dict[str, Any] = {
        "repo": REPO, "commit": commit,
        "scorers": {t: f"benchmarks/{t}/inference.py" for t in mods} | {"par4pc_f1": "benchmarks/par4pc/evaluation.py"},
        "how": "tests/parity/official_panorama.py: the OpenAI-provider path of each inference.py main() "
               "(json.loads of the stripped output, else the empty answer) + its process_*/calculate_* "
               "functions; PAR4PC F1 = evaluation.py main() on a one-row results CSV",
        "keys": {},
    }
    for key in KEYS:
        task = key.split("_")[1]
        cases = json.loads((CORPORA / f"{key}.json").read_text(encoding="utf-8"))
        if task == "par4pc":
            scores = [score_par4pc(mods[task], par_eval, c["output"], c["item"]) for c in cases]
        elif task == "pi4pc":
            scores = [score_pi4pc(mods[task], c["output"], c["item"]) for c in cases]
        else:
            scores = [score_noc4pc(mods[task], c["output"], c["item"]) for c in cases]
        result["keys"][key] = scores
    return result


def main() -> int:
    checkout = os.environ.get("FTAGENT_OFFICIAL_PANORAMA")
    if not checkout:
        print("set FTAGENT_OFFICIAL_PANORAMA to a checkout of LGAI-Research/PANORAMA", file=sys.stderr)
        return 2
    with contextlib.redirect_stdout(io.StringIO()):  # the official code prints warnings per item
        data = compute(Path(checkout))
    # tests/parity/harness.py (stdlib only): this script's folder is on sys.path
    from harness import publish_reference

    return publish_reference(REFERENCE, data)


if __name__ == "__main__":
    raise SystemExit(main())
