import json

import pytest

from ftagent.benchmarks import benchmark_keys, describe, describe_all, get_benchmark
from ftagent.benchmarks.base import BenchmarkAdapter, read_jsonl
from ftagent.benchmarks.code import humaneval_item, mbpp_item
from ftagent.benchmarks.demo import demo_add_items, demo_add_pairs
from ftagent.benchmarks.knowledge import mmlu_item
from ftagent.benchmarks.math import gsm8k_gold, last_boxed_content
from ftagent.core.errors import EnvironmentFailure, UserInputError

KEYS = {"demo_add", "aime24", "aime25", "gsm8k", "math", "mmlu", "humaneval", "mbpp", "FinanceIQ_gen"}


def test_registry_lists_all_keys_and_describes():
    assert KEYS <= set(benchmark_keys())
    lines = describe_all()
    assert len(lines) == len(benchmark_keys())
    assert any(line.startswith("humaneval") and "pass@1 (max)" in line for line in lines)
    text = describe("aime25")
    assert "deepscaler" in text and "AIME 2025" in text  # description from configs/benchmarks/aime25.yaml


def test_unknown_key_did_you_mean():
    with pytest.raises(UserInputError, match="Did you mean .demo_add."):
        get_benchmark("demo_ad")


@pytest.mark.parametrize("key", sorted(KEYS))
def test_adapters_satisfy_protocol(key):
    adapter = get_benchmark(key)
    assert isinstance(adapter, BenchmarkAdapter)
    assert adapter.spec.key == key and adapter.spec.max_out_len > 0


def test_demo_add_items_deterministic_and_distinct():
    items = demo_add_items()
    assert items == demo_add_items()
    assert len(items) == 200 and len(demo_add_pairs()) == 200
    for it in items[:50]:
        assert 10 <= it["a"] <= 99 and 10 <= it["b"] <= 99
        assert it["answer"] == str(it["a"] + it["b"])
        assert it["question"] == f"What is {it['a']} + {it['b']}?"
    assert demo_add_items(seed=1) != items


def test_demo_prepare_writes_disjoint_splits(tmp_path):
    adapter = get_benchmark("demo_add")
    out = adapter.prepare(tmp_path)
    val, test = adapter.load_items(tmp_path, "validation"), adapter.load_items(tmp_path, "test")
    assert len(val) == len(test) == 100
    assert not {r["question"] for r in val} & {r["question"] for r in test}
    assert read_jsonl(out / "validation" / "default.jsonl") == val
    blocks = adapter.dataset_blocks(tmp_path, "test")
    assert len(blocks) == 1 and blocks[0].path.endswith("test/default.jsonl")
    assert "\\boxed{}" in blocks[0].rounds[-1]["prompt"] and "{question}" in blocks[0].rounds[-1]["prompt"]
    adapter.prepare(tmp_path, limit=5)
    assert len(adapter.load_items(tmp_path, "test")) == 5


def test_hub_benchmark_offline_is_environment_failure(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(EnvironmentFailure, match="Hugging Face Hub"):
        get_benchmark("aime24").prepare(tmp_path)


def test_aime_from_published_layouts(tmp_path):
    raw = tmp_path / "aime24" / "raw"
    raw.mkdir(parents=True)
    rows = [{"origin_prompt": f"Find x number {i}.", "gold_answer": str(100 + i)} for i in range(30)]
    (raw / "aime.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (raw / ".complete").write_text("ok")
    adapter = get_benchmark("aime24")
    adapter.prepare(tmp_path)
    val = adapter.load_items(tmp_path, "validation")
    assert len(val) == 15 and all(r["answer"] == str(100 + int(r["question"][14:-1])) for r in val)
    assert adapter.to_item({"Problem": "P", "Answer": 204}, "default") == {"question": "P", "answer": "204"}


def test_math_gold_is_last_boxed():
    row = {"problem": "What is $1+1$?", "solution": "First \\boxed{3} wrong, then $\\boxed{\\frac{1}{2}}$"}
    assert get_benchmark("math").to_item(row, "default")["answer"] == "\\frac{1}{2}"
    assert last_boxed_content("no box") is None
    assert last_boxed_content("\\fbox{7}") == "7"


def test_gsm8k_gold():
    assert gsm8k_gold("3 + 2 = 5\n#### 1,005") == "1005"
    rounds = get_benchmark("gsm8k").rounds(None, "default")
    assert len(rounds) == 9 and rounds[-1]["prompt"].startswith("Question: {question}")
    assert all(r["prompt"].rstrip().split()[-1].isdigit() for r in rounds[1:-1:2])


def test_mmlu_item():
    row = {"question": "2+2?", "subject": "elementary_mathematics", "choices": ["3", "4", "5", "6"], "answer": 1}
    item = mmlu_item(row)
    assert item["answer"] == "B" and item["D"] == "6" and item["subject"] == "elementary mathematics"


def test_financeiq_five_shot(tmp_path):
    adapter = get_benchmark("FinanceIQ_gen")
    subject = adapter.spec.subsets[0]
    raw = tmp_path / "FinanceIQ_gen" / "raw"
    header = "question,A,B,C,D,answer\n"
    for part, n in (("dev", 6), ("test", 9)):
        (raw / "data" / part).mkdir(parents=True, exist_ok=True)
        body = "".join(f"Q{part}{i},a,b,c,d,{'ABCD'[i % 4]}\n" for i in range(n))
        (raw / "data" / part / f"{subject}.csv").write_text(header + body, encoding="utf-8")
    (raw / ".complete").write_text("ok")
    adapter.prepare(tmp_path)
    assert len(adapter.load_items(tmp_path, "validation")) == 4
    blocks = adapter.dataset_blocks(tmp_path, "validation")
    assert len(blocks) == 1 and blocks[0].abbr == f"FinanceIQ_gen-{subject}"
    rounds = blocks[0].rounds
    assert len(rounds) == 11 and rounds[1]["prompt"].startswith("答案是: A")
    assert "Qdev4" in rounds[8]["prompt"] and "{question}" in rounds[-1]["prompt"]


def test_code_items():
    he = humaneval_item({"prompt": "def f(x):\n", "test": "def check(c):\n    assert c(1) == 2", "entry_point": "f"})
    assert he["answer"].rstrip().endswith("check(f)")
    mb = mbpp_item({"text": "Add one.", "test_list": ["assert f(1) == 2"]})
    assert mb["tests"] == "assert f(1) == 2" and mb["prompt"] == ""
