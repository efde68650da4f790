"""The make-up of a raw user file, for the planner: templates with counts, stratified samples, anomalies.

Issue 35: the planner saw 2 rows of a 3,030-row file that mixed three kinds of question and 150 junk
rows; it never learnt the file held distractors. :func:`profile_rows` groups the rows by their
instruction *template* -- the text with every number replaced by ``N`` and whitespace collapsed, so
"What is 12 times 5?" and "What is 87 times 5?" are one template ``What is N times 5?`` -- and counts
the anomalies a data script must handle (empty, duplicate, non-text rows). A free-text file (nearly
every row its own template) is grouped by the template's first words instead, so the view still shows
a few large groups rather than thousands of singletons.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from pydantic import BaseModel, Field

NUMBER_PATTERN = r"[-+]?\d+(?:[.,]\d+)*"  # a number as rows write it; the heuristic planner's data step uses it too
_NUMBER = re.compile(NUMBER_PATTERN)
_SPACE = re.compile(r"\s+")
TOP_TEMPLATES = 8
MIN_SAMPLES = 5  # one sample per group; more per group when there are fewer groups than this
FREE_TEXT_SHARE = 0.5  # more distinct templates than this share of the rows: group by the first words
PREFIX_WORDS = 4


PLACEHOLDERS = "NMKPQRST"  # the 1st, 2nd, ... varying number of a text: "Adding 11 to N gives M." (not "N … N")


def _placeholder(i: int) -> str:
    return PLACEHOLDERS[i] if i < len(PLACEHOLDERS) else "N"


def _number_placeholders(text: str) -> str:
    count = iter(range(10_000))
    return _NUMBER.sub(lambda _m: _placeholder(next(count)), text)


def template_of(text: str, words: int | None = None) -> str:
    """``text`` with its numbers as ``N``, ``M``, ``K``… in order, whitespace collapsed (and cut to
    ``words`` words when given)."""
    out = _SPACE.sub(" ", _number_placeholders(text)).strip()
    if words is not None:
        parts = out.split(" ")
        out = " ".join(parts[:words]) + (" …" if len(parts) > words else "")
    return out[:120]


class Group(BaseModel):
    """Rows sharing one instruction template."""

    template: str
    rows: int
    answer_templates: dict[str, int] = Field(default_factory=dict)  # the most common answer shapes
    samples: list[dict[str, Any]] = Field(default_factory=list)  # stratified: the first rows of the group


class Makeup(BaseModel):
    """What a user file holds (``FTAGENT_NOTES.md`` shows it; the planner reads it)."""

    rows: int
    usable: int  # rows with a non-empty text instruction and output (duplicates included)
    grouped_by: str = "template"  # or "first words" for free text
    distinct_templates: int = 0
    groups: list[Group] = Field(default_factory=list)  # largest first, at most TOP_TEMPLATES
    empty_instruction: int = 0
    empty_output: int = 0
    non_text: int = 0  # instruction or output not a string (a number, a list, null ...)
    duplicates: int = 0  # rows equal to an earlier row (instruction, input, output)
    anomaly_examples: list[dict[str, Any]] = Field(default_factory=list)

    def anomalies(self) -> int:
        return self.empty_instruction + self.empty_output + self.non_text + self.duplicates

    def to_markdown(self) -> str:
        """The planner's view: groups with counts, one sample per group, the anomaly counts."""
        lines = [f"Make-up of the file ({self.rows:,} rows, {self.usable:,} with a text instruction and answer; "
                 f"{self.distinct_templates:,} distinct instruction {self.grouped_by}s, numbers that vary shown as N, M, K… in order):"]
        shown = 0
        for g in self.groups:
            shown += g.rows
            answers = "; ".join(f"{json.dumps(t, ensure_ascii=False)} ×{n}" for t, n in g.answer_templates.items())
            lines.append(f"- {g.rows:,} rows ({g.rows / max(1, self.rows):.0%}): {json.dumps(g.template, ensure_ascii=False)}"
                         f" → answers like {answers}")
        rest = self.usable - shown
        if rest > 0:
            lines.append(f"- {rest:,} more usable rows in {max(0, self.distinct_templates - len(self.groups)):,} "
                         "smaller groups")
        bad = [f"{n:,} {what}" for n, what in ((self.empty_instruction, "with an empty or missing instruction"),
                                             (self.empty_output, "with an empty or missing answer"),
                                             (self.non_text, "whose instruction or answer is not text"),
                                             (self.duplicates, "duplicates of an earlier row")) if n]
        lines.append("- Anomalies: " + ("; ".join(bad) + " -- process_data.py must drop or repair them"
                                        if bad else "none (no empty, non-text or duplicate rows)"))
        for ex in self.anomaly_examples:
            lines.append(f"  - e.g. {_clip(ex)}")
        lines.append("Samples, stratified by group, largest group first:")
        lines += [f"- {_clip(row)}" for g in self.groups for row in g.samples]
        return "\n".join(lines)


def _clip(row: dict[str, Any], limit: int = 220) -> str:
    text = json.dumps(row, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + "…"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def profile_rows(rows: list[dict[str, Any]]) -> Makeup:
    """The make-up of Alpaca-like rows (``instruction``, ``input``, ``output``; values as in the file)."""
    makeup = Makeup(rows=len(rows), usable=0)
    seen: set[str] = set()
    usable: list[tuple[str, dict[str, Any]]] = []
    examples: dict[str, dict[str, Any]] = {}
    for row in rows:
        raw_instruction, raw_output = row.get("instruction"), row.get("output")
        key = json.dumps([raw_instruction, row.get("input"), raw_output], ensure_ascii=False, default=str)
        if key in seen:  # counted, and still in its group below (the groups count the file's rows)
            makeup.duplicates += 1
            examples.setdefault("duplicate", row)
        seen.add(key)
        if raw_instruction is not None and _text(raw_instruction) is None or (
                raw_output is not None and _text(raw_output) is None):
            makeup.non_text += 1
            examples.setdefault("non_text", row)
            continue
        instruction = ((raw_instruction or "") + " " + (_text(row.get("input")) or "")).strip()
        if not instruction:
            makeup.empty_instruction += 1
            examples.setdefault("empty_instruction", row)
            continue
        if not (raw_output or "").strip():
            makeup.empty_output += 1
            examples.setdefault("empty_output", row)
            continue
        usable.append((instruction, row))
    makeup.usable = len(usable)
    makeup.anomaly_examples = list(examples.values())[:4]
    words = None
    keys = _template_keys([text for text, _ in usable])
    templates = Counter(keys)
    if usable and len(templates) > FREE_TEXT_SHARE * len(usable):
        words, makeup.grouped_by = PREFIX_WORDS, "first-words group"
        keys = [template_of(text, words) for text, _ in usable]
        templates = Counter(keys)
    makeup.distinct_templates = len(templates)
    top = [t for t, _ in templates.most_common(TOP_TEMPLATES)]
    answers: dict[str, Counter[str]] = {t: Counter() for t in top}
    per_group = max(1, -(-MIN_SAMPLES // max(1, len(top))))  # ceil: at least MIN_SAMPLES in all
    samples: dict[str, list[dict[str, Any]]] = {t: [] for t in top}
    shapes = _template_keys([row["output"] for _, row in usable])
    for t, shape, (_, row) in zip(keys, shapes, usable, strict=True):
        if t in answers:
            answers[t][shape[:100]] += 1
            if len(samples[t]) < per_group:
                samples[t].append({k: row.get(k) for k in ("instruction", "input", "output") if row.get(k)})
    makeup.groups = [Group(template=t, rows=templates[t], answer_templates=dict(answers[t].most_common(2)),
                           samples=samples[t]) for t in top]
    return makeup


def template_keys(texts: list[str]) -> list[str]:
    """Each text's template, constants kept literal (see :func:`_template_keys`)."""
    return _template_keys(texts)


def _template_keys(texts: list[str]) -> list[str]:
    """Each text's template, with a number kept literal where it is (nearly) constant in its template:
    "What is N times 3?" and "What is N times 5?" are two kinds of row, not one "What is N times N?".
    A position is constant when it takes at most 5 values, and at most one per 4 rows of the group."""
    numbers = [_NUMBER.findall(text) for text in texts]
    plain = [template_of(text) for text in texts]
    values: dict[tuple[str, int], set[str]] = {}
    sizes = Counter(plain)
    for t, found in zip(plain, numbers, strict=True):
        for i, value in enumerate(found):
            values.setdefault((t, i), set()).add(value)
    keys = []
    for text, t, found in zip(texts, plain, numbers, strict=True):
        constant = {i for i in range(len(found)) if len(values[(t, i)]) <= min(5, sizes[t] // 4)}
        if not constant:
            keys.append(t)
            continue
        parts = _NUMBER.split(text)  # text, number, text, ... (the pattern has no capturing group)
        varying = iter(range(len(found)))
        kept = parts[0] + "".join((found[i] if i in constant else _placeholder(next(varying))) + rest
                                  for i, rest in enumerate(parts[1:]))
        keys.append(_SPACE.sub(" ", kept).strip()[:120])
    return keys


COVERAGE_WARN = 0.5  # a template whose items fill this share of its input space gets a warning
MIN_TEMPLATE_ITEMS = 10


class SpaceCoverage(BaseModel):
    """How much of a templated question space the benchmark's own items fill."""

    template: str  # with N for the numbers that vary
    items: int  # distinct items of the template
    space: int  # distinct questions the template can make: the product of each varying number's range

    @property
    def share(self) -> float:
        return self.items / self.space if self.space else 0.0


def input_space_coverage(questions: list[str]) -> list[SpaceCoverage]:
    """Templates (≥ MIN_TEMPLATE_ITEMS distinct items, integers only) whose items fill at least
    COVERAGE_WARN of their space, largest share first.

    The heuristic (issue 35): group the questions by template (:func:`_template_keys`: the numbers that
    vary become N); a varying integer is taken to range over [min, max] of the values seen, and the space
    is the product of those ranges. "What is N times 3?" with N seen from 10 to 99 has a space of 90; 80
    distinct items fill 89 % of it, so templated training questions of that form would mostly *be*
    benchmark items. It underestimates a space whose values were sampled from a wider range than seen,
    which only makes the warning rarer.
    """
    distinct = sorted(set(questions))
    keys = _template_keys(distinct)
    groups: dict[str, list[str]] = {}
    for key, text in zip(keys, distinct, strict=True):
        groups.setdefault(key, []).append(text)
    out = []
    for key, texts in groups.items():
        if len(texts) < MIN_TEMPLATE_ITEMS or not re.search(r"\bN\b", key):
            continue
        numbers = [_NUMBER.findall(t) for t in texts]
        if len({len(n) for n in numbers}) != 1 or any("." in v or "," in v for n in numbers for v in n):
            continue
        space = 1
        for pos in range(len(numbers[0])):
            values = {int(n[pos]) for n in numbers}
            if len(values) > 1:
                space *= max(values) - min(values) + 1
        cover = SpaceCoverage(template=key, items=len(texts), space=space)
        if cover.share >= COVERAGE_WARN:
            out.append(cover)
    return sorted(out, key=lambda c: -c.share)
