"""Issue 43, "Scoring leftovers (real public files)": the unit-level half (the parity half runs the official
scorers in the tool env, ``tests/parity``). Each test fails on d350dfe."""

from __future__ import annotations

import math
from pathlib import Path

from ftagent.benchmarks.domain import tablebench as tb
from tests.integration.conftest import tools_env  # noqa: F401 (the real tool env; skips without)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "benchmarks" / "tablebench"
LINE_CODE = ("```python\n{pre}import pandas as pd\nimport matplotlib.pyplot as plt\ndf = pd.read_csv('table.csv')\n"
             "plt.plot(df['Year'], df['Attendance'], marker='o')\nplt.show()\n```")
NAN_ITEM = {"qtype": "Visualization", "chart_type": "line", "answer": "y_references = [[41.5, np.nan, 38.25, 44.0]]",
            "table_raw": {"columns": ["Year", "Attendance"], "data": [[2001, 41.5], [2002, None], [2003, 38.25],
                                                                      [2004, 44.0]]}}


def test_tablebench_reads_np_nan_in_a_reference_as_the_official_scorer_does():
    # the published NaN row writes np.nan; the official parser execs it with numpy as np in scope
    ref = tb.reference_series(NAN_ITEM["answer"])
    assert ref is not None and ref[0][0] == 41.5 and math.isnan(ref[0][1])
    assert tb.series_match([[41.5, float("nan"), 38.25, 44.0]], ref, "line")
    assert math.isnan(tb.reference_series("y_references = [[1, numpy.nan]]")[0][1])
    assert tb.reference_series("y_references = [[1, nan]]") is not None  # the bare form stays read (docs: Parity)
    m = tb.visualization_metrics([LINE_CODE.format(pre="")], [NAN_ITEM], timeout_s=60)
    assert m["Pass@1"] == 100.0  # d350dfe: 0 (the literal did not parse)


def test_a_chart_that_timed_out_is_run_again_and_counted():
    slow = LINE_CODE.format(pre="import time\ntime.sleep(4)\n")  # over the first limit, under the retry's
    m = tb.visualization_metrics([slow], [NAN_ITEM], timeout_s=3)
    assert m["Pass@1"] == 100.0 and m["chart_timeouts"] == 1 and "chart_unresolved" not in m
    assert m["per_item"][0]["chart_timeouts"] == 1 and not m["per_item"][0]["chart_timed_out"]


def test_a_chart_that_times_out_twice_is_unresolved_and_counted():
    m = tb.visualization_metrics(["```python\nwhile True:\n    pass\n```"], [NAN_ITEM], timeout_s=1)
    assert m["Pass@1"] == 0.0 and m["chart_timeouts"] == 1 and m["chart_unresolved"] == 1
    assert m["per_item"][0] == {"Pass@1": 0.0, "ECR@1": 0.0, "Parse@1": 100.0, "chart_timeouts": 2,
                                "chart_timed_out": True}


def test_a_result_with_chart_programs_that_timed_out_twice_is_warned_about_and_not_cached(tmp_path):
    from ftagent.benchmarks import get_benchmark
    from ftagent.core.settings import load_settings
    from ftagent.tools.opencompass.runs import evaluate_splits_of_path
    from tests.helpers.weights import safetensors_bytes
    from tests.unit.test_scoring_defects import _TimedOutVerifications

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(safetensors_bytes(b"weights"))
    (model / "chat_template.jinja").write_text("{{ messages }}")
    settings = load_settings(file_path=tmp_path / "ft", benchmark_limit=4)
    runner, warnings = _TimedOutVerifications(metric="chart_unresolved"), []
    for _ in range(2):
        out = evaluate_splits_of_path(model, None, benchmark=get_benchmark("demo_add"), splits=("validation",),
                                      settings=settings, runner=runner, work_dir=tmp_path / "work",
                                      model_name="builtin/tiny-qwen2", on_warning=warnings.append)
    assert len(runner.inner.runs) == 2 and not out["validation"].cached  # d350dfe: the second run was cached
    assert [w for w in warnings if "chart program(s) timed out twice" in w] == [
        "demo_add/validation: 1 chart program(s) timed out twice (the limit, then four times it): they score as "
        "wrong (details: chart_timed_out), and this result is not cached"] * 2


# ---------------------------------------------------------------- the constant-answer baseline (issue 43)

def _holdout(feedback: dict[str, list[int]]):
    from ftagent.core.holdout import Holdout

    return Holdout(seed=1, share=0.7, feedback={k: [str(i) for i in v] for k, v in feedback.items()})


def test_the_constant_is_chosen_on_validations_feedback_part_and_named(tmp_path):
    """d350dfe chose each split's constant after seeing that split's answers (FinanceIQ: the best letter per
    subject scored 29.5/31.8 where the best single letter scores 25.8/29.3)."""
    from collections import Counter

    from ftagent.benchmarks import get_benchmark
    from ftagent.benchmarks.base import read_jsonl
    from ftagent.benchmarks.baselines import constant_answer_baseline

    bench = get_benchmark("demo_add")
    bench.prepare(tmp_path)
    val, test = (read_jsonl(tmp_path / "demo_add" / f"{s}.jsonl") for s in ("validation", "test"))
    test_best = Counter(r["answer"] for r in test).most_common(1)[0][0]
    pick = next(i for i, r in enumerate(val) if r["answer"] != test_best)  # a gold the test split does not favour
    chosen = val[pick]["answer"]
    base = constant_answer_baseline(bench, tmp_path, "test", holdout=_holdout({"demo_add": [pick]}))
    (sub,) = base.subsets.values()
    assert sub.answer == chosen and sub.rule == f"always {chosen!r}"
    assert sub.score == 100.0 * sum(r["answer"] == chosen for r in test) / len(test)
    assert base.chosen_on.startswith("validation's feedback part (1 items")
    assert f": always {chosen!r}, the gold answer met most often on validation's feedback part (1 items)" in base.line()


def _bench_rows(tmp_path, key: str, rows: list[dict], task: str):
    from ftagent.benchmarks import get_benchmark
    from ftagent.benchmarks.domain_adapters import raw_dir

    raw = raw_dir(tmp_path, key)
    raw.mkdir(parents=True)
    (raw / f"{task}_test.json").write_text(__import__("json").dumps(rows), encoding="utf-8")
    bench = get_benchmark(key)
    bench.prepare(tmp_path)
    return bench


def test_pqa_shows_always_the_first_choice(tmp_path):
    from ftagent.benchmarks.baselines import constant_answer_baseline, subset_rows

    rows = [{"id": f"P{i}", "question": f"Spin at ____ rpm for {i} min.", "answer": f"{i}00",
             "choices": [f"{i}00", f"{i}01", f"{i}02", f"{i}03"], "type": "parameter"} for i in range(1, 21)]
    bench = _bench_rows(tmp_path, "bioprobench_pqa", rows, "PQA")
    n = len(subset_rows(bench, tmp_path, "validation")["PQA"])
    base = constant_answer_baseline(bench, tmp_path, "test", holdout=_holdout({"bioprobench_pqa": list(range(n))}))
    sub = base.subsets["PQA"]
    assert sub.rule == "always the first choice" and sub.score == 100.0  # every gold is the first choice here
    assert "always the first choice" in base.line()  # d350dfe: a literal constant, never this rule


def test_bioprobench_gen_tries_a_protocol_text(tmp_path):
    """d350dfe tried short constants and golds given twice only: GEN's protocols are all different, so its
    baseline under-reported (10.4 where a generic protocol text scores 14.8 on the real file)."""
    from ftagent.benchmarks.baselines import constant_answer_baseline
    from ftagent.benchmarks.constant_candidates import COMMON_CONSTANTS, wrapped
    from ftagent.benchmarks.domain import evaluate_subtask

    steps = ["Centrifuge the cells at 300 x g for 5 min", "Wash the pellet with PBS", "Incubate at 37 °C for 30 min",
             "Add the lysis buffer and mix", "Measure the absorbance at 450 nm"]
    rows = [{"id": f"G{i}", "system_prompt": "You are a lab assistant.", "instruction": "Write the protocol steps.",
             "input": f"Title: assay {i}", "type": "easy",
             "output": [f"{k + 1}. {steps[(i + k) % 5]} (sample {i})." for k in range(4)]} for i in range(20)]
    bench = _bench_rows(tmp_path, "bioprobench_gen", rows, "GEN")
    base = constant_answer_baseline(bench, tmp_path, "validation")
    sub = base.subsets["GEN"]
    import json as _json

    from ftagent.benchmarks.baselines import subset_rows

    items = [_json.loads(r["item_json"]) for r in subset_rows(bench, tmp_path, "validation")["GEN"]]
    short = max(evaluate_subtask("bioprobench", "GEN", [o] * len(items), items)["ROUGE-L"]
                for c in COMMON_CONSTANTS for o in wrapped("bioprobench", c))
    assert sub.rule.startswith("always the text") and sub.score > short + 10


def test_humaneval_baseline_is_the_always_equal_programs_pass_rate(tmp_path, tools_env):  # noqa: F811 (the fixture)
    """'a constant program passes no tests' was untrue on HumanEval (plain asserts): the number, computed by
    the benchmark's own evaluator in the tool env."""
    import json as _json

    from ftagent.benchmarks import get_benchmark
    from ftagent.benchmarks.baselines import ALWAYS_EQUAL, constant_answer_baseline
    from ftagent.runners.local import LocalRunner
    from ftagent.tools.opencompass.constant_program import program_scorer

    corpus = _json.loads((Path(__file__).parents[1] / "parity" / "corpora" / "humaneval.json").read_text())
    rows = list({c["row"]["entry_point"]: c["row"] for c in corpus}.values())
    raw = tmp_path / "humaneval" / "raw"
    raw.mkdir(parents=True)
    (raw / "test.jsonl").write_text("".join(_json.dumps(dict(r, task_id=f"HumanEval/{i}", canonical_solution=""))
                                            + "\n" for i, r in enumerate(rows * 4)), encoding="utf-8")
    bench = get_benchmark("humaneval")
    bench.prepare(tmp_path)
    score = program_scorer(LocalRunner(tools_env, sandbox="none", gpu=False), tmp_path / "work")
    base = constant_answer_baseline(bench, tmp_path, "validation", program_score=score)
    assert base.score is not None and base.score > 0 and [s.rule for s in base.subsets.values()] == [ALWAYS_EQUAL]
    items = sum(s.items for s in base.subsets.values())  # relay round r2: the line says how many items it scores
    assert base.line().startswith(f"a constant answer scores {base.score:.1f} pass@1 on the validation split ({items} "
                                  "items): "
                                  f"{ALWAYS_EQUAL}")
    assert "passes no tests" not in base.line() and "not applicable" not in base.method
