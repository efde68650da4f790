"""Issue 39 item 9: a sandboxed command cannot change the tool env (its site-packages' ``.pth`` files run in every
later tool process) nor ftagent's evaluator sources, whatever writable folder it is given.

Real bubblewrap, a real (pip-less) venv as the tool env. Before the fix the tool env's read-only bind came before
the writable binds, so a writable folder that contains the env (an export's parent folder, a workspace set above
the clone) was bound over it and the ``.pth`` file landed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ftagent.core.errors import EnvironmentFailure
from ftagent.runners import sandbox
from ftagent.runners.base import Mount
from ftagent.runners.local import LocalRunner

BWRAP_OK, BWRAP_WHY = sandbox.probe_bwrap()
pytestmark = pytest.mark.skipif(not BWRAP_OK, reason=f"bubblewrap does not work here: {BWRAP_WHY}")

PLANT = """
import sys
for target in sys.argv[1:]:
    try:
        open(target, "w").write("import os; os.system('touch /tmp/pwned')\\n")
        print("WROTE", target)
    except OSError as exc:
        print("REFUSED", target, exc.strerror)
"""


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A clone-like folder: the tool env under it (as git_ignore_folder/finetune_files/envs/tools), a workspace
    beside it, and an ``ftagent`` package folder (the evaluator sources the OpenCompass run mounts read-only)."""
    root = tmp_path / "clone"
    env = root / "files" / "envs" / "tools"
    env.parent.mkdir(parents=True)
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    (root / "ftagent" / "tools" / "opencompass").mkdir(parents=True)
    (root / "ftagent" / "tools" / "opencompass" / "oc_ext.py").write_text("SCORER = 'honest'\n")
    (root / "ws").mkdir()
    return root


def _site(env: Path) -> Path:
    return next((env / "lib").glob("python3*/site-packages"))


def _attempt(runner: LocalRunner, workdir: Path, targets: list[Path], mounts: list[Mount]) -> str:
    res = runner.run(["python", "-c", PLANT, *map(str, targets)], tool="eval", workdir=workdir, mounts=mounts,
                     timeout=120)
    assert res.exit_code == 0, res.log_tail
    return res.log_tail


def test_a_confined_command_cannot_write_a_pth_file_or_the_evaluator(clone: Path) -> None:
    env = clone / "files" / "envs" / "tools"
    runner = LocalRunner(env, sandbox="bwrap", gpu=False)
    pth, source = _site(env) / "zz_planted.pth", clone / "ftagent" / "tools" / "opencompass" / "oc_ext.py"
    sources = Mount(source=clone / "ftagent")  # read-only, as tools/opencompass/runs.py mounts it
    cases = {
        "the loop workspace": (clone / "ws", []),
        "a workdir that contains the tool env and the sources": (clone, []),
        "a writable mount that contains them": (clone / "ws", [Mount(source=clone, read_only=False)]),
    }
    for what, (workdir, extra) in cases.items():
        tail = _attempt(runner, workdir, [pth, source], [sources, *extra])
        assert "WROTE" not in tail, f"{what}: {tail}"
        assert tail.count("REFUSED") == 2 and "Read-only file system" in tail, f"{what}: {tail}"
    assert not pth.exists() and source.read_text() == "SCORER = 'honest'\n"
    # the honest part still works: the workdir itself is writable
    tail = _attempt(runner, clone / "ws", [clone / "ws" / "out.txt"], [sources])
    assert "WROTE" in tail and (clone / "ws" / "out.txt").is_file()


def test_a_writable_folder_inside_the_tool_env_is_refused(clone: Path) -> None:
    env = clone / "files" / "envs" / "tools"
    runner = LocalRunner(env, sandbox="bwrap", gpu=False)
    with pytest.raises(EnvironmentFailure, match="inside the tool environment"):
        runner.run(["true"], tool="data", workdir=_site(env), timeout=60)
    with pytest.raises(EnvironmentFailure, match="inside the tool environment"):
        runner.run(["true"], tool="data", workdir=clone / "ws", mounts=[Mount(source=env / "lib", read_only=False)],
                   timeout=60)
