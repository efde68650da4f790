"""PANORAMA (PAR4PC, PI4PC, NOC4PC): loader, prompts, answer extraction and metrics.

Data: HF ``LG-AI-Research/PANORAMA``, one folder per task (``PAR4PC/test.parquet`` …). PI4PC/NOC4PC
store ``context``, ``prior_art_specification(s)``, ``options`` and ``answer`` as JSON strings; the
loader decodes them. Standard library only (pyarrow only when a parquet file is read).

Metric names: the official definitions carry the plain names (``macro_f1`` = mean of per-item F1
for PAR4PC); the reference fork's numbers are reported beside them under honest names
(``micro_f1`` = the fork's pooled "macro_f1"). See docs/benchmarks-domain.md.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from typing import Any

from .common import (
    as_obj,
    f1_from_counts,
    macro_f1,
    mean,
    parse_json_object,
    pct,
    read_records,
    strip_think,
)

TASKS = ("par4pc", "pi4pc", "noc4pc")
LETTERS = "ABCDEFGH"
NOC_CODES = ("ALLOW", "102", "103")
_JSON_COLUMNS = ("context", "options", "prior_art_specification", "prior_art_specifications", "answer",
                 "gold_answers", "silver_answers", "negative_answers")


# ---------------------------------------------------------------- loader

def load_items(root: str, task: str, split: str = "test") -> list[dict[str, Any]]:
    """Read ``<root>/<TASK>/<split>.{parquet,jsonl,json}`` into item dicts (published fields).

    JSON-string columns are decoded; each item gains ``identifier`` =
    ``<task>_app<application_number>_claim<claim_number>``.
    """
    folder = os.path.join(root, task.upper())
    for ext in ("parquet", "jsonl", "json"):
        path = os.path.join(folder, f"{split}.{ext}")
        if os.path.exists(path):
            break
    else:
        raise FileNotFoundError(f"no {split}.parquet/.jsonl/.json under {folder}")
    items = []
    for row in read_records(path):
        item = {k: (as_obj(v) if k in _JSON_COLUMNS else v) for k, v in row.items()}
        item["identifier"] = f"{task}_app{item.get('application_number')}_claim{item.get('claim_number')}"
        items.append(item)
    return items


# ---------------------------------------------------------------- prompts

def _claims_json(claims: Any) -> str:
    return json.dumps(as_obj(claims) or [], indent=2, ensure_ascii=False)


def _claim_text(context: dict[str, Any], number: int) -> str:
    claims = context.get("claims") or []
    if isinstance(claims, dict):
        return str(claims.get(str(number), claims.get(number, "")))
    return str(claims[number - 1]) if 0 < number <= len(claims) else ""


def _par4pc_prompt(item: dict[str, Any], cot: bool) -> str:
    ctx, n = as_obj(item["context"]), item["claim_number"]
    lines = [
        "You are a patent examination expert. Using only the application and the candidate patents "
        "below, decide which candidate patents an examiner cited to reject the target claim.",
        f"Application number: {item.get('application_number')}",
        f"Title: {ctx.get('title', '')}", f"Abstract: {ctx.get('abstract', '')}",
        f"Claims:\n{_claims_json(ctx.get('claims'))}", f"Target claim: Claim {n}", "", "Candidate patents:",
    ]
    for letter, opt in sorted(as_obj(item["options"]).items()):
        lines += [f"({letter}) Patent ID: {opt.get('patent_id', '')}", f"Title: {opt.get('title', '')}",
                  f"Abstract: {opt.get('abstract', '')}", f"Claims:\n{_claims_json(opt.get('claims'))}", ""]
    if cot:
        lines.append("Work like an examiner under the broadest reasonable interpretation: chart the claim's "
                     "limitations, screen each candidate as a single anticipating reference, then consider "
                     "combinations, and check your choice for consistency. Reply with JSON only, reason "
                     'first (at most 200 words): {"reason": "...", "answer": ["A", "C"]}')
    else:
        lines.append('Which candidate patents (A-H) were cited? Reply with JSON only, e.g. {"answer": "A"} '
                     'or {"answer": ["A", "C", "F"]}.')
    return "\n".join(lines)


def _pi4pc_prompt(item: dict[str, Any], cot: bool) -> str:
    ctx, n = as_obj(item["context"]), item["claim_number"]
    spec = as_obj(item["prior_art_specification"])
    options = as_obj(item["options"])
    lines = [
        "You are a patent examiner. Pick the one paragraph of the prior-art specification that was "
        f"cited to reject Claim {n} of application {item.get('application_number')}.",
        f"Application title: {ctx.get('title', '')}", f"Application abstract: {ctx.get('abstract', '')}",
        f"Claim {n}: {_claim_text(ctx, n)}", "",
        f"Prior art patent ID: {spec.get('patent_id', '')}", f"Prior art title: {spec.get('title', '')}",
        f"Prior art abstract: {spec.get('abstract', '')}",
        f"Prior art specification:\n{spec.get('specification', '')}", "", "Options:",
    ]
    lines += [f"{k}: {options[k]}" for k in sorted(options, key=lambda k: int(k))]
    lines.append("Choose exactly one option key (an integer).")
    if cot:
        lines.append('Reason step by step (at most 1000 words), then reply with JSON only: '
                     '{"reason": "...", "answer": 17}')
    else:
        lines.append('Reply with JSON only: {"answer": 17}')
    return "\n".join(lines)


def _noc4pc_prompt(item: dict[str, Any], cot: bool) -> str:
    ctx, n = as_obj(item["context"]), item["claim_number"]
    lines = [
        f"You are a U.S. patent examiner. Decide whether Claim {n} is allowable or rejected as anticipated "
        "(35 U.S.C. 102) or obvious (35 U.S.C. 103) over the prior art below.",
        f"Application title: {ctx.get('title', '')}", f"Application abstract: {ctx.get('abstract', '')}",
        f"Claim {n}:\n```\n{_claim_text(ctx, n)}\n```",
    ]
    for i, art in enumerate(as_obj(item.get("prior_art_specifications")) or [], 1):
        lines += [f"--- Prior art #{i} ---", f"Patent ID: {art.get('patent_id', '')}",
                  f"Title: {art.get('title', '')}", f"Abstract: {art.get('abstract', '')}", "Claims:"]
        lines += [str(c) for c in art.get("claims") or []]
        lines.append("Cited paragraphs:")
        lines += [f"[{p.get('key')}]: {p.get('content', '')}" for p in art.get("paragraphs") or []]
    lines.append("Answer with one code: ALLOW (no reference anticipates or renders the claim obvious), "
                 "102 (one reference discloses every limitation), 103 (obvious over one or more references).")
    if cot:
        lines.append(f'Reply with JSON only; the reason starts "Regarding Claim {n}," (at most 200 words): '
                     '{"reason": "...", "code": "103"}')
    else:
        lines.append('Reply with JSON only: {"code": "102"}')
    return "\n".join(lines)


def build_prompt(task: str, item: dict[str, Any], cot: bool = False) -> str:
    """Prompt text for one item of ``task`` (``par4pc``, ``pi4pc`` or ``noc4pc``)."""
    builders = {"par4pc": _par4pc_prompt, "pi4pc": _pi4pc_prompt, "noc4pc": _noc4pc_prompt}
    return builders[task](item, cot)


# ---------------------------------------------------------------- extraction

def _letters(value: Any) -> list[str] | None:
    """Letters A-H of a JSON ``answer`` value, as the official ``process_llm_response`` reads it.

    A string is split on commas and whitespace and only single-letter tokens count (so ``"A, C"`` and
    ``"A C"`` give A and C, while ``"A/C"``, ``"(A)"`` or ``"A."`` give none); a list keeps its
    single-letter string items. Case-insensitive; sorted and unique; ``None`` when nothing is left.
    """
    if isinstance(value, str):
        found = [t for t in re.split(r"[,\s]+", value.upper()) if len(t) == 1 and t in LETTERS]
    elif isinstance(value, list):
        found = [v.strip().upper() for v in value if isinstance(v, str) and len(v.strip()) == 1
                 and v.strip().upper() in LETTERS]
    else:
        return None
    return sorted(set(found)) or None


def extract_par4pc(text: str | None, fork_fallback: bool = False) -> list[str] | None:
    """Letters A-H chosen in a PAR4PC answer (sorted, unique) or ``None`` when unparseable.

    ``fork_fallback`` adds the reference fork's last resort (every standalone letter in the text).
    """
    text = strip_think(text)
    obj = parse_json_object(text)
    if obj is not None and "answer" in obj:
        return _letters(obj["answer"])
    m = re.search(r'"answer"\s*:\s*(\[[^\]]*\]|"[^"]*")', text)
    if m:
        return _letters(m.group(1).strip('"') if m.group(1).startswith('"') else re.findall(r'"([^"]*)"', m.group(1)))
    if fork_fallback:  # the reference fork's last resort: every standalone letter in the text
        return sorted({f.upper() for f in re.findall(r"\b([A-Ha-h])\b", text)}) or None
    return None


def _int_answer(value: Any) -> int | None:
    """``int(value)`` as the official ``process_llm_response_paragraphs`` takes it (9.0 → 9), else ``None``."""
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def extract_pi4pc(text: str | None, fork_fallback: bool = False) -> int | None:
    """The paragraph key chosen in a PI4PC answer, or ``None``.

    The JSON ``answer`` converted with ``int()`` like the official script; when the JSON is cut off,
    an ``"answer": 17`` whose number is followed by a delimiter (so it cannot be a cut-off prefix of
    a longer key); the first integer in the text only with ``fork_fallback``.
    """
    text = strip_think(text)
    obj = parse_json_object(text)
    if obj is not None and "answer" in obj:
        return _int_answer(obj["answer"])
    m = re.search(r'"answer"\s*:\s*"?(-?\d+)(?=["\s,}])', text)
    if m:
        return int(m.group(1))
    if fork_fallback:
        m = re.search(r"-?\d+", text)
        return int(m.group(0)) if m else None
    return None


def extract_noc4pc(text: str | None, fork_fallback: bool = False) -> str | None:
    """``ALLOW``, ``102`` or ``103`` from a NOC4PC answer, or ``None``."""
    text = strip_think(text)
    obj = parse_json_object(text)
    if obj is not None and "code" in obj:
        code = str(obj["code"]).strip().upper()
        return code if code in NOC_CODES else None
    # a cut-off JSON object whose "code" value is complete (closing quote): the lower-case key the
    # prompt asks for, as the official parser reads only "code" ("Code" scores nothing there either)
    m = re.search(r"""["']code["']\s*:\s*["']((?i:allow)|102|103)["']""", text)
    if m:
        return m.group(1).upper()
    if fork_fallback:
        upper = text.upper()
        return next((c for c in NOC_CODES if c in upper), None)
    return None


# ---------------------------------------------------------------- metrics

def _answer_sets(ref: Any) -> tuple[set, set]:
    """(gold, silver) from a reference that is an item/dict or a bare gold list."""
    if isinstance(ref, dict):
        gold = as_obj(ref.get("gold_answers")) or []
        silver = as_obj(ref.get("silver_answers")) or []
    else:
        gold, silver = as_obj(ref) or [], []
    return set(gold if isinstance(gold, list) else [gold]), set(silver if isinstance(silver, list) else [silver])


def par4pc_metrics(predictions: Sequence[str], references: Sequence[Any],
                   fork_fallback: bool = False) -> dict[str, Any]:
    """PAR4PC scores. ``references``: items (gold/silver/negative answers) or bare gold lists.

    * ``macro_f1`` (official, core): mean over items of the per-item F1, silver predictions count
      as false positives; unparseable answers score 0.
    * ``micro_f1``/``precision``/``recall``: TP/FP/FN pooled over items (the fork's "macro_f1").
    * ``custom_score``: mean of max(0, (2TP - FP - FN) / (2|gold|)), silver neither rewarded nor
      penalised (FP = |pred - gold - silver|).
    * ``exact_match``: % items whose predicted set equals the gold set.
    """
    per_item_f1, customs, exact = [], [], 0
    tp_sum = fp_sum = fn_sum = 0
    unparseable = 0
    for text, ref in zip(predictions, references, strict=True):
        pred_list = extract_par4pc(text, fork_fallback)
        unparseable += pred_list is None
        pred = set(pred_list or [])
        gold, silver = _answer_sets(ref)
        tp, fp, fn = len(pred & gold), len(pred - gold), len(gold - pred)
        tp_sum, fp_sum, fn_sum = tp_sum + tp, fp_sum + fp, fn_sum + fn
        per_item_f1.append(1.0 if not gold and not pred else f1_from_counts(tp, fp, fn)[2])
        fp_custom = len(pred - gold - silver)
        if gold:
            customs.append(max(0.0, (2 * tp - fp_custom - fn) / (2 * len(gold))))
        else:
            customs.append(1.0 if not pred else 0.0)
        exact += pred == gold
    p, r, f = f1_from_counts(tp_sum, fp_sum, fn_sum)
    n = len(per_item_f1)
    return {"macro_f1": 100 * mean(per_item_f1), "micro_f1": 100 * f, "precision": 100 * p,
            "recall": 100 * r, "custom_score": 100 * mean(customs), "exact_match": pct(exact, n),
            "unparseable": unparseable, "total_count": n}


def pi4pc_metrics(predictions: Sequence[str], references: Sequence[Any],
                  fork_fallback: bool = False) -> dict[str, Any]:
    """PI4PC scores: ``gold_hit_rate`` (core, % predicted key in gold), ``accuracy`` (gold or silver),
    ``custom_score`` = (2·gold hits + silver hits) / (2N) ×100, ``valid_count``."""
    gold_hits = silver_hits = valid = 0
    for text, ref in zip(predictions, references, strict=True):
        pred = extract_pi4pc(text, fork_fallback)
        if pred is None:
            continue
        valid += 1
        gold, silver = _answer_sets(ref)
        gold, silver = {int(g) for g in gold}, {int(s) for s in silver}
        if pred in gold:
            gold_hits += 1
        elif pred in silver:
            silver_hits += 1
    n = len(predictions)
    return {"gold_hit_rate": pct(gold_hits, n), "accuracy": pct(gold_hits + silver_hits, n),
            "custom_score": pct(2 * gold_hits + silver_hits, 2 * n), "valid_count": valid, "total_count": n}


def _noc_gold(ref: Any) -> str:
    if isinstance(ref, dict):
        ans = as_obj(ref.get("answer", ref))
        ref = ans.get("code") if isinstance(ans, dict) else ans
    return str(ref or "").strip().upper()


def noc4pc_metrics(predictions: Sequence[str], references: Sequence[Any],
                   fork_fallback: bool = False) -> dict[str, Any]:
    """NOC4PC scores. ``references``: items (``answer`` = {reason, code}) or bare codes.

    * ``macro_f1`` (core) / ``accuracy``: over all items; an unparseable answer is wrong (a false
      negative of its gold class). Labels: ALLOW, 102, 103 plus any other gold label seen.
    * ``macro_f1_valid_only`` / ``accuracy_valid_only``: the fork's way (unparseable items dropped).
    """
    golds = [_noc_gold(r) for r in references]
    preds = [extract_noc4pc(t, fork_fallback) for t in predictions]
    labels = sorted(set(NOC_CODES) | {g for g in golds if g})
    kept = [(g, p) for g, p in zip(golds, preds, strict=True) if g and p is not None]
    kg, kp = [g for g, _ in kept], [p for _, p in kept]
    n = len(golds)
    return {
        "macro_f1": 100 * macro_f1(golds, preds, labels),
        "accuracy": pct(sum(g == p for g, p in zip(golds, preds, strict=True)), n),
        "macro_f1_valid_only": 100 * macro_f1(kg, kp, NOC_CODES) if kept else 0.0,
        "accuracy_valid_only": pct(sum(g == p for g, p in kept), len(kept)),
        "valid_count": len(kept), "total_count": n,
    }


METRICS = {"par4pc": par4pc_metrics, "pi4pc": pi4pc_metrics, "noc4pc": noc4pc_metrics}
