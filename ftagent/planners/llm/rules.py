"""The rules the brief states in words (issue 39 item 5): validation's feedback and selection parts, and the
contamination scan's rule with an example from the session's own benchmark."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def feedback_example(holdout: Any) -> tuple[str, int] | None:
    """``(validation file relative to the benchmark folder, row)`` of the first item of validation's feedback
    part (issue 39 item 5: the brief's example is one the planner may see), None without a split."""
    if holdout is None:
        return None
    for dataset, ids in holdout.feedback.items():
        if ids and dataset in holdout.files:
            return holdout.files[dataset], int(ids[0])
    return ("", -1)  # a split without a feedback item: no example at all


def contamination_rule_words(example: str = "", question: str = "") -> str:
    """The contamination scan's rule, from its owner (:func:`ftagent.datasets.contamination.rule_words`), with
    ``example`` and ``question`` from the session's own benchmark (issue 39: times3's prompts carried plus11's)."""
    from ftagent.datasets.contamination import rule_words

    text = rule_words(example, question.split("?")[0] + "?" if "?" in question else question)
    # under its own heading in the brief ("## Contamination check"): the rule's lead words would repeat it
    lead = "Contamination check, exactly: "
    return text[len(lead)].upper() + text[len(lead) + 1:] if text.startswith(lead) else text


def _rule_example(question: str, root: Path | None, benchmark: str, columns: list[str]) -> str:
    """:func:`ftagent.datasets.template_scan.rule_example` of the brief's (feedback) example against every
    item of the session's copy; '' when there is none."""
    if not question or root is None or not columns:
        return ""
    from ftagent.benchmarks.frozen import scan_items
    from ftagent.datasets.rule_example import rule_example

    try:
        return rule_example(question, scan_items(Path(root) / benchmark, columns))
    except (OSError, ValueError):
        return ""


def holdout_words(holdout: Any) -> str:
    """The feedback/selection rule as the planner reads it ('' without a split; :mod:`ftagent.core.holdout`)."""
    if holdout is None:
        return ""
    f, s = holdout.size("feedback"), holdout.size("selection")
    note = holdout.size_note()
    return (f"Validation is split, item by item, into a feedback part ({f:,} items) and a selection part ({s:,} "
            "items). Every validation item you are ever shown (the example above, the wrong items in feedback) is "
            "from the feedback part, and the scores and answer counts of feedback are the feedback part's. The "
            "selection part is in no prompt, no log you read and no file your script can open, and it alone decides "
            "whether an experiment becomes the best: its paired interval against the current best must lie above 0. "
            "Training on the items you were shown, in any wording, cannot raise the selection score except through "
            "the skill itself, and the contamination check flags such rows anyway." + (f" Note: {note}." if note else ""))
