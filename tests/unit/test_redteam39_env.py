"""Red team of issue 39: a credential in ftagent's environment reaches the code an LLM wrote.

Every runner builds a tool's environment from :func:`ftagent.runners.process.passthrough_env` (local, conda, Docker,
the vLLM server): variables on a fixed list, minus those whose *name* looks secret (``*KEY*``, ``*TOKEN*`` ...).
``PIP_INDEX_URL`` and ``PIP_EXTRA_INDEX_URL`` are on the list, and a private index's URL carries its credentials
(``https://user:password@host/simple``, pip's documented form, what Artifactory and Nexus hand out); ``HF_ENDPOINT``
and ``HTTPS``-style URLs can too. The sandboxed data script -- code an LLM wrote -- gets them, and can print them
(into the feedback the planner's LLM reads) or encode them past the log masker. No tool ftagent runs installs
packages: the list needs no index URL. ``tests/integration/test_redteam39_session.py`` shows the same through a
real session (the data script's ``os.environ``).

Fails on the code attacked (main at c7fcfe4).
"""

from __future__ import annotations

import pytest

from ftagent.runners.local import LocalRunner
from ftagent.runners.process import passthrough_env

SECRET = "S3cretPipPass77"
URLS = {
    "PIP_INDEX_URL": f"https://ci-bot:{SECRET}@artifactory.example.com/api/pypi/simple",
    "PIP_EXTRA_INDEX_URL": f"https://ci-bot:{SECRET}@nexus.example.com/repository/pypi/simple",
    "HF_ENDPOINT": f"https://ci-bot:{SECRET}@hf-mirror.example.com",
}


@pytest.mark.parametrize("name", sorted(URLS))
def test_a_credential_in_a_passed_through_url_never_reaches_a_tool_process(name, monkeypatch, tmp_path):
    """Rule: nothing secret reaches where generated code runs (a credential inside a value, not only a secret name)."""
    monkeypatch.setenv(name, URLS[name])
    assert SECRET not in "".join(passthrough_env().values()), f"{name}'s password is in every tool's environment"
    runner = LocalRunner(tmp_path / "tools", sandbox="none")  # the data script's environment, as the runner builds it
    env = runner.build_env({"FT_DATASETS_DIR": str(tmp_path)}, None)
    assert not [k for k, v in env.items() if SECRET in v], f"the data script's environment holds {name}'s password"
