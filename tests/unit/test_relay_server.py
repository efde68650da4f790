"""The relay server: requests become files, answer files become replies (plain and streaming)."""

from __future__ import annotations

import json
import os
import threading
import time

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from ftagent.core.settings import LLMSettings  # noqa: E402
from ftagent.llm.client import LLMClient  # noqa: E402
from tests.fakes.relay_server import RelayServer  # noqa: E402


def _answer(folder, n: int, text: str) -> None:
    def write() -> None:
        req = folder / f"req_{n}.json"
        while not req.exists():
            time.sleep(0.05)
        (folder / f"resp_{n}.txt").write_text(text, encoding="utf-8")

    threading.Thread(target=write, daemon=True).start()


def test_relay_plain_and_streaming(tmp_path):
    with RelayServer(tmp_path, timeout=20, poll=0.05) as relay:
        for n, stream in ((1, False), (2, True)):
            _answer(tmp_path, n, f"answer {n}")
            llm = LLMSettings(chat_model="relay", openai_api_base=relay.base_url, openai_api_key="x",
                              chat_stream=stream, max_retry=0)
            assert LLMClient(llm).chat([{"role": "user", "content": f"question {n}"}]) == f"answer {n}"
            req = json.loads((tmp_path / f"req_{n}.json").read_text())
            assert req["messages"][-1]["content"] == f"question {n}" and req["model"] == "relay"
            assert req["answer_with"] == f"resp_{n}.txt" and "temperature" in req["params"]


def test_relay_times_out_with_504(tmp_path):
    import httpx

    with RelayServer(tmp_path, timeout=0.3, poll=0.05) as relay:
        r = httpx.post(f"{relay.base_url}/chat/completions", json={"model": "m", "messages": []}, timeout=10)
    assert r.status_code == 504 and (tmp_path / "req_1.json").exists()
