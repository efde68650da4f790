"""Issue 35 item 12: the offline planner's data step keeps the rows of a raw user file that fit the
benchmark (a rule learnt from its validation items), in the benchmark's format, and says what it dropped."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ftagent.core.trace import Trace
from ftagent.planners.heuristic.data_fit import learn_relation, select
from tests.helpers.mixed_raw import benchmark_items, mixed_rows, write_benchmark


def _val(items):
    return [r["question"] for r in items], [r["answer"] for r in items]


@pytest.mark.parametrize(("questions", "golds", "kind", "c", "slots"), [
    ([f"What is {n} plus 11? Put the final answer in \\boxed{{}}." for n in (12, 40, 77, 93)],
     [f"\\boxed{{{n + 11}}}" for n in (12, 40, 77, 93)], "x+c", 11.0, [0]),  # 11 never varies: a constant
    ([f"What is {a} + {b}?" for a, b in ((3, 4), (10, 20), (7, 7), (51, 8))],
     [str(a + b) for a, b in ((3, 4), (10, 20), (7, 7), (51, 8))], "x+y", 0.0, [0, 1]),
    ([f"Compute {n} multiplied by 3." for n in (11, 25, 40)], [f"#### {3 * n}" for n in (11, 25, 40)], "x*c", 3.0,
     [0]),
    ([f"Take {b} from {a}." for a, b in ((30, 4), (12, 9), (50, 25))], ["26", "3", "25"], "x-y", 0.0, [1, 0]),
])
def test_the_rule_is_learnt_from_question_and_gold(questions, golds, kind, c, slots):
    rel = learn_relation(questions, golds)
    assert rel is not None and (rel.kind, rel.c, rel.slots) == (kind, c, slots)


def test_no_rule_from_non_numeric_or_inconsistent_golds():
    assert learn_relation(["Capital of France?", "Capital of Peru?", "Capital of Chad?"],
                          ["Paris", "Lima", "N'Djamena"]) is None
    assert learn_relation([f"What is {n}?" for n in (3, 8, 20, 41)], ["7", "1", "99", "5"]) is None


def test_a_mixed_file_keeps_the_template_that_fits_and_names_every_dropped_one():
    rows = mixed_rows(target=200, distractors=150, junk=40)
    sel = select(rows, *_val(benchmark_items(30)), dataset="mixed")
    kept = {c.template: c for c in sel.clusters if c.kept}
    dropped = {c.template: c for c in sel.clusters if not c.kept}
    assert set(kept) == {"Add 11 to N."} and kept["Add 11 to N."].operands == [1]  # N, not the constant 11
    assert {"What is N minus 11?", "What is N plus 12?"} <= set(dropped)  # the benchmark's wording, another rule
    assert sel.unusable == 30 and sel.duplicates >= 54  # 3 in 4 junk rows: empty or non-text; 54 copies
    text = sel.summary()
    assert "N + 11" in text and '"Add 11 to N." ×' in text and '"What is N plus 12?" ×' in text
    assert "30 empty or non-text rows" in text and "duplicates" in text


def test_without_a_rule_every_usable_row_is_kept():
    rows = mixed_rows(target=20, distractors=10, junk=8)
    sel = select(rows, ["Capital of France?"] * 3, ["Paris", "Lima", "Rome"])
    assert sel.relation is None and sel.script_spec() is None and all(c.kept for c in sel.clusters)
    assert "every usable row is kept" in sel.summary()


def test_the_offline_planner_trains_only_on_rows_that_fit_in_the_benchmarks_format(tmp_path):
    """The planted mixed file through the real proposer, coder and generated ``process_data.py``: only
    "Add 11 to N." rows, each answer ``\\boxed{N+11}``, three-digit ones asked in the benchmark's wording,
    none a validation or test item (the contamination scan passes); the hypothesis and the feedback count
    what was kept and dropped. Before: every usable row, distractors included, in their own words."""
    from ftagent.benchmarks import resolve_benchmark
    from ftagent.core.paths import benchmark_data_dir
    from ftagent.datasets.contamination import check_contamination
    from ftagent.datasets.user_file.register import register_user_file
    from ftagent.planners.heuristic.planner import HeuristicCoder, HeuristicFeedback, HeuristicProposer
    from ftagent.tools.llamafactory.data_script import benchmark_items_for
    from tests.unit.test_heuristic import exp
    from tests.unit.test_heuristic import scenario as heuristic_scenario

    key = resolve_benchmark(str(write_benchmark(tmp_path / "bench", name="fitplus11")))
    items = benchmark_items(60)
    bench = benchmark_data_dir(tmp_path / "ft", key)
    bench.mkdir(parents=True)
    for split, part in (("validation", items[:30]), ("test", items[30:])):
        (bench / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part), encoding="utf-8")
    raw = tmp_path / "mixed_raw.json"
    raw.write_text(json.dumps(mixed_rows(target=300, distractors=200, junk=40)), encoding="utf-8")
    root = tmp_path / "ft" / "datasets"
    info = register_user_file(raw, root)
    sc = heuristic_scenario().model_copy(update={"datasets": [info.name], "benchmark": key,
                                                 "file_path": str(tmp_path / "ft"), "dataset_root": str(root)})
    ws = tmp_path / "ws"
    ws.mkdir()
    hypothesis = HeuristicProposer(sc).propose(Trace(), None)
    assert '"Add 11 to N." ×' in hypothesis.hypothesis and '"What is N minus 11?" ×' in hypothesis.hypothesis
    result = HeuristicCoder(sc).code(hypothesis, Trace(), ws, None, None)
    assert result.plan["data_in_gold_form"] is True
    subprocess.run([sys.executable, "process_data.py"], cwd=ws, check=True, capture_output=True,
                   env={"FT_DATASETS_DIR": str(root), "PATH": "/usr/bin:/bin"})
    data = json.loads((ws / "data.json").read_text(encoding="utf-8"))
    assert 200 < len(data) <= 300
    for row in data:
        n = int(re.findall(r"\d+", row["instruction"])[0 if row["instruction"].startswith("What") else 1])
        assert row["output"] == f"\\boxed{{{n + 11}}}", row
        if n >= 100:
            assert row["instruction"] == f"What is {n} plus 11? Put the final answer in \\boxed{{}}."
        else:  # the benchmark's own input space: never asked in its wording (the test split is hidden)
            assert row["instruction"] == f"Add 11 to {n}. Put the final answer in \\boxed{{}}."
    assert not any("minus" in r["instruction"] or "plus 12" in r["instruction"] for r in data)
    check_contamination(data, benchmark_items_for(key, tmp_path / "ft", ["question"]))  # validation, test: no hit
    fb = HeuristicFeedback(sc).feedback(exp(0, {}, [], 10.0).model_copy(update={"plan": result.plan}),
                                        Trace(baseline_val=0.0, core_metric="accuracy"), None)
    assert "Kept" in fb.reason and '"What is N plus 12?" ×' in fb.reason


def test_the_helper_writes_the_played_files(tmp_path):
    from tests.helpers.mixed_raw import main

    main(str(tmp_path))
    assert len(json.loads((tmp_path / "mixed_raw.json").read_text())) == 3333
    assert Path(tmp_path / "plus11.yaml").read_text().startswith("name: plus11")


def test_rows_already_in_the_benchmarks_format_pass_unchanged():
    """A clean file in the benchmark's own form (tests/integration/test_user_dataset.py's demo_add rows,
    answers already boxed): every row kept, word for word -- the step filters, it does not rewrite."""
    from ftagent.benchmarks.demo import demo_add_items
    from ftagent.datasets.demo_add import benchmark_pairs, generate_rows
    from ftagent.planners.heuristic.fit_rules import select_rows

    rows = generate_rows(n=300, seed=99, exclude=benchmark_pairs())
    items = demo_add_items(n=30)
    sel = select(rows, [r["question"] for r in items], [r["answer"] for r in items])
    assert sel.relation is not None and sel.relation.kind == "x+y"
    kept = select_rows(rows, sel.script_spec())
    assert kept == [r for i, r in enumerate(rows) if r not in rows[:i]]


def test_a_zero_score_is_no_format_problem_when_the_data_step_wrote_the_gold_form():
    """Run 1 of the played file: loop 1 (loss 0.004, score 0) was told to "write the training answers in
    the benchmark's answer format" -- which its data step had done; processing it again changes nothing."""
    from ftagent.planners.heuristic.planner import HeuristicFeedback, HeuristicProposer
    from ftagent.planners.heuristic.policy import FORMAT_HYPOTHESIS, base_recipe
    from tests.unit.test_heuristic import curve, exp
    from tests.unit.test_heuristic import scenario as heuristic_scenario

    sc = heuristic_scenario()
    low = curve([3, 1, 0.5, 0.2, 0.1, 0.05, 0.02, 0.01, 0.005, 0.004])
    done = exp(0, base_recipe(sc), low, 0.0)
    done.plan["data_in_gold_form"] = True
    trace = Trace(baseline_val=0.0, core_metric="accuracy")
    trace.record(done)
    assert HeuristicProposer(sc).propose(trace, None).hypothesis != FORMAT_HYPOTHESIS
    assert "format problem" not in HeuristicFeedback(sc).feedback(done, trace, None).next_step
