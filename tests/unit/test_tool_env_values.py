"""What a tool process gets of ftagent's environment is judged by value, not only by name (issue 39, red team B5).

``passthrough_env`` is where every runner (local, conda, Docker, the vLLM server) starts a tool's environment,
and the data script -- code an LLM wrote -- is a tool process. A variable on its list whose *name* is harmless
can carry a credential in its *value*: ``HF_ENDPOINT=https://user:password@mirror``, a ``?token=`` in a URL, a key
pasted into ``TZ``. The red team's ``tests/unit/test_redteam39_env.py`` covers the three URL variables it found;
these cover the rule for any variable, the runners that add variables of their own, and that what a tool needs
still reaches it.

Fail-before (main at d29e192): 10 of the 11 fail there (the values passed unchanged; PIP_INDEX_URL was on the
list; ``tool_value`` did not exist); ``test_what_a_tool_needs_still_reaches_it`` holds before and after.
"""

from __future__ import annotations

import logging

import pytest

from ftagent.core import redact
from ftagent.runners.conda import CondaRunner
from ftagent.runners.local import LocalRunner
from ftagent.runners.process import PASSTHROUGH_VARS, passthrough_env, tool_value

SECRET = "S3cretPipPass77"


def test_a_url_keeps_its_host_and_loses_its_credentials():
    env = passthrough_env({"HF_ENDPOINT": f"https://ci-bot:{SECRET}@hf-mirror.example.com/base"})
    assert env["HF_ENDPOINT"] == "https://hf-mirror.example.com/base"


@pytest.mark.parametrize(("name", "value"), [
    ("HF_ENDPOINT", f"https://hf-mirror.example.com/?access_token={SECRET}"),
    ("TZ", "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv"),
    ("HF_HOME", f"/data/hf password={SECRET}"),
    ("LANG", "ghp_0123456789abcdefghijABCDEFGHIJ012345"),
])
def test_a_value_the_masker_would_mask_is_not_passed(name, value, caplog):
    """Not masked (a masked value is as broken as none): dropped, with a warning that names the variable only."""
    with caplog.at_level(logging.WARNING, logger="ftagent.runners.process"):
        env = passthrough_env({name: value})
    assert name not in env
    assert value not in caplog.text and SECRET not in caplog.text


def test_a_secret_ftagent_was_configured_with_is_not_passed_under_any_name():
    redact.register_secret("a-registered-key-" + SECRET)
    assert "TMPDIR" not in passthrough_env({"TMPDIR": "/tmp/a-registered-key-" + SECRET})


def test_no_pip_setting_reaches_a_tool_process():
    """No tool process installs packages; the installers read the index from ftagent's own environment."""
    assert not [v for v in PASSTHROUGH_VARS if v.startswith("PIP_")]
    env = passthrough_env({"PIP_INDEX_URL": "https://pypi.example/simple", "PIP_EXTRA_INDEX_URL": "https://x/simple"})
    assert not [k for k in env if k.startswith("PIP_")]


def test_what_a_tool_needs_still_reaches_it():
    """The honest values of every variable on the list pass unchanged (paths, offline flags, GPU ids, a mirror)."""
    source = {
        "HOME": "/home/alice", "LANG": "C.UTF-8", "TZ": "Europe/Berlin", "TMPDIR": "/scratch/tmp",
        "HF_HOME": "/data/hf", "HF_HUB_CACHE": "/data/hf/hub", "HF_HUB_OFFLINE": "1",
        "HF_ENDPOINT": "https://hf-mirror.com", "COMPASS_DATA_CACHE": "/data/oc",
        "CUDA_VISIBLE_DEVICES": "GPU-8f3a2c1e-4b5d-6e7f-8a9b-0c1d2e3f4a5b,MIG-2b4c6d8e-0f1a-2b3c-4d5e-6f7a8b9c0d1e",
        "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64:/cm/shared/apps/cuda12.4/lib64:/opt/conda/lib",
        "CUDA_HOME": "/usr/local/cuda-12.4", "NCCL_SOCKET_IFNAME": "^lo,docker0", "OMP_NUM_THREADS": "8",
    }
    env = passthrough_env(source)
    assert {k: env.get(k) for k in source} == source


def test_the_data_scripts_environment_holds_no_credential_of_ftagents(monkeypatch, tmp_path):
    """Through the local runner's whole environment (what the sandboxed data script gets)."""
    monkeypatch.setenv("HF_ENDPOINT", f"https://u:{SECRET}@mirror.example.com")
    monkeypatch.setenv("PIP_INDEX_URL", f"https://u:{SECRET}@pypi.example.com/simple")
    monkeypatch.setenv("COMPASS_DATA_CACHE", f"/data/oc?token={SECRET}")
    env = LocalRunner(tmp_path / "tools", sandbox="none").build_env({"FT_DATASETS_DIR": str(tmp_path)}, None)
    assert [k for k, v in env.items() if SECRET in v] == []
    assert env["HF_ENDPOINT"] == "https://mirror.example.com"


def test_the_conda_runners_own_variables_are_judged_by_value(monkeypatch, tmp_path):
    """The conda runner adds CONDA_* / MAMBA_* of its own: by value too (a channel URL with a password)."""
    monkeypatch.setenv("CONDA_CHANNEL_ALIAS", f"https://u:{SECRET}@conda.example.com")
    monkeypatch.setenv("MAMBA_ROOT_PREFIX", "/opt/mamba")
    seen: dict[str, str] = {}

    def fake_run_process(argv, *, cwd, env, **kwargs):
        seen.update(env)
        from ftagent.runners.base import RunResult
        return RunResult(exit_code=0, duration_s=0.0)

    monkeypatch.setattr("ftagent.runners.conda.run_process", fake_run_process)
    runner = CondaRunner("ft-tools", conda="conda", sandbox="none")
    runner._ready = True  # the env exists (no conda here): only the command's environment is under test
    runner.run(["python", "-c", "pass"], tool="data", workdir=tmp_path)
    assert seen["CONDA_CHANNEL_ALIAS"] == "https://conda.example.com" and seen["MAMBA_ROOT_PREFIX"] == "/opt/mamba"
    assert [k for k, v in seen.items() if SECRET in v] == []


def test_a_secret_name_is_never_passed_whatever_its_value():
    assert tool_value("HF_TOKEN", "harmless") is None
