"""A fresh venv with the built wheel of ftagent, as after ``pip install ftagent`` (issue 32).

Shared by tests/integration/test_packaging.py (env check / doctor / env setup) and
tests/integration/test_user_benchmark.py (one ``llm_finetune`` loop) through the session fixture
``wheel_venv`` of tests/integration/conftest.py: built once per worker process (~30 s).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def one_build_at_a_time() -> Iterator[None]:
    """Hold this checkout's build lock: setuptools builds in the source tree's build/, and two pytest workers
    building at once (test_packaging's plain install beside test_user_benchmark's wheel) broke each other's build."""
    lock = Path(tempfile.gettempdir()) / f"ftagent-build-{hashlib.sha1(str(REPO).encode()).hexdigest()[:12]}.lock"
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


def build_wheel_venv(root: Path) -> Path:
    """Build the wheel of this checkout under ``root`` and install it into the venv ``root/venv``.

    The dependencies come from this test's own environment through a ``.pth`` line (a plain path line:
    its ``__editable__`` finder is not run, so ``import ftagent`` finds the wheel's copy), not from
    PyPI: an install of ~150 packages would cost minutes for nothing these tests check.
    """
    with one_build_at_a_time():
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(REPO), "-w", str(root / "dist")],
                       check=True, capture_output=True, timeout=600)
    venv = root / "venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)],
                   check=True, timeout=120)
    # without PYTHONPATH: a checkout on it (a worktree's test run) makes pip find ftagent "already satisfied" in
    # the fresh venv and install nothing
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--no-deps", *map(str, (root / "dist").glob("ftagent-*.whl"))],
                   check=True, capture_output=True, timeout=600, env=outside_env({}))
    (wheel_site(venv) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def wheel_site(venv: Path) -> Path:
    """The venv's site-packages (where the wheel put ``ftagent/``)."""
    return Path(subprocess.run([str(venv / "bin" / "python"), "-c",
                                "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())


def outside_env(extra: dict[str, str], drop: tuple[str, ...] = ()) -> dict[str, str]:
    """This process's environment without what points at the source tree or its venv, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not (drop and k.startswith(drop))}
    env.update(extra)
    return env


def assert_imports_wheel(venv: Path, cwd: Path, env: dict[str, str]) -> None:
    """``import ftagent`` in the venv, with this env and cwd, loads the wheel's copy, not the checkout."""
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import ftagent; print(ftagent.__file__)"],
                           cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).is_relative_to(wheel_site(venv)), where
    assert not Path(where).is_relative_to(REPO), where
