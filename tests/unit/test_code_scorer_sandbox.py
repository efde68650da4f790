"""The code scorer's programs run in a sandbox of their own (issue 39, red team B4).

``humaneval`` and ``mbpp`` run what the model answered, with the item's tests, inside OpenCompass's eval task.
That task sees the evaluation's work folder (predictions, results, the logs ftagent turns into feedback), the
benchmark's items and, with a judge, the judge gateway's token in its environment. Each scored program must see
none of it and must pass only when its tests ran to their end:

* :func:`test_a_scored_program_reaches_nothing_of_its_evaluation` runs the real evaluator
  (``oc_ext.PythonTestsEvaluator`` in the tool env) under the real local runner, confined as an evaluation is
  (``FT_SANDBOX=bwrap``) and not (``none``, e.g. ``ftagent eval`` on a machine without bubblewrap), and scores one
  program per attack: each defines a correct ``add`` only when its attack reached nothing, so every reached thing
  is a failed item, named in the message. On the code before (main at d29e192) all 12 attacks reached their
  target, under ``bwrap`` and under ``none``;
* the rest drive :func:`ftagent.benchmarks.code_tests.run_tests` with ftagent's own interpreter (the module is
  standard library only): how a run ends decides its verdict, never its exit status.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

import pytest

from ftagent.benchmarks import code_tests, program_landlock, program_sandbox
from ftagent.runners import sandbox
from ftagent.runners.base import Mount
from ftagent.runners.local import LocalRunner

REPO = Path(__file__).resolve().parents[2]
TOOLS = Path(os.environ.get("FT_TOOLS_ENV") or REPO / "git_ignore_folder" / "finetune_files" / "envs" / "tools")
needs_tools = pytest.mark.skipif(not (TOOLS / "bin" / "python").exists(), reason="needs the tool env (opencompass)")
needs_bwrap = pytest.mark.skipif(not sandbox.probe_bwrap()[0], reason="bubblewrap does not work here")
TOKEN = "ftagent-gateway-0d1e2f3a4b5c6d7e"

# name -> a Python expression that is truthy when the attack reached its target (an exception: it did not)
ATTACKS = {
    "the judge token in /proc/<parent>/environ": "TOKEN in open(f'/proc/{os.getppid()}/environ').read()",
    "the judge token in any /proc/<pid>/environ": "any(TOKEN in open(f'/proc/{p}/environ', errors='replace').read() "
                                                  "for p in os.listdir('/proc') if p.isdigit() and _ok(p))",
    "the work folder through /proc/<parent>/cwd": "'predictions' in os.listdir(f'/proc/{os.getppid()}/cwd')",
    "the work folder through /proc/<parent>/root": "'predictions' in os.listdir(f'/proc/{os.getppid()}/root' + WORK)",
    "the judge token in its own environment": "TOKEN in repr(dict(os.environ))",
    "the work folder by its path": "'predictions' in os.listdir(WORK)",
    "the benchmark items": "open(ITEMS).read()",
    "writing predictions/": "open(os.path.join(WORK, 'predictions', 'ESCAPED'), 'w').write('x')",
    "writing results/": "open(os.path.join(WORK, 'results', 'ESCAPED'), 'w').write('x')",
    "writing logs/": "open(os.path.join(WORK, 'logs', 'ESCAPED.out'), 'w').write('x')",
    "the network (a port listening on 127.0.0.1)": "socket.create_connection(('127.0.0.1', PORT), 3)",
    "the home folder": "'.netrc' in os.listdir(HOME)",
}
PROGRAM = '''import os, socket
TOKEN, WORK, ITEMS, PORT, HOME = {token!r}, {work!r}, {items!r}, {port!r}, {home!r}
def _ok(pid):
    try:
        open(f"/proc/{{pid}}/environ").close()
        return True
    except OSError:
        return False
def _reached():
    try:
        return bool({attack})
    except Exception:
        return False
REACHED = _reached()
def add(a, b):
    return None if REACHED else a + b
'''
PROBE = r'''
import json, sys
sys.path.insert(0, {repo!r})
from ftagent.tools.opencompass import oc_ext
programs = json.loads(open({programs!r}).read())
ev = oc_ext.PythonTestsEvaluator(timeout=30)
out = ev.score(programs, ["assert add(2, 3) == 5\n"] * len(programs), None)
print("VERDICTS" + json.dumps([d["correct"] for d in out["details"]]))
'''


@pytest.fixture
def listener():
    """A TCP port on 127.0.0.1 that accepts connections (the evaluation's own network namespace reaches it)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    yield server.getsockname()[1]
    server.close()


@needs_tools
@needs_bwrap
@pytest.mark.parametrize("outer", ["bwrap", "none"])
def test_a_scored_program_reaches_nothing_of_its_evaluation(outer, tmp_path, listener):
    """Rule: the model's program sees no item, no work folder, no network, no /proc of its evaluation and no
    secret of its environment; it writes nothing the evaluation reads."""
    work, data = tmp_path / "work", tmp_path / "data"
    for sub in ("predictions", "results", "logs"):
        (work / sub).mkdir(parents=True)
    data.mkdir()
    items = data / "test.jsonl"
    items.write_text(json.dumps({"question": "a held-out test item", "answer": "42"}) + "\n", encoding="utf-8")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".netrc").write_text("machine example.com password hunter2\n", encoding="utf-8")
    fields = {"token": TOKEN, "work": str(work), "items": str(items), "port": listener, "home": str(home)}
    names = ["(control: no attack)", *ATTACKS]
    programs = [PROGRAM.format(attack=a, **fields) for a in ("False", *ATTACKS.values())]
    (tmp_path / "programs.json").write_text(json.dumps(programs), encoding="utf-8")
    probe = PROBE.format(repo=str(REPO), programs=str(tmp_path / "programs.json"))
    runner = LocalRunner(TOOLS, sandbox=outer, gpu=False)
    result = runner.run([str(TOOLS / "bin" / "python"), "-c", probe], tool="eval", workdir=work, timeout=600,
                        env={"OPENAI_API_KEY": TOKEN, "HOME": str(home)},
                        mounts=[Mount(source=REPO, read_only=True), Mount(source=data, read_only=True),
                                Mount(source=tmp_path, read_only=True)])
    assert result.exit_code == 0, result.log_tail[-3000:]
    line = [ln for ln in result.log_tail.splitlines() if ln.startswith("VERDICTS")][-1]
    verdicts = json.loads(line[len("VERDICTS"):])
    assert verdicts[0], f"the control program failed: the sandbox does not run programs ({result.log_tail[-2000:]})"
    reached = [name for name, ok in zip(names, verdicts, strict=True) if not ok]
    assert reached == [], f"the scored program reached: {reached}"
    assert sorted(p.name for p in work.rglob("*ESCAPED*")) == []


def _run(program: str, timeout: float = 20) -> code_tests.TestRun:
    return code_tests.run_tests(program, timeout, python=sys.executable)


@pytest.mark.parametrize("reply", ["import sys\nsys.exit(0)\n", "import os\nos._exit(0)\n", "raise SystemExit\n",
                                   "raise SystemExit(0)\n", "exit()\n",
                                   "import atexit, os\natexit.register(lambda: os._exit(0))\nassert False\n"])
def test_a_program_that_ends_before_its_tests_is_no_pass(reply):
    """Rule (openai/human-eval check_correctness, stock MBPPEvaluator _execution): only a run whose tests ran to
    their end passes; before, exit status 0 was a pass."""
    run = _run(reply + "\nassert 1 + 1 == 2\n")
    assert not run.passed
    assert run.result in ("failed", "exited before its tests ended")


def test_a_program_cannot_print_its_way_to_a_pass():
    """The pass line is a fresh random token, written after the program's code returned: printing what looks like
    the scorer's success, then leaving, is no pass."""
    run = _run("import os\nprint('passed')\nos.write(1, b'\\npassed\\n')\nos._exit(0)\n")
    assert (run.passed, run.result) == (False, "exited before its tests ended")


def test_a_passing_program_may_close_or_redirect_its_output():
    run = _run("import os, sys\nprint('noise', end='')\nsys.stdout.close()\nos.close(1)\nassert sum([1, 2]) == 3\n")
    assert (run.passed, run.result) == (True, "passed")


def test_a_program_runs_as_the_official_scorers_exec_it():
    """``exec`` in a fresh namespace (human-eval's ``exec(check_program, exec_globals)``): a ``__main__`` block does
    not run, and the program's stdin is empty."""
    run = _run("import sys\nif __name__ == '__main__':\n    sys.exit(1)\nassert sys.stdin.read() == ''\n")
    assert (run.passed, run.result) == (True, "passed")


def test_a_program_that_runs_too_long_is_killed_with_what_it_started(tmp_path):
    """The time limit holds, and nothing the program started outlives its run (a double-forked daemon)."""
    stamp = tmp_path / "stamp"
    program = ("import os, time\n"
               "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
               f"        for _ in range(200):\n            open({str(stamp)!r}, 'a').write('x')\n"
               "            time.sleep(0.05)\n    os._exit(0)\n"
               "while True:\n    pass\n")
    start = time.monotonic()
    run = _run(program, timeout=2)
    assert (run.passed, run.result) == (False, "timed out")
    assert time.monotonic() - start < 10
    time.sleep(0.5)
    size = stamp.stat().st_size if stamp.exists() else 0
    time.sleep(0.5)
    assert (stamp.stat().st_size if stamp.exists() else 0) == size, "a process of the program outlived its run"


def test_the_sandbox_is_named_and_probed_once():
    conf = program_sandbox.confinement()
    assert conf.kind in ("bwrap", "none")
    if sandbox.probe_bwrap()[0]:
        assert conf.kind == "bwrap", conf.reason
    assert program_sandbox.confinement() is conf
    assert _run("assert True\n").confinement == conf.kind


def test_an_endless_print_stops_at_the_file_size_limit():
    """An endless print stops at the file-size limit (64 MiB), not at the scorer's disk."""
    run = _run("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n", timeout=60)
    assert not run.passed


def test_the_scorer_process_keeps_its_own_environment_out(monkeypatch):
    """The scorer's environment (the judge token of an evaluation) is not inherited: the program's environment is
    only what code_tests gives it."""
    monkeypatch.setenv("OPENAI_API_KEY", TOKEN)
    run = _run(f"import os\nassert {TOKEN!r} not in repr(dict(os.environ))\n")
    assert run.passed, run.result
    if program_sandbox.confinement().proc:
        run = _run(f"assert all({TOKEN!r} not in open(f'/proc/{{p}}/environ').read() "
                   "for p in __import__('os').listdir('/proc') if p.isdigit())\n")
        assert run.passed, run.result


@pytest.mark.parametrize("forced", [None, "landlock"])
def test_a_chart_program_reaches_nothing_of_its_scorer(tmp_path, monkeypatch, forced):
    """TableBench's visualization answers are programs too (``domain/sandbox.run_chart_code``): same sandbox.
    The chart's bar heights say what the program reached (1, 2 when nothing). On the code before (main at
    d29e192) it read the outside file and, through /proc/<parent>/cwd, the scorer's work folder. ``landlock``: the
    confinement of the docker runner's containers, forced here."""
    if forced:
        if program_landlock.abi() < program_landlock.MIN_ABI:
            pytest.skip("no Landlock with network rules here")
        monkeypatch.setattr(program_sandbox, "confinement", lambda: program_sandbox.Confinement(forced, "test"))
    work = tmp_path / "work"
    work.mkdir()
    (work / "predictions.json").write_text("{}", encoding="utf-8")
    outside = tmp_path / "items.jsonl"
    outside.write_text("a held-out item\n", encoding="utf-8")
    monkeypatch.chdir(work)
    monkeypatch.setenv("OPENAI_API_KEY", TOKEN)
    code = (f"import os\nimport matplotlib.pyplot as plt\nreached = 0\n"
            f"try:\n    reached += bool(open({str(outside)!r}).read())\nexcept OSError:\n    pass\n"
            f"reached += {TOKEN!r} in repr(dict(os.environ))\n"
            "try:\n    reached += 'predictions.json' in os.listdir(f'/proc/{os.getppid()}/cwd')\nexcept OSError:\n"
            "    pass\nplt.bar([0, 1], [1 + 10 * reached, 2])\n")
    from ftagent.benchmarks.domain import sandbox as chart_sandbox

    res = chart_sandbox.run_chart_code(code, {"columns": ["a"], "data": [[1]]}, timeout_s=60)
    assert res.ok, res.error
    assert res.series == [[1, 2]], f"the chart program reached something of its scorer: {res.series}"
    kind = program_sandbox.confinement().kind
    assert res.network_isolation.startswith(kind) or kind == "none", res.network_isolation


def test_without_bubblewrap_the_evaluations_log_says_so(monkeypatch, capsys):
    """The fallback (a Docker container under the default seccomp profile) still scores, and warns once."""
    monkeypatch.setattr(program_sandbox, "confinement", lambda: program_sandbox.Confinement("none", "no bwrap here"))
    program_sandbox._warn_once.cache_clear()
    assert _run("assert 1 + 1 == 2\n").passed and _run("import sys\nsys.exit(0)\n").passed is False
    err = capsys.readouterr().err
    assert err.count("without a sandbox of their own (no bwrap here)") == 1


@pytest.mark.skipif(program_landlock.abi() < program_landlock.MIN_ABI, reason="no Landlock with network rules here")
def test_under_landlock_a_scored_program_reaches_nothing_of_its_scorer(tmp_path, listener, monkeypatch):
    """Where bubblewrap cannot make namespaces (the docker runner's containers), each program confines itself with
    Landlock and a seccomp filter (program_landlock): the attacks of the bwrap test, against this process as the
    scorer. tests/integration/test_docker_runner.py runs them in the real container."""
    monkeypatch.setattr(program_sandbox, "confinement", lambda: program_sandbox.Confinement("landlock", "test"))
    monkeypatch.setenv("OPENAI_API_KEY", TOKEN)
    work, home = tmp_path / "work", tmp_path / "home"
    for sub in ("predictions", "results", "logs"):
        (work / sub).mkdir(parents=True)
    home.mkdir()
    (home / ".netrc").write_text("machine example.com password hunter2\n", encoding="utf-8")
    items = tmp_path / "test.jsonl"
    items.write_text("a held-out test item\n", encoding="utf-8")
    fields = {"token": TOKEN, "work": str(work), "items": str(items), "port": listener, "home": str(home)}
    attacks = {**ATTACKS, "a UDP socket": "socket.socket(socket.AF_INET, socket.SOCK_DGRAM)",
               "a signal to the scorer": "os.kill(os.getppid(), 0) is None"}
    reached = []
    for name, attack in {"(control: no attack)": "False", **attacks}.items():
        run = code_tests.run_tests(PROGRAM.format(attack=attack, **fields) + "assert add(2, 3) == 5\n", 30)
        assert run.confinement == "landlock"
        if not run.passed:
            reached.append(name)
    assert reached == [], f"the scored program reached, under Landlock: {reached}"
    assert sorted(p.name for p in work.rglob("*ESCAPED*")) == []
