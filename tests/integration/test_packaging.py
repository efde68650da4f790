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
    from tests.helpers.wheel_venv import one_build_at_a_time

    target = tmp_path / "site"
    with one_build_at_a_time():
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


def test_wheel_ships_every_data_file(wheel_venv: Path) -> None:
    """configs/, docker/ and the prompts / templates / readmes under ftagent/ are all in the wheel (package
    data): a source file the wheel lacks works from the checkout and fails after ``pip install``."""
    from tests.helpers.wheel_venv import wheel_site

    site = wheel_site(wheel_venv) / "ftagent"
    shipped = {"configs": site / "_configs", "docker": site / "_docker", "ftagent": site}
    missing = [str(f.relative_to(REPO)) for src, dst in shipped.items() for f in (REPO / src).rglob("*")
               if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc"
               and not (dst / f.relative_to(REPO / src)).is_file()]
    assert missing == [], "add these to [tool.setuptools.package-data] in pyproject.toml"
    assert list((site / "planners" / "llm" / "prompts").glob("*.j2")), "no prompt templates shipped"


def test_wheel_install_env_check_setup_and_doctor_from_another_folder(wheel_venv: Path, tools_env: Path,
                                                                      tmp_path: Path) -> None:
    """Issue 32 item 2: outside the source tree the tool env's check imported ftagent and failed."""
    from ftagent.runners.toolenv import MARKER, requirements_hash
    from tests.fakes.toolenv import make_fake_tool_env
    from tests.helpers.wheel_venv import assert_imports_wheel, outside_env

    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    env = outside_env({"FT_TOOLS_ENV": str(tools_env), "FT_FILE_PATH": str(tmp_path / "ff"),
                       "FT_ENV_TYPE": "local", "FT_SANDBOX": "auto", "HF_HUB_OFFLINE": "1", "COLUMNS": "200"})
    ftagent = str(wheel_venv / "bin" / "ftagent")
    assert_imports_wheel(wheel_venv, cwd, env)
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
