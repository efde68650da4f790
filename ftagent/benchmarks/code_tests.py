"""pass@1 of one code answer: the model's code and the item's tests run as one program, and the item passes only
when that program ran to its end (issue 39, red team B4).

The rule is the official scorers': openai/human-eval ``human_eval/execution.py`` ``check_correctness`` runs
``exec(check_program, exec_globals)`` in a child process and appends ``"passed"`` only after it returned; a
``BaseException`` (``SystemExit`` included) is ``"failed: …"`` and a child that ends without a result
(``os._exit``) is ``"timed out"``. Stock OpenCompass 0.5.4 ``MBPPEvaluator`` (``opencompass/datasets/mbpp.py``
``_execution``) does the same with ``key.append('pass')`` after its two ``exec`` calls. The exit status of the
process says nothing: before, ``sys.exit(0)``, ``os._exit(0)`` or ``raise SystemExit`` as the whole answer passed
every item, since the tests never ran.

How: the program runs in its own sandbox (:mod:`ftagent.benchmarks.program_sandbox`) under :data:`HARNESS`, which
reads a fresh random token from its standard input (then closed), executes the program as the official scorers
do (``exec`` in a fresh namespace, so ``__name__`` is not ``"__main__"``), and writes the token only after ``exec``
returned. The scorer counts a pass when the process exited 0 and the last line of its standard output is the
token: an early exit of any kind, an exception, a kill at the time limit or an ``atexit`` hook writes no token.

What this does not stop, as the official scorers do not: code in the same process can introspect it (the
harness's frame holds the token as human-eval's holds its result list); the sandbox bounds what such code
reaches to its own item's verdict.
"""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
from dataclasses import dataclass

from ftagent.benchmarks import program_sandbox

PROGRAM = "prog.py"
HARNESS = program_sandbox.limits_source() + r'''
import os, sys
def _run():
    token = sys.stdin.readline().strip()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    verdict = os.dup(1)  # a program that closes or redirects its stdout still gets its verdict written
    with open("prog.py", encoding="utf-8") as fh:
        code = compile(fh.read(), "prog.py", "exec")
    try:
        exec(code, {})
    except BaseException:
        import traceback
        traceback.print_exc()
        os._exit(1)
    os.write(verdict, ("\n" + token + "\n").encode())
    os._exit(0)
_run()
'''
# the program's environment: nothing of the scorer's (module docstring of program_sandbox)
_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}


@dataclass(frozen=True)
class TestRun:
    """One program's verdict: ``result`` is ``passed``, ``failed``, ``timed out`` or ``exited before its tests
    ended`` (exit status 0 without the token)."""

    passed: bool
    result: str
    confinement: str


def run_tests(program: str, timeout: float, python: str | None = None) -> TestRun:
    """Run ``program`` (the answer's code followed by the item's tests) and say whether it ran to its end."""
    token = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="ftagent-code-") as folder:
        with open(os.path.join(folder, PROGRAM), "w", encoding="utf-8") as fh:
            fh.write(program)
        home = program_sandbox.inside(folder)
        env = {**_ENV, "HOME": home, "TMPDIR": home}
        run = program_sandbox.run_program([python or sys.executable, "-I", "-c", HARNESS], folder, python=python,
                                          timeout_s=timeout, env=env, stdin=token + "\n", output_limit=4096)
    lines = run.stdout.strip().splitlines()
    ended = run.exit_code == 0 and bool(lines) and lines[-1] == token
    if ended:
        result = "passed"
    elif run.timed_out:
        result = "timed out"
    elif run.exit_code == 0:
        result = "exited before its tests ended"
    else:
        result = "failed"
    return TestRun(ended, result, run.confinement)
