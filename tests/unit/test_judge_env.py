"""Issue 30 finding 8: the LLM judge's tiktoken files come from a cache on the host (no download in the
sandbox), the host's proxies reach the judge's process, and its max_seq_len holds the longest answer."""

from __future__ import annotations

import ast
import hashlib
import socket
from pathlib import Path

import pytest

from ftagent.benchmarks import get_benchmark
from ftagent.benchmarks.base import DatasetBlock
from ftagent.core.paths import tiktoken_cache_dir
from ftagent.core.settings import load_settings
from ftagent.tools.opencompass.judge import TIKTOKEN_FILES, cache_name, prefill_tiktoken_cache
from ftagent.tools.opencompass.render import JUDGE_PROMPT, ModelSpec, render_config
from ftagent.tools.opencompass.runs import evaluate_splits_of_path
from tests.helpers.weights import safetensors_bytes
from tests.unit.test_oc_splits import FakeOpenCompass

QWEN3_THINKING_CAP = 38_912  # Qwen3's answer cap for thinking (models.yaml / answer_token_limit)


def _judge_cfg(src: str) -> dict:
    call = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.keyword) and n.arg == "judge_cfg").value
    return {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg != "type"}


def test_judge_max_seq_len_holds_a_thinking_answer_and_the_prompt():
    judge = {"model": "gpt-4o-mini", "key_env": "ENV", "api_base": "http://j/"}
    block = DatasetBlock(abbr="aime25", path="/d/validation.jsonl", input_columns=["question"],
                         output_column="answer", rounds=[{"role": "HUMAN", "prompt": "{question}"}],
                         max_out_len=QWEN3_THINKING_CAP,
                         evaluator="ftagent.tools.opencompass.oc_ext:BoxedIntAccEvaluator", judge=judge)
    cfg = _judge_cfg(render_config([block], ModelSpec(abbr="m", path="/m", tokenizer_path="/m"),
                                   benchmark="aime25", split="validation"))
    prompt_tokens = len(JUDGE_PROMPT) // 2  # generous: ~4 characters a token
    # OpenCompass (openai_api.py _preprocess_messages) keeps max_seq_len - input - 100 for the reply
    assert cfg["max_seq_len"] >= QWEN3_THINKING_CAP + prompt_tokens + cfg["max_out_len"] + 100
    assert cfg["mode"] != "none"  # an over-long prompt is trimmed, not a ValueError that fails the run
    assert cfg["tokenizer_path"] == "gpt-4"  # cl100k_base: the one file the cache holds for any judge name


def test_prefilled_cache_serves_tiktoken_without_network(tmp_path, monkeypatch):
    tiktoken_load = pytest.importorskip("tiktoken.load")
    cache = tmp_path / "tiktoken_cache"
    assert prefill_tiktoken_cache(cache, download=False) == []  # from LiteLLM's bundled copies
    for url, sha256 in TIKTOKEN_FILES.values():
        assert hashlib.sha256((cache / cache_name(url)).read_bytes()).hexdigest() == sha256

    def no_network(*_a, **_k):
        raise OSError("no network in this test")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    for url, sha256 in TIKTOKEN_FILES.values():
        assert len(tiktoken_load.read_file_cached(url, sha256)) > 1_000_000
    assert prefill_tiktoken_cache(cache, download=False) == []  # idempotent


class _JudgedDemo:
    """demo_add with the session's judge attached to its blocks (demo_add itself has no judge)."""

    def __init__(self) -> None:
        self.inner = get_benchmark("demo_add")

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def dataset_blocks(self, root, split, *, judge=None):
        return [b.model_copy(update={"judge": judge}) for b in self.inner.dataset_blocks(root, split)]


class _Recording(FakeOpenCompass):
    def __init__(self) -> None:
        super().__init__()
        self.envs: list[dict] = []
        self.mounts: list[list] = []

    def run(self, cmd, *, tool, workdir, env=None, mounts=None, **kw):
        if cmd[0] == "opencompass":  # not the weights check before it (issue 43)
            self.envs.append(dict(env or {}))
            self.mounts.append(list(mounts or []))
        return super().run(cmd, tool=tool, workdir=workdir, env=env, mounts=mounts, **kw)


def test_judged_run_gets_the_cache_and_the_proxies(tmp_path, monkeypatch):
    monkeypatch.setenv("FT_JUDGE_API_KEY", "sk-judge-secret-0001")
    monkeypatch.setenv("FT_JUDGE_MODEL", "gpt-4o-mini")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("no_proxy", "intranet.example")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(safetensors_bytes(b"weights"))
    (model / "chat_template.jinja").write_text("{{ messages }}")
    settings = load_settings(file_path=tmp_path / "ft", benchmark_limit=4)
    runner = _Recording()
    evaluate_splits_of_path(model, None, benchmark=_JudgedDemo(), splits=("validation",), settings=settings,
                            runner=runner, work_dir=tmp_path / "work")
    env, mounts = runner.envs[0], runner.mounts[0]
    cache = tiktoken_cache_dir(tmp_path / "ft").resolve()
    assert env["TIKTOKEN_CACHE_DIR"] == str(cache)
    assert all((cache / cache_name(url)).is_file() for url, _ in TIKTOKEN_FILES.values())
    assert any(Path(m.source) == cache and m.read_only for m in mounts)
    assert env["HTTPS_PROXY"] == "http://proxy.example:3128" and "intranet.example" in env["no_proxy"]
    assert "judge_cfg=dict(type=OpenAISDK" in runner.configs[0]
