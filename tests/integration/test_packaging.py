"""A plain (non-editable) install finds configs/ and docker/ as package data, from any directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def test_every_package_is_listed_in_pyproject():
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {str(p.parent.relative_to(REPO)).replace("/", ".") for p in (REPO / "ftagent").rglob("__init__.py")}
    assert found - listed == set(), "add these packages to [tool.setuptools] packages in pyproject.toml"


def test_plain_install_runs_from_another_directory(tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--target", str(target), str(REPO)], check=True, capture_output=True, timeout=600)
    assert (target / "ftagent" / "_configs" / "models.yaml").is_file()
    assert (target / "ftagent" / "_docker").is_dir()
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target), "HF_HUB_OFFLINE": "1"}
    probe = ("import ftagent, ftagent.core.paths as p; "
             "print(ftagent.__file__); print(p.configs_dir()); print(p.docker_dir())")
    out = subprocess.run([sys.executable, "-c", probe], cwd=cwd, env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert all(line.startswith(str(target)) for line in out), out
    listing = subprocess.run([sys.executable, "-m", "ftagent", "benchmarks", "list"], cwd=cwd, env=env,
                             capture_output=True, text=True, timeout=120)
    assert listing.returncode == 0, listing.stderr
    assert "demo_add" in listing.stdout and "aime25" in listing.stdout
    show = subprocess.run([sys.executable, "-m", "ftagent", "benchmarks", "show", "demo_add"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)
    assert show.returncode == 0 and "accuracy" in show.stdout, show.stderr


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> Path:
    """A fresh venv with the built wheel of ftagent (its ``bin/ftagent``), as after ``pip install ftagent``.

    The dependencies come from this test's own environment through a ``.pth`` line (a plain path line:
    its ``__editable__`` finder is not run, so ``import ftagent`` finds the wheel's copy), not from
    PyPI: an install of ~150 packages would cost minutes for nothing this test checks.
    """
    root = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(REPO), "-w", str(root / "dist")],
                   check=True, capture_output=True, timeout=600)
    venv = root / "venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)],
                   check=True, timeout=120)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--no-deps", *map(str, (root / "dist").glob("ftagent-*.whl"))],
                   check=True, capture_output=True, timeout=600)
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    import sysconfig

    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def test_wheel_install_env_check_setup_and_doctor_from_another_folder(wheel_venv: Path, tools_env: Path,
                                                                      tmp_path: Path) -> None:
    """Issue 32 item 2: outside the source tree the tool env's check imported ftagent and failed."""
    from ftagent.runners.toolenv import MARKER, requirements_hash
    from tests.fakes.toolenv import make_fake_tool_env

    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update({"FT_TOOLS_ENV": str(tools_env), "FT_FILE_PATH": str(tmp_path / "ff"), "FT_ENV_TYPE": "local",
                "FT_SANDBOX": "auto", "HF_HUB_OFFLINE": "1", "COLUMNS": "200"})
    ftagent = str(wheel_venv / "bin" / "ftagent")
    where = subprocess.run([str(wheel_venv / "bin" / "python"), "-c", "import ftagent; print(ftagent.__file__)"],
                           cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(wheel_venv)), where
    check = subprocess.run([ftagent, "env", "check"], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert check.returncode == 0 and f"tool env {tools_env}: ok" in check.stdout, check.stdout + check.stderr
    doctor = subprocess.run([ftagent, "doctor"], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "verdict: ready" in doctor.stdout and "Traceback" not in doctor.stdout + doctor.stderr
    # `env setup` on an env set up from the current files: verified, nothing installed (the shared tool env
    # is never set up here: a stand-in env with a current marker)
    fake = make_fake_tool_env(tmp_path / "fake-tools")
    (fake / MARKER).write_text(f'{{"requirements_sha256": "{requirements_hash(False)}", "gpu": false}}')
    setup = subprocess.run([ftagent, "env", "setup", "--path", str(fake), "--cpu"], cwd=cwd, env=env,
                           capture_output=True, text=True, timeout=300)
    assert setup.returncode == 0 and "up to date" in setup.stdout, setup.stdout + setup.stderr
