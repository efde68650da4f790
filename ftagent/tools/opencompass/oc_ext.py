"""ftagent's OpenCompass extension, imported by rendered configs inside the tool env ONLY.

Standalone on purpose: it imports OpenCompass and the standard library, never ftagent's core (the
tool env does not have ftagent's dependencies). Registered names:

* post-processors ``ftagent_last_boxed`` (:func:`last_boxed`), ``ftagent_extract_code`` (:func:`extract_code`);
* evaluators :class:`BoxedIntAccEvaluator` (exact boxed-integer match) and
  :class:`PythonTestsEvaluator` (pass@1 by running the tests), both with per-sample ``correct`` details;
* the model type :class:`TrainedFormatChatModel` (HF chat model, prompts in the training format).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

from opencompass.models import HuggingFacewithChatTemplate
from opencompass.openicl.icl_evaluator import BaseEvaluator
from opencompass.registry import ICL_EVALUATORS, MODELS, TEXT_POSTPROCESSORS

_BOXED = re.compile(r"\\boxed\s*\{")
_CODE_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)(?:```|$)", re.S)


@TEXT_POSTPROCESSORS.register_module("ftagent_last_boxed")
def last_boxed(text: str) -> str:
    """Content of the last ``\\boxed{...}`` (balanced braces), stripped; '' when there is none."""
    text = text or ""
    starts = [m.end() for m in _BOXED.finditer(text)]
    if not starts:
        return ""
    i = start = starts[-1]
    depth = 1
    while i < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[start:i - 1].strip() if depth == 0 else ""


def _as_int(value: str) -> int | None:
    cleaned = str(value).strip().replace(",", "").rstrip(".")
    try:
        number = float(cleaned)
    except ValueError:
        return None
    return int(number) if number.is_integer() else None


@ICL_EVALUATORS.register_module()
class BoxedIntAccEvaluator(BaseEvaluator):
    """Accuracy of integer answers: equal when both parse to the same integer (else exact string)."""

    def score(self, predictions, references):
        if len(predictions) != len(references):
            return {"error": "predictions and references have different length"}
        details, correct = [], 0
        for pred, ref in zip(predictions, references, strict=False):
            p, r = _as_int(pred), _as_int(ref)
            ok = (p == r) if (p is not None and r is not None) else str(pred).strip() == str(ref).strip()
            correct += ok
            details.append({"pred": pred, "answer": ref, "correct": bool(ok)})
        return {"accuracy": 100.0 * correct / max(len(references), 1), "details": details}


@TEXT_POSTPROCESSORS.register_module("ftagent_extract_code")
def extract_code(text: str) -> str:
    """The first fenced Python block of ``text`` (an unterminated one counts), else the raw text."""
    match = _CODE_BLOCK.search(text or "")
    return match.group(1) if match else (text or "")


def run_python(program: str, timeout: float) -> bool:
    """True when ``program`` exits 0 within ``timeout`` seconds (isolated interpreter, temp cwd)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "prog.py")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(program)
        try:
            proc = subprocess.run([sys.executable, "-I", path], cwd=tmp, capture_output=True,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return False
        return proc.returncode == 0


@ICL_EVALUATORS.register_module()
class PythonTestsEvaluator(BaseEvaluator):
    """pass@1: the extracted code (prefixed by the item's ``prompt`` when it lacks the definition)
    followed by the reference test program must exit 0."""

    def __init__(self, timeout: float = 10.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.timeout = timeout

    def score(self, predictions, references, test_set=None):
        if len(predictions) != len(references):
            return {"error": "predictions and references have different length"}
        prompts = list(test_set["prompt"]) if test_set is not None and "prompt" in test_set.column_names \
            else [""] * len(predictions)
        details, passed = [], 0
        for code, tests, prompt in zip(predictions, references, prompts, strict=False):
            head = "" if (prompt and prompt.strip() in code) else (prompt or "")
            ok = run_python(f"{head}{code}\n\n{tests}", self.timeout)
            passed += ok
            details.append({"pred": code, "answer": tests, "correct": bool(ok)})
        return {"pass@1": 100.0 * passed / max(len(references), 1), "details": details}


def _strip_turn_ends(prompt):
    """Drop the newline OpenCompass appends to each turn: LLaMA-Factory trains on the bare text, and a
    small fine-tuned model can fail on a single unseen token before ``<|im_end|>``."""
    if isinstance(prompt, str):
        return prompt.rstrip("\n")
    return [dict(item, prompt=item["prompt"].rstrip("\n")) if isinstance(item, dict) and
            isinstance(item.get("prompt"), str) else item for item in prompt]


@MODELS.register_module("ftagent_hf_chat")
class TrainedFormatChatModel(HuggingFacewithChatTemplate):
    """``HuggingFacewithChatTemplate`` whose user turns are formatted exactly as in training.

    The chat template itself is the model folder's own (written by LLaMA-Factory at training time),
    so evaluation and training share template and turn text by construction.
    """

    def generate(self, inputs, max_out_len, min_out_len=None, stopping_criteria=[], **kwargs):  # noqa: B006
        return super().generate([_strip_turn_ends(p) for p in inputs], max_out_len, min_out_len,
                                stopping_criteria, **kwargs)
