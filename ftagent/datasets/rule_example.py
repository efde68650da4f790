"""The contamination rule's example, from the session's own benchmark (issue 39 item 5: times3's prompts
carried plus11's example): an item the planner may see, rewordings the scan counts as hits, and a question
of its form that is not one -- each checked with the scan itself, so the example stays true."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from ftagent.datasets.contamination import scan_rows
from ftagent.datasets.scan_text import normalise
from ftagent.datasets.template_scan import COMMUTATIVE, TemplateIndex, is_template, signature

_SPLIT = re.compile(r"(?<=[.?!。？！])\s+|\n+")
_DIGITS = re.compile(r"\d+")


def _core_text(question: str, index: TemplateIndex) -> str:
    """``question`` without its template sentences, in its own words."""
    kept = [s for s in _SPLIT.split(question or "") if s.strip() and " ".join(normalise(s)) not in index.template]
    return " ".join(kept).strip()


def _rewordings(core: str, sig: Sequence[str]) -> list[str]:
    """Candidate rewordings of ``core`` a cheat would try: operands swapped, a contraction, another verb."""
    out = []
    numbers = _DIGITS.findall(core)
    if len(numbers) >= 2 and any(op in sig for op in COMMUTATIVE):
        parts = _DIGITS.split(core)
        swapped = [numbers[1], numbers[0], *numbers[2:]]
        out.append(parts[0] + "".join(n + rest for n, rest in zip(swapped, parts[1:], strict=True)))
    if re.match(r"(?i)what is\b", core):
        out.append(re.sub(r"(?i)^what is\b", "What's", core))
        out.append("Calculate " + re.sub(r"(?i)^what is\s+", "", core).rstrip("?").rstrip() + ".")
    return out


def _bumped(text: str, pos: int) -> str:
    """``text`` with its ``pos``-th number moved out of its digit count (28 → 128)."""
    parts = _DIGITS.split(text)
    numbers = _DIGITS.findall(text)
    numbers[pos] = str(int(numbers[pos]) + 10 ** len(numbers[pos]))
    return parts[0] + "".join(n + rest for n, rest in zip(numbers, parts[1:], strict=True))


def _varying(sig: Sequence[str], index: TemplateIndex) -> list[int]:
    """Positions (among the numbers) of ``sig``'s template whose value differs between the items."""
    shape = tuple("#" if t.isdigit() else t for t in sig)
    values: dict[int, set[str]] = {}
    for key in index.originals:
        if tuple("#" if t.isdigit() else t for t in key) == shape:
            for pos, value in enumerate(t for t in key if t.isdigit()):
                values.setdefault(pos, set()).add(value)
    return [pos for pos, seen in sorted(values.items()) if len(seen) > 1]


def rule_example(question: str, items: Mapping[str, str | Sequence[str]]) -> str:
    """One sentence for the planner's rule: this benchmark's ``question`` (an item it may see), rewordings of
    it that the scan counts as hits, and a question of its form that is not one -- each checked with the scan
    itself against ``items`` (every validation and test item), so the example is true. '' when the benchmark's
    items have no template with numbers."""
    index = TemplateIndex(items)
    core = _core_text(question, index)
    sig = signature(core)
    if not core or not is_template(sig):
        return ""

    def hits(text: str) -> bool:
        return bool(scan_rows([{"instruction": text, "input": "", "output": ""}], items).flagged)

    found = [c for c in dict.fromkeys(_rewordings(core, sig)) if c != core and index.hit(c) is not None][:3]
    numbers = _DIGITS.findall(core)
    outside = ""
    for pos in _varying(sig, index) or range(len(numbers)):
        candidate = _bumped(core, pos) if pos < len(numbers) else ""
        if candidate and not hits(candidate):
            outside = candidate
            break
    if not found and not outside:
        return ""
    parts = [f"For example, this benchmark's item `{core}`"]
    if found:
        parts.append("is asked again by " + ", ".join(f"`{c}`" for c in found) + " (hits, as is the item with its "
                     "numbers spelled out or its letters in another script)")
    if outside:
        parts.append(("and " if found else "") + f"not by `{outside}` (a number outside the items' range)")
    return " ".join(parts) + "."
