"""Issue 32 item 8: `make demo` installs only what the demo needs (no Chromium, no Docker, nothing as root) and
says so; `make test` says what it will install (system packages, engine, images) before it installs anything."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _dry_run(target: str, **env: str) -> list[str]:
    done = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env})
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_demo_installs_no_system_package_and_no_docker():
    lines = _dry_run("demo")
    text = "\n".join(lines).lower()
    assert "ftagent demo" in text
    commands = [line.split("echo")[0] for line in text.splitlines()]  # what runs, not what is said
    for word in ("system-packages", "chromium", "docker", "apt-get", "sudo"):
        assert not any(word in command for command in commands), (word, text)
    assert "no system package, no docker" in text  # and it says so


def test_make_test_says_what_it_installs_before_installing():
    lines = _dry_run("test")
    plan = next(i for i, line in enumerate(lines) if "system-packages.sh --plan" in line)
    docker_plan = next(i for i, line in enumerate(lines) if "docker.sh plan" in line)
    install = next(i for i, line in enumerate(lines) if "system-packages.sh" in line and "--plan" not in line)
    engine = next(i for i, line in enumerate(lines) if "with-docker.sh" in line)
    assert plan < install and docker_plan < install < engine


def _fake_bin(tmp_path: Path) -> tuple[Path, Path]:
    """A PATH with the shell tools the script uses and an apt-get that records being called."""
    bin_dir, marker = tmp_path / "bin", tmp_path / "apt-get-was-called"
    bin_dir.mkdir()
    for tool in ("bash", "id", "sed", "cat"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    (bin_dir / "apt-get").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (bin_dir / "apt-get").chmod(0o755)
    return bin_dir, marker


def test_system_packages_plan_names_them_and_installs_nothing(tmp_path):
    bin_dir, marker = _fake_bin(tmp_path)
    done = subprocess.run([str(bin_dir / "bash"), ".ci/system-packages.sh", "--plan"], cwd=ROOT, text=True,
                          capture_output=True, env={"PATH": str(bin_dir)}, timeout=60)
    assert done.returncode == 0, done.stderr
    for name in ("tmux", "jq", "bubblewrap", "chromium (the UI screenshot test)"):
        assert name in done.stdout, done.stdout
    assert not marker.exists()
    if os.getuid() == 0:
        assert "will apt-get install as root" in done.stdout and "SKIP_SYSTEM=1 skips" in done.stdout


def test_skip_system_installs_nothing():
    done = subprocess.run(["make", "-s", "system"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SKIP_SYSTEM": "1"})
    assert done.returncode == 0 and "SKIP_SYSTEM=1: none installed" in done.stdout, done.stdout + done.stderr


def test_docker_plan_is_a_plan(tmp_path):
    done = subprocess.run(["bash", ".ci/docker.sh", "plan"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "FTAGENT_DOCKER": "0"})
    assert done.returncode == 0 and "FTAGENT_DOCKER=0: no engine, no images" in done.stdout
    done = subprocess.run(["bash", ".ci/docker.sh", "plan"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "about 3 GB" in done.stdout and "FTAGENT_DOCKER=0 skips" in done.stdout
