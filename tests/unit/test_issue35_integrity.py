"""Issue 35 (relay critique), item 1: an integrity flag tells the planner what it means and whether its own
experiment caused it (rendered through the preview builders, as ``ftagent prompts``)."""

from __future__ import annotations

from ftagent.core.trace import Trace
from ftagent.planners.llm.preview import preview
from tests.helpers.prompt_view import fixed_machine, scored, text_of  # noqa: F401 (fixed_machine: autouse)
from tests.unit.test_prompts import _demo_scenario, _settings

# --- 1. integrity flags: what they mean, and whether the experiment caused them ---------------------------

def test_every_integrity_check_the_guard_runs_is_described(tmp_path):
    from ftagent.integrity import evaluation as ev
    from ftagent.integrity import model_files as mf
    from ftagent.integrity import training_data as td
    from ftagent.integrity import weights as w
    from ftagent.integrity.decoding import decoding_check
    from ftagent.integrity.eval_config import eval_config_check
    from ftagent.integrity.guard import MODEL_CHECKS
    from ftagent.integrity.trained_run import TrainedRun
    from ftagent.integrity.verdict import CHECK_KINDS
    from ftagent.integrity.weight_prints import fingerprint

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = tmp_path / "a", tmp_path / "b"
    fa, fb = mf.read_model_files(a), mf.read_model_files(b)
    checks = [ev.benchmark_files_check(None, {}), eval_config_check({}, a, {}), td.data_script_check(a, b, "x"),
              td.contamination_check(a / "data.json", {}, {}), ev.constant_answers_check(None),
              mf.tokenizer_check(fa, fb, []), mf.chat_template_check(fa, fb, []), mf.architecture_check(fa, fb, start=None),
              decoding_check(fa, fb, []), w.weight_check(fingerprint(a), b, run=TrainedRun(budget=None))]
    assert {c.name for c in checks} == set(CHECK_KINDS)
    assert set(MODEL_CHECKS) <= set(CHECK_KINDS)


def test_an_external_integrity_flag_is_explained_and_not_blamed_on_the_plan(tmp_path):
    scenario = _demo_scenario(tmp_path)
    trace = Trace(core_metric="accuracy", baseline_val=0.0)
    flag = "benchmark_files: changed since the session started: /x/benchmarks/demo_add/validation.jsonl"
    exp = scored(0, 80.0, integrity_flags=[flag])
    trace.record(exp)
    fb = text_of(preview("feedback", scenario, _settings(), trace))
    assert "NOT eligible as best" in fb
    assert "`benchmark_files` (NOT caused by this experiment)" in fb
    assert "Not caused by your code" in fb and "sandbox" in fb
    assert "…/demo_add/validation.jsonl" in fb and "/x/benchmarks" not in fb  # no host paths
    assert "No flag was caused by this experiment" in fb  # the answer instructions
    # the next proposal reads the same words in the history
    trace.experiments[0].reason = "Flagged by the integrity guard."
    nxt = text_of(preview("propose", scenario, _settings(), trace))
    assert "🚫 not eligible (integrity guard)" in nxt and "NOT caused by this experiment" in nxt


def test_an_integrity_flag_the_experiment_caused_says_what_to_change(tmp_path):
    scenario = _demo_scenario(tmp_path)
    trace = Trace(core_metric="accuracy", baseline_val=0.0)
    trace.record(scored(0, 90.0, integrity_flags=["data_script: process_data.py names the benchmark folder "
                                                   "('benchmarks/demo_add')"]))
    fb = text_of(preview("feedback", scenario, _settings(), trace))
    assert "`data_script` (caused by this experiment)" in fb and "Never refer to the benchmark's files" in fb
    assert "the next step must remove its cause" in fb
