"""Issue 43: Ctrl-C while the LLM planner waits on an answer ends the run at once (SIGTERM already did).

The real ``ftagent llm_finetune`` (``python -m ftagent``) with the LLM planner, pointed at the scripted OpenAI
server of tests/fakes answering after 10 minutes. Its first LLM call is the dataset selection (the benchmark
names no related dataset, so the rule cannot decide). The CLI is started the way a script starts a background
job (``cmd &`` without job control, nohup, a relay harness): SIGINT inherited as ignored, where Python installs
no KeyboardInterrupt handler. On d350dfe the run went on (the relay play: ≥ 14 s, until SIGTERM).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAIServer, Reply

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def _benchmark(tmp_path: Path) -> Path:
    text = (REPO / "configs" / "benchmarks" / "demo_add.yaml").read_text(encoding="utf-8")
    assert "related_datasets: [demo_add]" in text
    path = tmp_path / "demo_ambiguous.yaml"
    path.write_text(text.replace("name: demo_add", "name: demo_ambiguous")
                    .replace("related_datasets: [demo_add]", "related_datasets: []"), encoding="utf-8")
    return path


def test_ctrl_c_while_the_llm_planner_waits_ends_the_run_at_once(tmp_path, tools_env, tiny_model):
    with FakeOpenAIServer(default=Reply(content='{"datasets": ["demo_add"], "reason": "-"}', delay=600)) as srv:
        env = {**os.environ, "PYTHONPATH": str(REPO), "FT_PLANNER": "llm", "CHAT_MODEL": "fake-model",
               "OPENAI_API_BASE": srv.base_url, "OPENAI_API_KEY": "sk-test-key", "FT_FILE_PATH": str(tmp_path / "ft"),
               "LOG_PATH": str(tmp_path / "log"), "WORKSPACE_PATH": str(tmp_path / "ws"), "FT_ENV_TYPE": "local",
               "FT_ALLOW_UNSANDBOXED": "1", "FT_TOOLS_ENV": str(tools_env)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "ftagent", "llm_finetune", "--benchmark", str(_benchmark(tmp_path)),
             "--base-model", str(tiny_model)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))  # as a background job gets it
        try:
            deadline = time.monotonic() + 300
            while not srv.chat_requests:
                assert proc.poll() is None, proc.communicate()[0][-3000:]
                assert time.monotonic() < deadline, "the LLM planner was never asked"
                time.sleep(0.2)
            time.sleep(1.0)  # it is waiting on the answer now
            sent = time.monotonic()
            os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends: the whole group
            try:
                out, _ = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                pytest.fail("still running 30 s after Ctrl-C (d350dfe: SIGINT was dropped)")
            took = time.monotonic() - sent
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert proc.returncode == 130, out[-3000:]  # 128 + SIGINT, as shells report it
    assert took < 15, f"{took:.1f} s from Ctrl-C to exit"
    assert len(srv.chat_requests) == 1  # not asked again
