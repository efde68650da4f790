"""Shared helpers of the domain benchmark families: text extraction and text metrics.

Standard library only: these modules are also imported inside OpenCompass's subprocesses in the tool
environment. Optional third-party packages (RDKit) are imported inside the functions that need them.

Conventions of every metric function in this package:

* the result is a ``dict`` of named metrics; rates and F-scores are percentages (0-100) unless the
  name says otherwise (``kendall_tau`` is -1..1, ``brier_score`` is 0..1);
* a metric that cannot be computed on this machine (a missing package or oracle file) is present
  with the value ``None`` and the dict gains ``"status"`` (e.g. ``"oracle unavailable"``) and
  ``"reason"`` strings. A missing oracle never scores 0 silently.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

UNAVAILABLE = "unavailable"
ORACLE_UNAVAILABLE = "oracle unavailable"

_THINK_CLOSE = "</think>"
_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n?(.*?)```", re.DOTALL)


def strip_think(text: str | None) -> str:
    """Drop a reasoning block: everything up to the last ``</think>`` (or a lone ``<think>…`` prefix).

    Args:
        text: Raw model output (``None`` is treated as empty).

    Returns:
        The text after the last ``</think>``, stripped. An unclosed ``<think>`` keeps nothing.
    """
    text = text or ""
    if _THINK_CLOSE in text:
        return text.rsplit(_THINK_CLOSE, 1)[1].strip()
    if text.lstrip().startswith("<think>"):
        return ""
    return text.strip()


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """All Markdown code fences in ``text`` as ``(language, body)`` pairs, in order."""
    return [(m.group(1).lower(), m.group(2)) for m in _FENCE_RE.finditer(text or "")]


def fenced_body(text: str, prefer: str = "json") -> str | None:
    """Body of the first ``prefer``-tagged fence, else of the first fence, else ``None``."""
    blocks = fenced_blocks(text)
    for lang, body in blocks:
        if lang == prefer:
            return body.strip()
    return blocks[0][1].strip() if blocks else None


def _balanced_objects(text: str) -> Iterable[str]:
    """Yield every top-level ``{...}`` substring with balanced braces (string-literal aware)."""
    depth, start, in_str, esc = 0, -1, False, False
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"' and depth > 0:
            in_str = True
        elif ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                yield text[start : i + 1]


def parse_json_object(text: str | None) -> dict[str, Any] | None:
    """Find a JSON object in a model answer.

    Tries, in order: the body of a json fence (else any fence), the whole stripped text, then every
    balanced ``{...}`` substring (so leading/trailing prose is tolerated).

    Args:
        text: Model output, already stripped of reasoning.

    Returns:
        The first object that parses, or ``None`` when there is none (malformed JSON included).
    """
    text = (text or "").strip()
    candidates: list[str] = []
    body = fenced_body(text)
    if body is not None:
        candidates.append(body)
    candidates.append(text)
    for source in list(candidates):
        candidates.extend(_balanced_objects(source))
    for cand in candidates:
        try:
            obj = json.loads(cand)
        except (ValueError, TypeError):
            continue
        if isinstance(obj, dict):
            return obj
    return None


def tagged(text: str | None, start: str, end: str, which: str = "first") -> str | None:
    """Content between ``start`` and ``end`` tags (``which`` = ``"first"`` or ``"last"`` pair)."""
    pattern = re.compile(re.escape(start) + r"(.*?)" + re.escape(end), re.DOTALL)
    found = pattern.findall(text or "")
    if not found:
        return None
    return (found[0] if which == "first" else found[-1]).strip()


def first_int(text: str | None) -> int | None:
    """First (optionally signed) integer in ``text``."""
    m = re.search(r"-?\d+", text or "")
    return int(m.group(0)) if m else None


def pct(num: float, den: float) -> float:
    """``100 * num / den`` (0.0 when ``den`` is 0)."""
    return 100.0 * num / den if den else 0.0


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean (0.0 for an empty sequence)."""
    return sum(values) / len(values) if values else 0.0


# ---------------------------------------------------------------- token metrics (ROUGE-L, BLEU)

def simple_tokens(text: str) -> list[str]:
    """Lower-cased alphanumeric tokens (ROUGE-style: other characters separate tokens)."""
    return re.findall(r"[a-z0-9]+", (text or "").lower())


def word_punct_tokens(text: str) -> list[str]:
    """Lower-cased words and single punctuation marks (a stdlib stand-in for NLTK word_tokenize)."""
    return re.findall(r"\w+|[^\w\s]", (text or "").lower())


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence of two token sequences (O(len(a)·len(b)))."""
    if len(a) < len(b):
        a, b = b, a
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b, 1):
            cur.append(prev[j - 1] + 1 if x == y else max(prev[j], cur[j - 1]))
        prev = cur
    return prev[-1]


def rouge_l(prediction: str, reference: str) -> float:
    """ROUGE-L F1 (LCS-based, beta = 1) between two texts on :func:`simple_tokens`, in 0..1."""
    p_tok, r_tok = simple_tokens(prediction), simple_tokens(reference)
    if not p_tok or not r_tok:
        return 0.0
    lcs = lcs_length(p_tok, r_tok)
    if lcs == 0:
        return 0.0
    precision, recall = lcs / len(p_tok), lcs / len(r_tok)
    return 2 * precision * recall / (precision + recall)


def _ngrams(tokens: Sequence[str], n: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def sentence_bleu(hypothesis: Sequence[str], reference: Sequence[str],
                  weights: Sequence[float] = (0.25, 0.25, 0.25, 0.25), epsilon: float = 0.1) -> float:
    """Sentence BLEU with one reference and NLTK-style smoothing "method1", in 0..1.

    Modified n-gram precision p_n = clipped matches / max(1, hypothesis n-grams); a zero numerator
    is replaced by ``epsilon`` (method1). No unigram match gives 0. Brevity penalty
    ``exp(1 - r/c)`` when the hypothesis is shorter than the reference.
    """
    if not hypothesis or not reference:
        return 0.0
    log_sum = 0.0
    for n, w in enumerate(weights, 1):
        hyp, ref = _ngrams(hypothesis, n), _ngrams(reference, n)
        matches = sum(min(c, ref[g]) for g, c in hyp.items())
        total = max(1, sum(hyp.values()))
        if matches == 0:
            if n == 1:
                return 0.0
            p_n = epsilon / total
        else:
            p_n = matches / total
        log_sum += w * math.log(p_n)
    c, r = len(hypothesis), len(reference)
    bp = 1.0 if c > r else math.exp(1 - r / c)
    return bp * math.exp(log_sum)


# ---------------------------------------------------------------- classification helpers

def f1_from_counts(tp: float, fp: float, fn: float) -> tuple[float, float, float]:
    """(precision, recall, F1) in 0..1 from counts; 0 where a denominator is 0."""
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return p, r, f


def macro_f1(golds: Sequence[str], preds: Sequence[str | None], labels: Iterable[str]) -> float:
    """Macro F1 (0..1) over ``labels`` (sklearn semantics, zero_division=0).

    A ``None`` prediction matches no label: it is a false negative for its gold class only.
    """
    scores = []
    for lab in labels:
        tp = sum(1 for g, p in zip(golds, preds, strict=True) if g == lab and p == lab)
        fp = sum(1 for g, p in zip(golds, preds, strict=True) if g != lab and p == lab)
        fn = sum(1 for g, p in zip(golds, preds, strict=True) if g == lab and p != lab)
        scores.append(f1_from_counts(tp, fp, fn)[2])
    return mean(scores)


def unavailable(metrics: dict[str, Any], reason: str, status: str = UNAVAILABLE) -> dict[str, Any]:
    """Mark a metrics dict as not computable here: adds ``status`` and ``reason``."""
    out = dict(metrics)
    out["status"] = status
    out["reason"] = reason
    return out


def as_obj(value: Any) -> Any:
    """Decode a JSON-encoded string column (PANORAMA parquet) and convert numpy values to lists."""
    if isinstance(value, str):
        s = value.strip()
        if s[:1] in "[{":
            try:
                return as_obj(json.loads(s))
            except ValueError:
                return value
        return value
    if hasattr(value, "tolist"):
        return as_obj(value.tolist())
    if isinstance(value, dict):
        return {k: as_obj(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_obj(v) for v in value]
    return value


# ---------------------------------------------------------------- file readers

def read_records(path: Any) -> list[dict[str, Any]]:
    """Rows of a ``.json`` (array or JSON Lines), ``.jsonl`` or ``.parquet`` file as dicts.

    Parquet needs ``pyarrow`` (imported here only); nested columns arrive as plain lists/dicts.

    Raises:
        RuntimeError: a parquet file is given and pyarrow is not importable.
    """
    name = str(path)
    if name.endswith(".parquet"):
        try:
            import pyarrow.parquet as pq  # noqa: PLC0415 - optional
        except ImportError as exc:  # pragma: no cover - depends on the env
            raise RuntimeError(f"reading {name} needs pyarrow: {exc}") from exc
        return list(pq.read_table(name).to_pylist())
    with open(name, encoding="utf-8") as fh:
        text = fh.read()
    stripped = text.lstrip()
    if stripped.startswith("["):
        return list(json.loads(stripped))
    return [json.loads(line) for line in text.splitlines() if line.strip()]
