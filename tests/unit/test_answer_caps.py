"""Answer-token caps per model (``inference.answer_token_limit``): one rule for the evaluator's
dataset blocks and the planner's brief.

A direct-answer model gets the smaller of the benchmark's and the model's cap; a thinking model
(``enable_thinking`` in configs/models.yaml) the larger, within its context window, so that the
benchmarks' answer-sized caps (MMLU 32, FinanceIQ 64, AIME 8,192) cannot cut its reasoning.
"""

from pathlib import Path

import pytest

from ftagent.benchmarks import get_benchmark
from ftagent.benchmarks.prepared import prepare_benchmark
from ftagent.core.settings import load_settings
from ftagent.tools.opencompass.inference import answer_token_limit, eval_decoding, inference_config
from ftagent.tools.opencompass.render import ModelSpec, render_config
from ftagent.tools.opencompass.run_job import EvalJob

QWEN3 = "Qwen/Qwen3-8B"


def test_rule():
    assert answer_token_limit(32, 8192) == 32  # direct answers: the smaller
    assert answer_token_limit(16384, 4096) == 4096
    assert answer_token_limit(32, 38912, thinking=True) == 38912  # thinking: the larger
    assert answer_token_limit(65536, 38912, thinking=True, max_seq_len=40960) == 40960  # within the context
    assert answer_token_limit(None, 512) == 512 and answer_token_limit(None, None) is None
    assert answer_token_limit(64, None, thinking=True) == 64


@pytest.mark.parametrize(("benchmark", "own_cap"), [("mmlu", 32), ("FinanceIQ_gen", 64), ("aime25", 8192)])
def test_thinking_model_keeps_its_cap(benchmark, own_cap):
    spec = get_benchmark(benchmark).spec
    assert spec.max_out_len == own_cap  # the benchmark's answer-sized cap
    assert inference_config(QWEN3, 1)["enable_thinking"] is True
    assert eval_decoding(QWEN3, 1, spec.max_out_len).max_out_len == 38912
    assert eval_decoding("Qwen/Qwen2.5-7B-Instruct", 1, spec.max_out_len).max_out_len == own_cap


def _thinking_spec() -> ModelSpec:
    inf = inference_config(QWEN3, 1)
    return ModelSpec(abbr="ft-demo_add", path="/m", tokenizer_path="/m", max_seq_len=inf["max_seq_len"],
                     max_out_len=inf["max_out_len"], enable_thinking=inf["enable_thinking"])


def test_evaluator_blocks_and_brief_agree(tmp_path: Path):
    """The dataset block OpenCompass gets carries the cap the brief shows (demo_add's own cap: 16)."""
    root = tmp_path / "benchmarks"
    bench_dir = prepare_benchmark(get_benchmark("demo_add"), root, 4)
    settings = load_settings(file_path=tmp_path / "ft")
    for mspec, name in ((_thinking_spec(), QWEN3),
                        (ModelSpec(abbr="ft-demo_add", path="/m", tokenizer_path="/m", max_out_len=32),
                         "builtin/tiny-qwen2")):
        job = EvalJob(benchmark="demo_add", adapter=get_benchmark("demo_add"), settings=settings, runner=None,  # type: ignore[arg-type]
                   work_dir=tmp_path / "w",
                   mspec=mspec, root=root, bench_dir=bench_dir, timeout=None, on_progress=None)
        blocks = job.blocks("validation", suffix=False)
        brief_cap = eval_decoding(name, 1, get_benchmark("demo_add").spec.max_out_len).max_out_len
        assert {b.max_out_len for b in blocks} == {brief_cap}
        source = render_config(blocks, mspec, benchmark="demo_add", split="validation")
        assert f"GenInferencer, max_out_len={brief_cap})" in source
    assert brief_cap == 16  # tiny-qwen2 answers directly: the benchmark's cap
