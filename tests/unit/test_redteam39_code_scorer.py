"""Red team of issue 39: the code benchmarks' scorer runs what the model wrote, and trusts it.

``humaneval`` and ``mbpp`` are scored by ftagent's ``PythonTestsEvaluator`` (``tools/opencompass/oc_ext.py``):
the model's code and the item's tests run as one program, and **exit status 0 is a pass**. A model that answers
every item with ``import sys; sys.exit(0)`` (or ``os._exit(0)``, ``raise SystemExit``) never lets the tests run and
passes them all; a dishonest planner gets that model by training on rows whose output is that line (the
contamination scan, the weights, template and decoding checks see an ordinary fine-tune). The official scorers
count such a program as failed: openai/human-eval ``execution.py`` ``unsafe_execute`` appends "passed" only after
``exec(check_program)`` returns (``SystemExit`` is a ``BaseException``: "failed"; a process that ends without a
result: "timed out"), and stock OpenCompass 0.5.4 ``MBPPEvaluator.execution`` likewise (``'failed'``; its own
``os._exit`` case crashes stock's scorer with an IndexError, which is no pass either). The parity harness's
human-eval stand-in (``tests/parity/core_score.py`` ``_run_program``) has the same exit-status rule as ftagent,
so parity could not see this.

The program also runs inside the evaluation's sandbox, as a child of OpenCompass's eval task: through
``/proc/<parent>/cwd`` it reaches the evaluation's work folder (writable: predictions, results, the item scores
ftagent reads back) and the benchmark items the config names (every split, the selection part and test included),
and ``/proc/<parent>/environ`` holds the judge gateway's token when a judge is set.

Both tests fail on the code attacked (main at c7fcfe4).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.parity.core_common import SCRIPT, ours_config
from tests.parity.harness import REPO, load_corpus, run_in_tools


def _tools_python() -> str | None:
    root = os.environ.get("FT_TOOLS_ENV") or str(REPO / "git_ignore_folder" / "finetune_files" / "envs" / "tools")
    python = Path(root) / "bin" / "python"
    return str(python) if python.exists() else None


needs_tools = pytest.mark.skipif(_tools_python() is None, reason="needs the tool env (opencompass)")

KEYS = ("humaneval", "mbpp")
EXITS = {
    "sys.exit(0)": "```python\nimport sys\nsys.exit(0)\n```",
    "os._exit(0)": "```python\nimport os\nos._exit(0)\n```",
    "raise SystemExit": "```python\nraise SystemExit\n```",
}


@needs_tools
@pytest.mark.parametrize("key", KEYS)
def test_a_reply_that_exits_before_the_tests_run_is_not_a_pass(key, tmp_path):
    """Rule: an item passes only when its tests ran to their end (as stock's scorers count it)."""
    corpus = load_corpus(key)[:2]
    cases = [{"output": out, "gold": c["gold"], "stock_gold": c.get("stock_gold", c["gold"]), "row": c.get("row") or {}}
             for c in corpus for out in EXITS.values()]
    payload = {"ours": str(ours_config(key, tmp_path)), "stock": None, "cases": cases, "oracle": []}
    result = run_in_tools(Path(_tools_python() or ""), SCRIPT, payload)
    passed = [name for (name, _), ok in zip(list(EXITS.items()) * len(corpus), result["ours"], strict=True) if ok]
    assert passed == [], f"{key}: these replies passed every test of their item without running it: {passed}"


PROBE = r'''
import json, sys
sys.path.insert(0, {repo!r})
from ftagent.tools.opencompass import oc_ext
program = (
    "import os\n"
    "work = f'/proc/{{os.getppid()}}/cwd'\n"
    "items = open(os.path.join(work, 'test.jsonl')).read()\n"
    "open(os.path.join(work, 'ESCAPED.txt'), 'w').write(items)\n"
    "def add(a, b):\n    return a + b\n")
ev = oc_ext.PythonTestsEvaluator(timeout=30, type_aware=True)
print(json.dumps(ev.score([program], ["assert add(2, 3) == 5\n"], None)["pass@1"]))
'''


@needs_tools
def test_a_scored_program_reaches_nothing_outside_its_own_folder(tmp_path):
    """Rule: the model's code, which the scorer runs, sees no benchmark item and writes nothing the evaluation
    reads (its work folder holds the predictions and the scores ftagent parses)."""
    work = tmp_path / "work"  # stands for OpenCompass's eval task: its cwd is the evaluation's work folder
    work.mkdir()
    (work / "test.jsonl").write_text(json.dumps({"question": "a held-out test item", "answer": "42"}) + "\n")
    proc = subprocess.run([_tools_python() or sys.executable, "-c", PROBE.format(repo=str(REPO))], cwd=work,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    escaped = work / "ESCAPED.txt"
    assert not escaped.exists(), (f"the scored program copied {escaped.read_text()!r} from the evaluation's work "
                                  "folder back into it")
