"""Real OpenCompass (CPU, tiny model) with the LLM judge behind the session's judge gateway.

A user benchmark YAML with ``judge: true`` (math-verify, then OpenCompass's CascadeEvaluator with an
``OpenAISDK`` judge) on two items the tiny model cannot solve: both are rule misses, so both go to the
judge. The judge upstream is the repository's fake OpenAI server behind :meth:`LLMGateway.for_judge`
(stage ``judge``). The budget holds one judge call: the first is answered ``A`` and recorded with its
cost, the second gets 402, which the rendered config maps to a reply that keeps the rule score.
"""

from __future__ import annotations

import json
from pathlib import Path

import litellm
import pytest

from ftagent.benchmarks import get_benchmark
from ftagent.core.settings import load_settings
from ftagent.engine.event_log import EventLog
from ftagent.engine.events import read_events
from ftagent.llm.gateway import LLMGateway
from ftagent.runners.local import LocalRunner
from ftagent.tools.opencompass.runs import evaluate_splits_of_path
from tests.fakes.openai_server import FakeOpenAIServer, Reply

pytestmark = pytest.mark.integration
TIKTOKEN_DIR = str(Path(litellm.__file__).parent / "litellm_core_utils" / "tokenizers")
REAL_KEY = "sk-REAL-JUDGE-KEY-0042"
BENCH = """\
name: judge_mini
metric: math_verify
description: "Two sums; rule misses go to the LLM judge."
data: {file: judge_mini.jsonl}
prompt: "{question}"
answer: answer
judge: true
max_out_len: 8
"""


class EnvSpy(LocalRunner):
    """The local runner, keeping the env every command got."""

    envs: list[dict[str, str]] = []

    def run(self, cmd, **kw):  # noqa: ANN001, ANN003, ANN201
        self.envs.append(dict(kw.get("env") or {}))
        # offline here: OpenAISDK's tiktoken gets cl100k_base from LiteLLM's bundled copy (named by the URL's sha1)
        kw["env"] = {**(kw.get("env") or {}), "TIKTOKEN_CACHE_DIR": TIKTOKEN_DIR}
        return super().run(cmd, **kw)


def test_judge_calls_go_through_the_gateway_are_recorded_and_budgeted(tools_env, tiny_model, tmp_path, monkeypatch):
    bench_dir = tmp_path / "benchmarks"
    bench_dir.mkdir()
    (bench_dir / "judge_mini.yaml").write_text(BENCH, encoding="utf-8")
    rows = [{"question": f"What is {a} + {b}?", "answer": str(a + b)} for a, b in ((123, 456), (211, 307),
                                                                                   (405, 118), (333, 104))]
    (bench_dir / "judge_mini.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    session = tmp_path / "session"
    session.mkdir()
    with FakeOpenAIServer() as srv:
        srv.queue(Reply("A", usage=(1000, 500)), Reply("A", usage=(1000, 500)))
        monkeypatch.setenv("FT_BENCHMARK_PATHS", str(bench_dir))
        monkeypatch.setenv("FT_JUDGE_API_KEY", REAL_KEY)
        monkeypatch.setenv("FT_JUDGE_API_BASE", srv.base_url)
        monkeypatch.setenv("FT_JUDGE_MODEL", "gpt-4")  # tiktoken knows it (OpenAISDK counts tokens offline)
        monkeypatch.setenv("FT_JUDGE_RETRY", "2")
        monkeypatch.setenv("FT_LLM_BUDGET_USD", "0.05")  # gpt-4: 1000 + 500 tokens = $0.06, one call
        settings = load_settings(file_path=tmp_path / "ft", benchmark_limit=2)
        events = EventLog(session / "events.jsonl")
        warnings: list[str] = []
        runner = EnvSpy(tools_env, sandbox="none")
        with LLMGateway.for_judge(settings.llm, settings.ft, session, emit=events.emit) as gw:
            settings.judge_route = gw
            gw_url = gw.url
            out = evaluate_splits_of_path(tiny_model, None, benchmark=get_benchmark("judge_mini"), splits=("validation",),
                                          settings=settings, runner=runner, work_dir=tmp_path / "work",
                                          model_name="builtin/tiny-qwen2", timeout=900, on_warning=warnings.append)
        sent = srv.chat_requests
        fake_url = srv.base_url
        all_text = srv.all_request_text()
    result = out.require("validation")
    assert len(sent) == 1  # the second judge call was refused by the gateway, never forwarded
    assert sent[0].headers["authorization"] == f"Bearer {REAL_KEY}"  # the real key goes upstream only
    assert gw.token not in all_text and gw.refused == 1
    oc_env = runner.envs[-1]
    assert REAL_KEY not in json.dumps(oc_env) and oc_env["OPENAI_API_KEY"] == gw.token
    config = next((tmp_path / "work").glob("oc_*.py")).read_text(encoding="utf-8")
    assert gw_url in config and REAL_KEY not in config and fake_url not in config
    [record] = [json.loads(p.read_text()) for p in (session / "llm").glob("*.json")]
    assert record["stage"] == "judge" and record["model"] == "gpt-4"
    assert (record["prompt_tokens"], record["completion_tokens"]) == (1000, 500)
    assert record["cost_usd"] == pytest.approx(0.06)
    assert REAL_KEY not in json.dumps(record)
    [call] = [e for e in read_events(session / "events.jsonl") if e.type == "llm_call"]
    assert call.stage == "judge" and call.cost_usd == pytest.approx(0.06)
    assert result.score == pytest.approx(50.0) or result.score == pytest.approx(0.5)  # judged A; rule-only miss
    assert warnings and "FT_LLM_BUDGET_USD" in warnings[-1] and "not cached" in warnings[-1]
    assert not list(Path(tmp_path / "ft" / "eval_cache").glob("*.json"))  # a rule-only score is never cached
