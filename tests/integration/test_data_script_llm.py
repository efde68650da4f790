"""The data prompt's LLM recipe runs in the environment data scripts get (the tool env).

The data coder's prompt tells an LLM-written ``process_data.py`` how to call an LLM. This runs that
recipe — the ``openai`` SDK with the key and base URL from the environment, a model from
``STRONG_MODEL_POOL`` — with the tool env's Python and the environment :class:`DataProcessor` gives a
script, against the session's real gateway in front of a fake upstream. (The prompt once named
``litellm``, which the tool env does not have: every LLM-using script would have died on import.)
"""

from __future__ import annotations

import json
import os
import subprocess
from types import SimpleNamespace

import pytest

from ftagent.core.settings import FTSettings, LLMSettings
from ftagent.llm.gateway import LLMGateway
from ftagent.planners.llm.templates import render
from ftagent.tools.llamafactory.data_script import DataProcessor
from tests.fakes.openai_server import FakeOpenAIServer, Reply

pytestmark = pytest.mark.integration

RECIPE = r'''
import concurrent.futures, json, os
import openai
client = openai.OpenAI(timeout=120)
pool = json.loads(os.environ["STRONG_MODEL_POOL"])
with concurrent.futures.ThreadPoolExecutor(max_workers=int(os.environ.get("FT_API_MAX_WORKERS", "8"))) as ex:
    replies = list(ex.map(lambda i: client.chat.completions.create(
        model=pool[i % len(pool)], messages=[{"role": "user", "content": f"row {i}"}]).choices[0].message.content,
        range(2)))
print(json.dumps(replies))
'''


def test_the_prompt_recipe_reaches_the_llm_from_the_tool_env(tools_python, tmp_path):
    prompt = render("data_coder.j2", upper_data_size_limit=100, max_position_embeddings=512,
                             llm_pools=True, force_think_token=False, data_shape="")  # "": an SFT loop
    assert "openai.OpenAI(" in prompt and "litellm.completion" not in prompt
    ft = FTSettings(strong_models=["openai/gpt-4o-mini"], weak_models=[])
    with FakeOpenAIServer() as upstream:
        upstream.queue(Reply("one"), Reply("two"))
        llm = LLMSettings(chat_model="openai/planner", openai_api_key="sk-real-0001",
                          openai_api_base=upstream.base_url, chat_stream=False, max_retry=0)
        with LLMGateway(llm, ft, tmp_path) as gateway:
            processor = DataProcessor(SimpleNamespace(dataset_root=str(tmp_path)), SimpleNamespace(ft=ft, llm=llm),
                                      runner=None, input_columns=["question"], answer_column="answer", llm_gateway_url=gateway.url,
                                      llm_gateway_token=gateway.token)
            env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI")}
            env.update(processor.script_env())
            res = subprocess.run([str(tools_python), "-c", RECIPE], env=env, capture_output=True, text=True,
                                 timeout=300)
        assert res.returncode == 0, res.stderr[-2000:]
        assert sorted(json.loads(res.stdout.strip().splitlines()[-1])) == ["one", "two"]
        assert len(upstream.chat_requests) == 2
        assert all(r.headers.get("authorization") == "Bearer sk-real-0001" for r in upstream.chat_requests)
    assert [json.loads(p.read_text())["stage"] for p in sorted((tmp_path / "llm").glob("*.json"))] == \
        ["data_script", "data_script"]
