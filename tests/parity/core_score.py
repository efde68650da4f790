"""Tool-env script: score one core benchmark's corpus with ftagent's rendered config and with stock's.

Run by ``tests/parity/test_core_*.py`` through :func:`tests.parity.harness.run_in_tools` (the tool env's
python, the repository on ``PYTHONPATH``). Payload (JSON on stdin)::

    {"ours": "<rendered ftagent config.py>", "stock": {"config": "aime2024/aime2024_gen_17d799.py",
     "var": "aime2024_datasets", "runner": "evaluator"|"cascade_rule"|"humaneval"|"rule:last_boxed_int"} | null,
     "cases": [{"output": str, "gold": str, "stock_gold": str (optional: the published form), "row": {...}}],
     "oracle": [{"output": str, "gold": str, "row": {...}}]}

Both paths run OpenCompass's own order (``OpenICLEvalTask._process_predictions``): the model-level
``pred_postprocessor``, then the dataset's, then the evaluator, one item at a time so that every output
gets its own verdict. ftagent's three come from its rendered config (``mmengine.config.Config.fromfile``);
stock's from the installed ``opencompass/configs/datasets/<config>``, with stock's model-level step for
thinking models (``extract-non-reasoning-content``) in front, as stock's thinking-model configs set it.
Prints ``{"ours": [bool...], "stock": [bool...] | null, "oracle": [bool...], "ours_pred": [...]}``.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import io
import json
import multiprocessing
import os
import re
import sys
import tempfile
from pathlib import Path

import opencompass
from datasets import Dataset
from mmengine.config import Config
from opencompass.registry import ICL_EVALUATORS, TEXT_POSTPROCESSORS

STOCK_DIR = Path(opencompass.__file__).parent / "configs" / "datasets"
STOCK_MODEL_STEP = {"type": "extract-non-reasoning-content"}


def _apply(step: dict | None, text: str) -> str:
    """One ``pred_postprocessor``/``dataset_postprocessor`` dict applied as OpenCompass does."""
    if not step:
        return text
    kwargs = copy.deepcopy(dict(step))
    proc = kwargs.pop("type")
    if isinstance(proc, str):
        proc = TEXT_POSTPROCESSORS.get(proc)
    return proc(text, **kwargs)


def _evaluator(cfg: dict):
    cfg = copy.deepcopy(dict(cfg))
    kind = cfg.pop("type")
    if isinstance(kind, str):
        kind = ICL_EVALUATORS.get(kind)
    return kind(**cfg)


def _verdict(result: dict) -> bool:
    """One item's verdict from an evaluator's result (its details entry, else the aggregate)."""
    details = result.get("details")
    if isinstance(details, dict):  # MBPPEvaluator: {"0": {..., "is_correct": bool}}
        details = list(details.values())
    if details:
        entry = details[0]
        for key in ("cascade_correct", "correct", "is_correct"):
            if key in entry:
                return bool(entry[key])
    for key in ("accuracy", "score", "pass@1"):
        if key in result:
            return float(result[key]) >= 100.0 - 1e-9
    raise RuntimeError(f"no verdict in {sorted(result)}")


def _score_one(evaluator_cfg: dict, pred: str, gold, row: dict, *, stock: bool = False) -> bool:
    evaluator = _evaluator(evaluator_cfg)
    kwargs = {"predictions": [pred], "references": [gold]}
    params = inspect.signature(evaluator.score).parameters
    if "test_set" in params:
        kwargs["test_set"] = Dataset.from_list([row]) if row else None
    if "origin_prompt" in params:  # OpenICLEvalTask passes the prediction file's prompts by name
        kwargs["origin_prompt"] = [""]
    try:
        return _verdict(evaluator.score(**kwargs))
    except IndexError:
        # stock MBPPEvaluator (opencompass/datasets/mbpp.py ``execution``) returns ``key[0]`` of a child that
        # may have reported nothing: a program that ended its process (``os._exit(0)``) crashes stock's whole
        # scoring with this IndexError -- no pass. ftagent's scorer must never crash, so only stock's may.
        if not stock:
            raise
        return False


def _pipeline(model_step, eval_cfg: dict, cases: list[dict], gold_key: str = "gold",
              *, stock: bool = False) -> tuple[list[bool], list[str]]:
    verdicts, preds = [], []
    for case in cases:
        pred = _apply(eval_cfg.get("pred_postprocessor"), _apply(model_step, case["output"]))
        gold = _apply(eval_cfg.get("dataset_postprocessor"), case.get(gold_key, case["gold"]))
        verdicts.append(_score_one(eval_cfg["evaluator"], pred, gold, case.get("row") or {}, stock=stock))
        preds.append(pred)
    return verdicts, preds


def ours(config: str, cases: list[dict]) -> tuple[list[bool], list[str]]:
    """ftagent's path: the rendered config's model step, dataset post-processor and evaluator."""
    cfg = Config.fromfile(config)
    return _pipeline(cfg["models"][0].get("pred_postprocessor"), cfg["datasets"][0]["eval_cfg"], cases)


def _unsafe_execute(program: str, result) -> None:
    """openai/human-eval ``human_eval/execution.py`` ``unsafe_execute``, without its ``reliability_guard``
    (which only disables functions the corpora's programs never call): ``exec`` in a fresh namespace with the
    output swallowed, and ``"passed"`` appended only after ``exec`` returned; any ``BaseException``
    (``SystemExit`` included) is ``"failed: …"``."""
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            sink = io.StringIO()
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                exec(program, {})  # noqa: S102 - the corpus's own programs, as the official scorer runs them
            result.append("passed")
        except BaseException as exc:  # noqa: BLE001 - the official scorer's rule
            result.append(f"failed: {exc}")


def _run_program(program: str, timeout: float = 10.0) -> bool:
    """The official ``check_correctness``: the program runs in a child process that reports into a manager
    list; a child that ended without a result (``os._exit``) or was killed at the time limit is
    ``"timed out"``. Only ``"passed"`` passes: the exit status says nothing (issue 39, red team B4)."""
    ctx = multiprocessing.get_context("fork")
    with ctx.Manager() as manager:
        result = manager.list()
        proc = ctx.Process(target=_unsafe_execute, args=(program, result))
        proc.start()
        proc.join(timeout=timeout + 1)
        if proc.is_alive():
            proc.kill()
            proc.join()
        return list(result)[:1] == ["passed"]


def _humaneval(eval_cfg: dict, cases: list[dict]) -> list[bool]:
    """Stock's post-processor; the program built as the official scorer does
    (openai/human-eval:human_eval/execution.py, ``check_correctness``: prompt + completion + test +
    ``check(entry_point)``): stock's ``HumanEvalEvaluator`` needs the ``human_eval`` package and the
    published problem file, which the tool env does not have."""
    out = []
    for case in cases:
        completion = _apply(eval_cfg.get("pred_postprocessor"), _apply(STOCK_MODEL_STEP, case["output"]))
        row = case["row"]
        program = f"{row['prompt']}{completion}\n{row['test']}\ncheck({row['entry_point']})\n"
        out.append(_run_program(program))
    return out


_FLAT_BOX = re.compile(r"\\boxed\s*\{([^{}]*)\}")


def _as_integer(text: str) -> int | None:
    try:
        number = float(text.strip().replace(",", ""))
    except ValueError:
        return None
    return int(number) if number.is_integer() else None


def _last_boxed_int(cases: list[dict]) -> list[bool]:
    """demo_add's documented rule (docs/benchmarks.md), written independently of ftagent's code: the
    content of the last ``\\boxed{...}`` read as an integer equals the gold sum (else the text equals it)."""
    out = []
    for case in cases:
        found = _FLAT_BOX.findall(_apply(STOCK_MODEL_STEP, case["output"]))
        if not found:
            out.append(False)
            continue
        number = _as_integer(found[-1])
        out.append(number == int(case["gold"]) if number is not None else found[-1].strip() == case["gold"])
    return out


def stock(spec: dict, cases: list[dict]) -> list[bool]:
    """The reference's verdicts: stock OpenCompass config (or demo_add's documented rule)."""
    if spec["runner"] == "rule:last_boxed_int":
        return _last_boxed_int(cases)
    datasets = Config.fromfile(str(STOCK_DIR / spec["config"]))[spec["var"]]
    eval_cfg = datasets[0]["eval_cfg"]
    if spec["runner"] == "cascade_rule":  # the cascade's rule stage (its judge: test_core_judge.py)
        eval_cfg = dict(eval_cfg, evaluator=eval_cfg["evaluator"]["rule_evaluator"])
    if spec["runner"] == "humaneval":
        return _humaneval(eval_cfg, cases)
    # a stock dataset post-processor reads the published gold (GSM8K: the worked answer ending '#### N')
    return _pipeline(STOCK_MODEL_STEP, eval_cfg, cases, gold_key="stock_gold", stock=True)[0]


def main() -> None:
    payload = json.loads(sys.stdin.read())
    mine, preds = ours(payload["ours"], payload["cases"])
    theirs = stock(payload["stock"], payload["cases"]) if payload.get("stock") else None
    oracle = ours(payload["ours"], payload["oracle"])[0] if payload.get("oracle") else []
    print(json.dumps({"ours": mine, "stock": theirs, "oracle": oracle, "ours_pred": preds}))


if __name__ == "__main__":
    main()
