"""Issue 40: no validation or test item reaches the sampling step's prompts, its samples, or the pairs.

Three mechanisms, each attacked through the real entry point:

1. the prompts come from training data only (:func:`ftagent.finetune.prompts.training_prompts`) and pass the
   contamination scan: a training ``data.json`` that copies a validation item fails the loop (DATA) before
   any sample is drawn;
2. the sampling run (:func:`ftagent.tools.opencompass.sampling.sample_training_prompts`) is given the
   training rows only: its OpenCompass config reads the training prompts file, and the runner mounts no
   benchmark folder;
3. preference rows are scanned as the rows they train: a benchmark item hidden in a pair's ``rejected``
   answer fails like one in an SFT ``output``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ftagent.core.errors import ErrorType, StepError
from ftagent.core.paths import benchmark_data_dir
from ftagent.core.trace import Experiment, Trace
from ftagent.core.types import Hypothesis
from ftagent.finetune.prompts import training_prompts
from ftagent.runners.base import RunResult
from ftagent.tools.llamafactory.data_script import DataProcessor
from tests.unit.test_prompts import _demo_scenario, _settings

VALIDATION = [(31, 58), (12, 40)]
TEST = [(70, 21)]


def _bench(scenario) -> Path:
    bench = benchmark_data_dir(scenario.file_path, "demo_add")
    bench.mkdir(parents=True, exist_ok=True)
    for split, pairs in (("validation", VALIDATION), ("test", TEST)):
        (bench / f"{split}.jsonl").write_text("".join(json.dumps({"question": f"What is {a} + {b}?",
                                                                  "answer": str(a + b)}) + "\n" for a, b in pairs))
    return bench


class _Ctx:
    def __init__(self) -> None:
        self.events: list = []

    def emit(self, event) -> None:
        self.events.append(event)

    def limit(self, seconds: float) -> float:
        return seconds


def _sft_loop(tmp_path: Path, rows: list[dict]) -> Trace:
    ws = tmp_path / "loop_0"
    ws.mkdir(parents=True)
    (ws / "data.json").write_text(json.dumps(rows))
    exp = Experiment(loop=0, hypothesis=Hypothesis(hypothesis="sft"), artefacts={"workspace": str(ws)}, val_score=40.0)
    return Trace(experiments=[exp], sota_loop=0)


def _row(a: int, b: int, lead: str = "") -> dict:
    return {"instruction": f"{lead}What is {a} + {b}? Put the final answer in \\boxed{{}}.", "input": "",
            "output": f"\\boxed{{{a + b}}}"}


def test_prompts_come_from_the_start_weights_training_data_and_are_scanned(tmp_path: Path) -> None:
    scenario = _demo_scenario(tmp_path)
    _bench(scenario)
    data = DataProcessor(scenario, _settings(), runner=None, input_columns=["question"], answer_column="answer")  # type: ignore[arg-type]
    trace = _sft_loop(tmp_path, [_row(11, 22), _row(45, 46), _row(11, 22)])
    ctx = _Ctx()
    rows, source = training_prompts(trace, Hypothesis(hypothesis="d", stage="dpo", weights_from=0), tmp_path / "loop_1",
                                    10, data=data, ctx=ctx)
    assert source.startswith("data.json of loop 0") and len(rows) == 2  # one per prompt
    assert rows[0] == {"prompt": "What is 11 + 22? Put the final answer in \\boxed{}.", "gold": "\\boxed{33}"}
    scans = [e for e in ctx.events if e.type == "contamination"]
    assert scans and scans[0].dataset == "training prompts (sampling)" and scans[0].passed


def test_a_training_prompt_that_copies_a_validation_item_fails_before_sampling(tmp_path: Path) -> None:
    scenario = _demo_scenario(tmp_path)
    _bench(scenario)
    data = DataProcessor(scenario, _settings(), runner=None, input_columns=["question"], answer_column="answer")  # type: ignore[arg-type]
    trace = _sft_loop(tmp_path, [_row(11, 22), _row(31, 58, lead="Example: ")])  # validation item 0
    ctx = _Ctx()
    with pytest.raises(StepError) as err:
        training_prompts(trace, Hypothesis(hypothesis="d", stage="dpo", weights_from=0), tmp_path / "l1", 10,
                         data=data, ctx=ctx)
    assert err.value.error_type is ErrorType.DATA and "validation:0" in str(err.value.details)
    assert [e.passed for e in ctx.events if e.type == "contamination"] == [False]


def test_a_benchmark_item_in_a_pair_is_caught_in_either_answer(tmp_path: Path) -> None:
    scenario = _demo_scenario(tmp_path)
    _bench(scenario)
    data = DataProcessor(scenario, _settings(), runner=None, input_columns=["question"], answer_column="answer")  # type: ignore[arg-type]
    clean = [{"instruction": "What is 11 + 22?", "input": "", "chosen": "\\boxed{33}", "rejected": "\\boxed{34}"}]
    data.scan(clean)
    hidden = clean + [{"instruction": "What is 1 + 1?", "input": "", "chosen": "\\boxed{2}",
                       "rejected": "Recall: What is 70 + 21? Put the final answer in \\boxed{}. \\boxed{91}"}]
    with pytest.raises(StepError) as err:
        data.scan(hidden)
    assert "test:0" in str(err.value.details)


HIDDEN = "Recall: What is 70 + 21? Put the final answer in \\boxed{}. \\boxed{91}"  # test item 0 and its gold


def test_a_pair_that_also_carries_an_output_is_scanned_in_chosen_and_rejected(tmp_path: Path) -> None:
    """LLaMA-Factory registers pairs with ``ranking: true`` and trains ``chosen``/``rejected`` whatever else a row
    holds: a clean ``output`` beside them must not stand in for them (on b94d29f the data step's scan_view kept
    such a row whole and scanned its output only: 0 rows flagged)."""
    scenario = _demo_scenario(tmp_path)
    _bench(scenario)
    data = DataProcessor(scenario, _settings(), runner=None, input_columns=["question"], answer_column="answer")  # type: ignore[arg-type]
    disguised = [{"instruction": "What is 1 + 1?", "input": "", "output": "\\boxed{2}", "chosen": HIDDEN,
                  "rejected": "\\boxed{3}"}]
    with pytest.raises(StepError) as err:
        data.scan(disguised)
    assert "test:0" in str(err.value.details)


def test_the_integrity_guard_reads_a_pairs_answers(tmp_path: Path) -> None:
    """The guard's contamination check re-reads the data that trained (on b94d29f it read instruction, input and
    output only: a pair's answers passed it unread)."""
    from ftagent.integrity.training_data import contamination_check

    items = {"demo_add/test:0": ["What is 70 + 21?"], "demo_add/validation:0": ["What is 31 + 58?"]}
    data_file = tmp_path / "data.json"
    data_file.write_text(json.dumps([{"instruction": "What is 1 + 1?", "input": "", "chosen": "\\boxed{2}",
                                      "rejected": HIDDEN}]))
    verdict = contamination_check(data_file, items, {"demo_add/test:0": "91", "demo_add/validation:0": "89"})
    assert verdict.passed is False and "test:0" in verdict.detail, verdict


class _RecordingRunner:
    """Records what the sampling run is given; the run itself 'fails' (no OpenCompass here)."""

    name = "recording"

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def run(self, cmd, **kw):
        self.calls.append({"cmd": cmd, **kw})
        return RunResult(exit_code=1, duration_s=0.0, log_tail="no opencompass in a unit test")


def test_the_sampling_run_reads_training_prompts_and_mounts_no_benchmark_folder(tmp_path: Path, monkeypatch) -> None:
    from ftagent.benchmarks import get_benchmark
    from ftagent.core.settings import load_settings
    from ftagent.tools.opencompass import sampling

    monkeypatch.setenv("FT_FILE_PATH", str(tmp_path / "ft"))
    monkeypatch.setenv("FT_BENCHMARK_LIMIT", "10")
    settings = load_settings()
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    runner = _RecordingRunner()
    from ftagent.benchmarks.prepared import prepare_benchmark
    from ftagent.core.paths import benchmarks_dir

    items = benchmarks_dir(settings.ft.file_path)
    prepare_benchmark(get_benchmark("demo_add"), items, 10)  # the session's items (their rules are read)
    rows = [{"prompt": "What is 11 + 22? Put the final answer in \\boxed{}.", "gold": "\\boxed{33}"}]
    with pytest.raises(StepError):
        sampling.sample_training_prompts(model, rows=rows, samples_per_prompt=3, temperature=0.9,
                                         benchmark=get_benchmark("demo_add"), settings=settings, runner=runner,
                                         work_dir=tmp_path / "sampling", items_root=items,
                                         model_name="builtin/tiny-qwen2")
    call = runner.calls[-1]
    bench_root = str(tmp_path / "ft" / "benchmarks")
    assert all(not str(m.source).startswith(bench_root) for m in call["mounts"])
    config = (tmp_path / "sampling" / "oc_samples.py").read_text()
    assert bench_root not in config and str(tmp_path / "sampling" / "prompts.jsonl") in config
    assert "n=3" in config and "do_sample=True, temperature=0.9" in config  # N samples, the planner's temperature
    assert "dataset_postprocessor=dict(type=gold_as_answer" in config  # the gold read as the benchmark reads a reply
    written = [json.loads(line) for line in (tmp_path / "sampling" / "prompts.jsonl").read_text().splitlines()]
    assert written == rows  # exactly the training rows: nothing from the benchmark's splits
