"""BioProBench (PQA, ORD, ERR, GEN): loader, prompts, ``[ANSWER_START]…[ANSWER_END]`` extraction, metrics.

Data: HF ``bowenxian/BioProBench`` root files ``<TASK>_test.json`` (JSON arrays). Prompts, extraction
and metrics follow the official code (YuyangSunshine/bioprotocolbench ``Scripts/prompt_format.py``,
``Metrics/*.py`` @ b6f36cb). Standard library, plus ``rouge_score``/NLTK for GEN when importable (the
tool env has both; without them GEN is scored by stdlib stand-ins with ``status="degraded"``).
"""

from __future__ import annotations

import ast
import functools
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
    unavailable,
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
    """Prompt for one item of ``task`` (PQA, ORD, ERR or GEN): the official ``generate_user_prompt``
    wording (YuyangSunshine/bioprotocolbench ``Scripts/prompt_format.py`` @ b6f36cb); lists and the
    ERR context are rendered as Python reprs, as there."""
    task = task.upper()
    if task == "PQA":
        return ("\nYou will be given a multiple-choice question related to a biological protocol. The blank in "
                "the question (represented as '____') indicates where the correct choice should be filled in.\n\n"
                f"Question:\n{item['question']}\n\nChoices:\n{item['choices']}\n\n"
                "Your task:\n- Choose the most likely correct answer from the given choices.\n"
                "- You must always select *one* answer, even if you are unsure.\n"
                "- The selected answer must match one of the choices exactly (including case and punctuation).\n"
                "- Assign a confidence score between 0 and 100 based on your certainty.\n"
                f"- Output your answer *wrapped exactly* between the tags {START} and {END}.\n"
                f"- The format of your response must be:\n{START}your selected choice & your confidence score{END}\n")
    if task == "ORD":
        return (f"\n{item['question']}\nThe steps are:\n{item['wrong_steps']}\n\n"
                "- Give me the correct order of the steps as a list of their original indices (start from 0), "
                "no other words.\n"
                f"- Output your answer *wrapped exactly* between the tags {START} and {END}.\n"
                f"- The format of your response must be:\n{START}a list of the original indices{END}\n")
    if task == "ERR":
        step = item["corrected_text"] if item.get("is_correct") else item.get("corrupted_text")
        return ("Determine whether the following target step in a protocol is True or False:\n"
                f"{step}\n\nYou may use the following context, which includes the purpose of the step, as well "
                "as the preceding and following steps, to inform your decision:\n"
                f"{item.get('context')}\n\nPlease carefully evaluate if the step is logically consistent, "
                "necessary, and accurate in the context. If you find anything wrong, answer False.\n\n"
                "- Please respond with only True or False, without any additional explanation.\n"
                f"- Output your answer *wrapped exactly* between the tags {START} and {END}.\n"
                f"- The format of your response must be:\n{START}True or False{END}\n")
    if task == "GEN":
        return (f"{item.get('system_prompt', '')}\n{item.get('instruction', '')}\n"
                f"Format requirements:\n- Each step must be on a separate line.\n\n{item.get('input', '')}")
    raise KeyError(task)


# ---------------------------------------------------------------- extraction

def extract_pqa(text: str | None) -> tuple[str | None, int | None]:
    """(answer text, confidence 0-100) from the first tag pair, or (None, None) (official ``Metrics/PQA.py``)."""
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
    if not m or int(m.group(0)) > 100:
        return None, None
    return answer.strip(), int(m.group(0))  # an empty answer is a wrong one (officially), not a failure


def extract_ord(text: str | None) -> list[int] | None:
    """The index list in the last tag pair (must be a list/tuple of ints), or ``None``."""
    body = tagged(strip_think(text), START, END, "last")
    try:
        value = ast.literal_eval(body) if body else None
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
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
    # as the official Metrics/ERR.py: "True"/"true" first, then "False"/"false" ("TRUE" is no answer)
    if "True" in body or "true" in body:
        return True
    if "False" in body or "false" in body:
        return False
    return None


def extract_gen(text: str | None) -> str | None:
    """Generated steps as the official ``extract_text_response``: after ``</Structure>``, after the
    last ``[ANSWER_START]`` and before the next ``[ANSWER_END]``; untagged text is the answer itself.
    ``None`` only for no output at all (or an unclosed reasoning block)."""
    if text is None:
        return None
    text = strip_think(text).split("</Structure>")[-1].strip()
    return text.split(START)[-1].strip().split(END)[0].strip()


# ---------------------------------------------------------------- metrics

def pqa_metrics(predictions: Sequence[str], references: Sequence[str]) -> dict[str, Any]:
    """``accuracy`` (core, exact stripped string equality) and ``brier_score`` (mean of
    (confidence/100 − correct)², 0..1, lower is better) over parsed items; ``failed`` = unparsed."""
    hits, briers, failed = 0, [], 0
    for pred, ref in zip(predictions, references, strict=True):
        answer, conf = extract_pqa(pred)
        if answer is None or conf is None:  # both or neither (extract_pqa)
            failed += 1
            continue
        correct = answer == str(ref).strip()
        hits += correct
        briers.append((conf / 100 - correct) ** 2)
    return {"accuracy": pct(hits, len(briers)), "brier_score": mean(briers), "failed": failed}


def _ord_steps(reference: Any) -> tuple[list[Any], list[Any]] | None:
    """(wrong_steps, correct_steps) of an ORD reference: the item's two step lists, or gold indices
    (index ``i`` standing for step ``i``); ``None`` when a gold index is missing."""
    if isinstance(reference, dict):
        return list(reference["wrong_steps"]), list(reference["correct_steps"])
    gold = list(reference)
    return (None if None in gold else (list(range(len(gold))), gold))


def _ord_pairs(pred_steps: Sequence[Any], gold_steps: Sequence[Any]) -> tuple[int, int]:
    """(concordant, total) step pairs as the official ``calculate_kendall_tau`` (ties are discordant)."""
    gold_rank = {step: i for i, step in enumerate(gold_steps)}
    pred_rank = {step: i for i, step in enumerate(pred_steps)}
    keys, c, t = list(gold_rank), 0, 0
    for i in range(len(keys)):
        for j in range(i + 1, len(keys)):
            a, b = keys[i], keys[j]
            t += 1
            c += (gold_rank[a] - gold_rank[b]) * (pred_rank[a] - pred_rank[b]) > 0
    return c, t


def ord_metrics(predictions: Sequence[str], references: Sequence[Any]) -> dict[str, Any]:
    """As the official ``Metrics/ORD.py``: a prediction is valid when its indices are exactly the set
    ``0..n-1``; the predicted order of step texts is compared with ``correct_steps``. Over valid
    items: ``exact_match`` (%), ``kendall_tau`` (core; pairs pooled over items, −1..1) and
    ``kendall_tau_item_mean``; others are ``failed``."""
    exact = concordant = total = failed = 0
    per_item = []
    for pred_text, ref in zip(predictions, references, strict=True):
        pred, steps = extract_ord(pred_text), _ord_steps(ref)
        if pred is None or steps is None or set(pred) != set(range(len(steps[1]))):
            failed += 1
            continue
        wrong, gold = steps
        pred_steps = [wrong[i] for i in pred]
        exact += pred_steps == gold
        c, t = _ord_pairs(pred_steps, gold)
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


@functools.lru_cache(maxsize=1)
def _rouge_scorer() -> Any:
    """``rouge_score``'s ROUGE-L scorer with the Porter stemmer (the official GEN scorer), or ``None``."""
    try:
        from rouge_score import rouge_scorer  # noqa: PLC0415 - optional (in the tool env)
    except ImportError:
        return None
    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)


def _nltk_tokens(text: str) -> list[str] | None:
    """NLTK ``word_tokenize`` of the lower-cased text (one line when the punkt model is not
    installed); ``None`` without NLTK."""
    try:
        import nltk  # noqa: PLC0415 - optional (in the tool env)
    except ImportError:
        return None
    try:
        return nltk.word_tokenize(text.lower())
    except LookupError:  # punkt is a separate download: tokenise without sentence splitting
        return nltk.word_tokenize(text.lower(), preserve_line=True)


def _bleu2(gen: str, ref: str) -> float:
    """Official BLEU: NLTK sentence BLEU, weights (0.5, 0.5), smoothing method1 (stdlib fallback)."""
    hyp, ref_tok = _nltk_tokens(gen), _nltk_tokens(ref)
    if hyp is None or ref_tok is None:
        return sentence_bleu(word_punct_tokens(gen), word_punct_tokens(ref), weights=(0.5, 0.5))
    from nltk.translate.bleu_score import SmoothingFunction  # noqa: PLC0415
    from nltk.translate.bleu_score import sentence_bleu as nltk_bleu  # noqa: PLC0415

    return float(nltk_bleu([ref_tok], hyp, weights=(0.5, 0.5), smoothing_function=SmoothingFunction().method1))


def gen_metrics(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> dict[str, Any]:
    """Per item, averaged ×100 over all items (no output scores 0): ``ROUGE-L`` (core; F-measure of
    ``rouge_score`` with the Porter stemmer, as the official ``Metrics/GEN.py``), ``BLEU-2`` (the
    official ``BLEU``: NLTK sentence BLEU, weights 0.5/0.5, smoothing method1) and ``BLEU-4``
    (uniform weights, stdlib), reference = its steps joined by spaces. Without ``rouge_score``/NLTK
    the stdlib stand-ins are used and ``status="degraded"`` says so."""
    scorer = _rouge_scorer()
    rl: list[float] = []
    b4: list[float] = []
    b2: list[float] = []
    failed = 0
    for pred_text, steps in zip(predictions, references, strict=True):
        gen = extract_gen(pred_text)
        ref = " ".join(str(s) for s in steps)
        if gen is None:
            failed += 1
            rl.append(0.0)
            b4.append(0.0)
            b2.append(0.0)
            continue
        rl.append(scorer.score(ref, gen)["rougeL"].fmeasure if scorer else rouge_l(gen, ref))
        b4.append(sentence_bleu(word_punct_tokens(gen), word_punct_tokens(ref)))
        b2.append(_bleu2(gen, ref))
    out = {"ROUGE-L": 100 * mean(rl), "BLEU-4": 100 * mean(b4), "BLEU-2": 100 * mean(b2), "failed": failed}
    if scorer is None or _nltk_tokens("a") is None:
        out = unavailable(out, "rouge_score/nltk not installed: stdlib ROUGE-L (no stemming) and BLEU", "degraded")
    return out


METRICS = {"PQA": pqa_metrics, "ORD": ord_metrics, "ERR": err_metrics, "GEN": gen_metrics}


def reference(task: str, item: dict[str, Any]) -> Any:
    """The reference value the metric of ``task`` expects for ``item``."""
    return {"PQA": lambda i: i["answer"],
            "ORD": lambda i: {"wrong_steps": i["wrong_steps"], "correct_steps": i["correct_steps"]},
            "ERR": lambda i: i["is_correct"], "GEN": lambda i: i["output"]}[task.upper()](item)
