"""BioProBench (PQA, ORD, ERR, GEN): loader, prompts, ``[ANSWER_START]…[ANSWER_END]`` extraction, metrics.

Data: HF ``bowenxian/BioProBench`` root files ``<TASK>_test.json`` (JSON arrays). Standard library
only; GEN's BLEU and ROUGE-L are implemented in :mod:`.common` (no NLTK/rouge-score downloads).
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Sequence
from typing import Any

from .common import (
    f1_from_counts,
    mean,
    pct,
    read_records,
    rouge_l,
    sentence_bleu,
    strip_think,
    tagged,
    word_punct_tokens,
)

TASKS = ("PQA", "ORD", "ERR", "GEN")
START, END = "[ANSWER_START]", "[ANSWER_END]"


def load_items(root: str, task: str, split: str = "test") -> list[dict[str, Any]]:
    """Items of ``<root>/<TASK>_test.json`` (``split="train"`` → ``<TASK>.json``); ORD items gain
    ``correct_ids`` (index in ``wrong_steps`` of each correct step; ``None`` if missing)."""
    task = task.upper()
    name = f"{task}_test.json" if split == "test" else f"{task}.json"
    items = [dict(r) for r in read_records(os.path.join(root, name))]
    if task == "ORD":
        for item in items:
            pos = {step: i for i, step in enumerate(item["wrong_steps"])}  # a repeated step: last wins
            item["correct_ids"] = [pos.get(step) for step in item["correct_steps"]]
    return items


# ---------------------------------------------------------------- prompts

def build_prompt(task: str, item: dict[str, Any]) -> str:
    """Prompt for one item of ``task`` (PQA, ORD, ERR or GEN)."""
    task = task.upper()
    if task == "PQA":
        return ("Answer the multiple-choice question about a biological protocol: the blank (____) in the "
                "question is to be filled by exactly one option from Choices. Reply in the form "
                f"{START} <chosen option text> & <confidence as an integer 0-100>% {END}.\n"
                f"Question:\n{item['question']}\nChoices:\n{item['choices']!r}")
    if task == "ORD":
        return (f"{item['question']}\nThe steps are:\n{item['wrong_steps']!r}\n"
                "Give the correct order of the steps as a list of their original indices (starting from 0), "
                f"with no other words, as {START}a list of the original indices{END}.")
    if task == "ERR":
        step = item["corrected_text"] if item.get("is_correct") else item.get("corrupted_text")
        return ("Decide whether the target step of this protocol is True (correct) or False (it contains "
                f"an error).\nTarget step: {step}\nContext: {item.get('context')!r}\n"
                f"If anything in the step is wrong, answer False. Reply only {START}True{END} or {START}False{END}.")
    if task == "GEN":
        return (f"{item.get('system_prompt', '')}\n{item.get('instruction', '')}\n"
                f"Put the final steps between {START} and {END}, one step per line.\n{item.get('input', '')}")
    raise KeyError(task)


# ---------------------------------------------------------------- extraction

def extract_pqa(text: str | None) -> tuple[str | None, int | None]:
    """(answer text, confidence 0-100) from the first tag pair, or (None, None)."""
    body = tagged(strip_think(text), START, END, "first")
    if not body:
        return None, None
    if "&" in body:
        parts = body.split("&")
        if len(parts) != 2:
            return None, None
        answer, conf_txt = parts
    else:
        answer, _, conf_txt = body.rpartition(" ")
    m = re.search(r"\d+", conf_txt)
    if not m or int(m.group(0)) > 100 or not answer.strip():
        return None, None
    return answer.strip(), int(m.group(0))


def extract_ord(text: str | None) -> list[int] | None:
    """The index list in the last tag pair (must be a list/tuple of ints), or ``None``."""
    body = tagged(strip_think(text), START, END, "last")
    try:
        value = ast.literal_eval(body) if body else None
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return list(value)
    return None


def extract_err(text: str | None) -> bool | None:
    """True/False from the first tag pair (else the last line); ``None`` when neither word appears."""
    text = strip_think(text)
    if "[/INST]" in text:
        text = text.rsplit("[/INST]", 1)[1]
    body = tagged(text, START, END, "first")
    if body is None:
        lines = [ln for ln in text.strip().splitlines() if ln.strip()]
        body = lines[-1] if lines else ""
    if re.search(r"true", body, re.IGNORECASE):
        return True
    if re.search(r"false", body, re.IGNORECASE):
        return False
    return None


def extract_gen(text: str | None) -> str | None:
    """Generated steps: first tag pair after ``</Structure>`` (if any), stripped; ``None`` if absent."""
    text = strip_think(text)
    if "</Structure>" in text:
        text = text.rsplit("</Structure>", 1)[1]
    return tagged(text, START, END, "first")


# ---------------------------------------------------------------- metrics

def pqa_metrics(predictions: Sequence[str], references: Sequence[str]) -> dict[str, Any]:
    """``accuracy`` (core, exact stripped string equality) and ``brier_score`` (mean of
    (confidence/100 − correct)², 0..1, lower is better) over parsed items; ``failed`` = unparsed."""
    hits, briers, failed = 0, [], 0
    for pred, ref in zip(predictions, references, strict=True):
        answer, conf = extract_pqa(pred)
        if answer is None:
            failed += 1
            continue
        correct = answer == str(ref).strip()
        hits += correct
        briers.append((conf / 100 - correct) ** 2)
    return {"accuracy": pct(hits, len(briers)), "brier_score": mean(briers), "failed": failed}


def ord_metrics(predictions: Sequence[str], references: Sequence[Sequence[int | None]]) -> dict[str, Any]:
    """Over items whose prediction is a permutation of the gold indices (others ``failed``):
    ``exact_match`` (%), ``kendall_tau`` (core; pairs pooled over items, −1..1) and
    ``kendall_tau_item_mean`` (per-item tau averaged)."""
    exact = concordant = total = failed = 0
    per_item = []
    for pred_text, gold in zip(predictions, references, strict=True):
        pred = extract_ord(pred_text)
        gold = list(gold)
        if pred is None or None in gold or len(pred) != len(gold) or set(pred) != set(gold) or len(set(gold)) != len(gold):
            failed += 1
            continue
        exact += pred == gold
        rank = {v: i for i, v in enumerate(pred)}
        c = t = 0
        for i in range(len(gold)):
            for j in range(i + 1, len(gold)):
                t += 1
                c += rank[gold[i]] < rank[gold[j]]
        concordant, total = concordant + c, total + t
        if t:
            per_item.append((2 * c - t) / t)
    valid = len(predictions) - failed
    return {"exact_match": pct(exact, valid), "kendall_tau": (2 * concordant - total) / total if total else 0.0,
            "kendall_tau_item_mean": mean(per_item), "failed": failed}


def err_metrics(predictions: Sequence[str], references: Sequence[bool]) -> dict[str, Any]:
    """Positive class = False (the step has an error). ``accuracy``, ``precision``, ``recall``,
    ``f1`` (core), ×100, over parsed items; ``failed`` = unparsed."""
    tp = fp = fn = correct = failed = 0
    for pred_text, gold in zip(predictions, references, strict=True):
        pred = extract_err(pred_text)
        if pred is None:
            failed += 1
            continue
        gold = bool(gold)
        correct += pred == gold
        tp += (not pred) and (not gold)
        fp += (not pred) and gold
        fn += pred and (not gold)
    p, r, f = f1_from_counts(tp, fp, fn)
    valid = len(predictions) - failed
    return {"accuracy": pct(correct, valid), "precision": 100 * p, "recall": 100 * r, "f1": 100 * f,
            "failed": failed}


def gen_metrics(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> dict[str, Any]:
    """Per item, averaged ×100 over all items (an unparsed answer scores 0): ``ROUGE-L`` (core,
    LCS F1), ``BLEU-4`` (sentence BLEU, uniform weights, smoothing method1) and ``BLEU-2`` (weights
    0.5/0.5: the official/fork ``BLEU``), reference = its steps joined by spaces."""
    rl, b4, b2, failed = [], [], [], 0
    for pred_text, steps in zip(predictions, references, strict=True):
        gen = extract_gen(pred_text)
        ref = " ".join(str(s) for s in steps)
        if gen is None:
            failed += 1
            rl.append(0.0), b4.append(0.0), b2.append(0.0)
            continue
        hyp, ref_tok = word_punct_tokens(gen), word_punct_tokens(ref)
        rl.append(rouge_l(gen, ref))
        b4.append(sentence_bleu(hyp, ref_tok))
        b2.append(sentence_bleu(hyp, ref_tok, weights=(0.5, 0.5)))
    return {"ROUGE-L": 100 * mean(rl), "BLEU-4": 100 * mean(b4), "BLEU-2": 100 * mean(b2), "failed": failed}


METRICS = {"PQA": pqa_metrics, "ORD": ord_metrics, "ERR": err_metrics, "GEN": gen_metrics}


def reference(task: str, item: dict[str, Any]) -> Any:
    """The reference value the metric of ``task`` expects for ``item``."""
    return {"PQA": lambda i: i["answer"], "ORD": lambda i: i["correct_ids"],
            "ERR": lambda i: i["is_correct"], "GEN": lambda i: i["output"]}[task.upper()](item)
