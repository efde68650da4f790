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
