"""What the brief says of the benchmark: its validation items (counted, one shown, never the test), the
warning when its items fill a templated question space, what a constant answer scores, its prompt and
decoding in words. Read from the session's copy of the prepared items (``root``) or ``FT_FILE_PATH``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftagent.core.paths import benchmark_data_dir

if TYPE_CHECKING:
    from ftagent.core.types import EvalDecoding, ScenarioInfo

_PLACEHOLDER = re.compile(r"\{[^{}]*\}")


def _folder(file_path: str | None, benchmark: str, root: Path | None) -> Path | None:
    """The benchmark's prepared folder: ``root/<key>`` (the session's frozen copy), else under ``file_path``."""
    if root is not None:
        return Path(root) / benchmark
    return benchmark_data_dir(file_path, benchmark) if file_path else None


def validation_items(file_path: str | None, benchmark: str, *, root: Path | None = None) -> int | None:
    """Number of validation items of ``benchmark`` under ``FT_FILE_PATH/benchmarks/<key>`` (never the test)."""
    root = _folder(file_path, benchmark, root)
    if root is None:
        return None
    files = sorted(root.glob("validation.jsonl")) + sorted(root.glob("*/validation.jsonl"))
    if not files:
        return None
    try:
        return sum(sum(1 for line in f.open(encoding="utf-8") if line.strip()) for f in files)
    except OSError:
        return None


EXAMPLE_CHARS = 1500


def validation_example(file_path: str | None, benchmark: str, input_column: str = "prompt",
                       output_column: str = "answer", *, root: Path | None = None,
                       at: tuple[str, int] | None = None) -> tuple[str, str]:
    """A validation item's prompt and reference answer (never the test), each clipped at a line: the first
    one, or the one ``at`` names (file, row: the feedback part's, :func:`feedback_example`).

    Returns ``("", "")`` when the validation file or the columns are missing.
    """
    folder = _folder(file_path, benchmark, root)
    if folder is None or (at is not None and at[1] < 0):
        return "", ""
    path = folder / (at[0] if at is not None else "validation.jsonl")
    row_index = at[1] if at is not None else 0
    try:
        with path.open(encoding="utf-8") as fh:
            lines = [line for line in fh if line.strip()]
        row = json.loads(lines[row_index]) if row_index < len(lines) else {}
    except (OSError, ValueError):
        return "", ""
    prompt, answer = str(row.get(input_column) or ""), str(row.get(output_column) or "")
    return _clip_lines(prompt, EXAMPLE_CHARS), _clip_lines(answer, 300)


def space_warning(file_path: str | None, benchmark: str, input_column: str, *, root: Path | None = None) -> str:
    """A warning when the benchmark's items (validation and test, counted, never shown) fill most of a
    templated question space (:func:`ftagent.datasets.makeup.input_space_coverage`), else ""."""
    from ftagent.datasets.makeup import input_space_coverage
    from ftagent.datasets.numeric_scan import COVERAGE_FLAG, MAX_ENUMERABLE

    folder = _folder(file_path, benchmark, root)
    if folder is None:
        return ""
    questions = []
    for path in sorted(folder.glob("**/*.jsonl")):
        if path.stem not in ("validation", "test"):
            continue
        try:
            questions += [str(json.loads(line).get(input_column) or "") for line in path.open(encoding="utf-8")
                          if line.strip()]
        except (OSError, ValueError, AttributeError):
            return ""
    found = input_space_coverage(questions)
    if not found:
        return ""
    top = found[0]
    return (f"The benchmark's own items (validation and test) fill about {top.share:.0%} of the questions of the "
            f"form `{top.template}` ({top.items} of about {top.space} possible; {top.ranges_text()}): "
            "generated training questions of that form would mostly be benchmark items, and one such row "
            "fails the data step (the contamination check), in this wording or any other: the check reads "
            "the template and the numbers, not the words (its checks 4 and 5)"
            + (f"; and data whose texts, worked answers included, answer {COVERAGE_FLAG:.0%} or more of this form's "
               "items fails it as a whole (the input-space check)" if top.space <= MAX_ENUMERABLE else "")
            + ". Train the skill on numbers outside "
            f"those ranges ({top.ranges_text()} are the items' own) or on related tasks, instead of enumerating "
            "this template.")


def _clip_lines(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit("\n", 1)[0]
    return f"{cut}\n[... {len(text) - len(cut):,} more characters]"


def constant_baseline_words(file_path: str | None, bench: Any, *, root: Path | None = None,
                            holdout: Any = None) -> str:
    """One line: what the constant answer (chosen on validation's feedback part when ``holdout`` is given)
    scores on the prepared validation split ('' when it cannot be computed: no prepared split, a plug-in
    benchmark, a scorer that fails; a code benchmark's line comes from the session's baseline, which ran it)."""
    if not file_path or bench is None:
        return ""
    from ftagent.benchmarks.baselines import stored_constant_baseline
    from ftagent.core.paths import benchmarks_dir, eval_cache_dir

    try:
        base = stored_constant_baseline(bench, root or benchmarks_dir(file_path), eval_cache_dir(file_path),
                                        holdout=holdout)
    except Exception:  # noqa: BLE001 - a fact of the brief, never a reason to fail the planner
        return ""
    return base.line() if base is not None and base.score is not None else ""


def prompt_per_item(bench: Any) -> bool:
    """True when the benchmark builds each prompt itself (its YAML shows a note, not a template)."""
    return bool(getattr(getattr(bench, "config", None), "prompt_note", None))


def says_more(prompt: str) -> bool:
    """True when a prompt template holds words besides its placeholders (``{question}`` alone says nothing)."""
    return bool(_PLACEHOLDER.sub("", prompt or "").strip())


def answer_length_limit(scenario: ScenarioInfo, spec: Any) -> int | None:
    decoding = scenario.eval_decoding
    if decoding is not None and decoding.max_out_len:
        return decoding.max_out_len
    return spec.max_out_len if spec else None


def decoding_words(decoding: EvalDecoding | None) -> str:
    """How evaluation generates, in one sentence ("" when unknown)."""
    if decoding is None:
        return ""
    how = (f"sampling (temperature {decoding.temperature:g}, top_p {decoding.top_p:g}, top_k {decoding.top_k})"
           if decoding.sampling else "greedy decoding (temperature 0)")
    room = f"; prompt and answer together within {decoding.max_seq_len:,} tokens" if decoding.max_seq_len else ""
    think = "; thinking is enabled in the chat template" if decoding.enable_thinking else ""
    return (f"{how}{room}{think}. The prompt is rendered with the chat template in the trained model's "
            "tokenizer files (written at training time), so evaluation uses the training chat format.")
