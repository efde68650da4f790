"""Issue 35: what the LLM planner sees — the failure prompt of a stopped run, the view of a raw user
file, budgets, paths, and the contamination scan of shown items."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftagent.benchmarks import get_benchmark
from ftagent.core.errors import ErrorType, StepError, StepFailure
from ftagent.core.trace import Experiment, Trace
from ftagent.core.types import Hypothesis
from ftagent.planners.llm import brief, brief_machine
from tests.unit.test_prompts import _demo_scenario, _settings

PROGRESS = (" 80%|████████  | 1600/2000 [01:52<00:28, 14.2it/s]\n"
            " 90%|█████████ | 1800/2000 [02:06<00:14, 14.1it/s]\n"
            "100%|██████████| 2000/2000 [02:20<00:00,  3.21s/it]\n"
            "[ftagent] stopped on request\n")


@pytest.fixture(autouse=True)
def _fixed_machine(monkeypatch):
    monkeypatch.setattr(brief_machine, "cpu_facts", lambda: (2, 24.0))
    monkeypatch.setattr(brief, "dir_size", lambda path: 2_312_345)


def _diverged_trace(tmp_path: Path):
    scenario = _demo_scenario(tmp_path)
    trace = Trace(core_metric="accuracy", baseline_val=0.0)
    history = [{"step": 100 * i, "loss": round(2.0 * 0.7 ** i, 4), "lr": 1e-4} for i in range(1, 21)]
    exp = Experiment(loop=0, hypothesis=Hypothesis(hypothesis="h", task="t"), failure=StepFailure(
        stage="train", error_type=ErrorType.DIVERGED, message="training diverged at step 2000/2000: loss 9",
        log_tail="[INFO] loading model\nValueError: loss exploded in layer 3\n" + PROGRESS,
        details={"loss_history": history}))
    trace.record(exp)
    return scenario, trace, exp


def test_the_failure_prompt_lists_every_reported_type_and_carries_the_loss_table(tmp_path):
    from ftagent.planners.llm.feedback import REPORTED_TYPES, feedback_messages

    scenario, trace, exp = _diverged_trace(tmp_path)
    fb = feedback_messages(scenario, _settings(), exp, trace, False)[0]["content"]
    choices = fb.split('"error_type": "one of ', 1)[1].split('"', 1)[0]
    assert choices.split(", ") == REPORTED_TYPES  # from the ErrorType enum (minus UNKNOWN and INTERRUPTED)
    for kind in ErrorType:
        assert (kind.value in REPORTED_TYPES) is (kind not in (ErrorType.UNKNOWN, ErrorType.INTERRUPTED)), kind
    assert "- Loss curve (sampled):" in fb and "| 2000 | 0.0016 |" in fb  # the stopped run's curve
    assert "ValueError: loss exploded in layer 3" in fb
    assert "it/s]" not in fb and "s/it]" not in fb and "stopped on request" not in fb


def mixed_rows(seed: int = 0) -> list[dict]:
    """Issue 35's raw file: 3,030 rows of three kinds of question and 150 junk or empty rows."""
    import random

    rng = random.Random(seed)
    rows: list[dict] = []
    for i in range(2880):
        n = rng.randint(10, 99)
        kind = i % 3
        if kind == 0:
            rows.append({"instruction": f"Compute {n} multiplied by 3.", "input": "",
                         "output": f"Multiplying {n} by 3 gives {3 * n}."})
        elif kind == 1:
            rows.append({"instruction": f"What is {n} plus 7?", "input": "", "output": str(n + 7)})
        else:
            rows.append({"instruction": f"What is {n} times 5?", "input": "", "output": str(5 * n)})
    for i in range(150):
        rows.append([{"instruction": "", "input": "", "output": "lorem"},
                     {"instruction": "asdf qwerty", "input": "", "output": ""},
                     {"instruction": 12345, "input": "", "output": "x"},
                     {"instruction": "", "input": "", "output": ""},
                     {"instruction": "What is 12 plus 7?", "input": "", "output": "19"}][i % 5])
    rng.shuffle(rows)
    return rows


def test_a_mixed_raw_file_is_accepted_and_its_view_names_every_kind_of_row(tmp_path):
    import json

    from ftagent.datasets.catalogue import build_catalogue, read_catalogue, render_entry
    from ftagent.datasets.user_file.convert import to_alpaca
    from ftagent.datasets.user_file.register import register_user_file

    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in mixed_rows()), encoding="utf-8")
    root = tmp_path / "datasets"
    info = register_user_file(path, root)  # on main: refused (empty `instruction`)
    assert info.rows == 3030 and info.usable_rows == 2880 + 30
    build_catalogue(root, [info.name])
    view = render_entry(info.name, read_catalogue(root)[info.name], "full")
    for template in ("Compute N multiplied by 3.", "What is N plus 7?", "What is N times 5?"):
        assert json.dumps(template) in view, template
    assert "Multiplying N by 3 gives M." in view  # prose answers; constants stay literal, N ≠ M (relay critique)
    assert "990 rows (33%)" in view and "960 rows (32%)" in view
    assert "60 with an empty or missing instruction" in view  # 30 + 30 (both empty)
    assert "30 with an empty or missing answer" in view and "30 whose instruction or answer is not text" in view
    assert "duplicates of an earlier row" in view
    assert view.count('{"instruction": "What is') >= 2 and '{"instruction": "Compute' in view  # stratified samples
    assert str(tmp_path) not in view  # no host path
    assert ".user_dataset.json (" in view  # the file the default converter reads is in the file list
    rows = to_alpaca(root / info.name, None, 0)  # the default converter drops the unusable rows
    assert len(rows) == 2880 + 30 and all(r["instruction"].strip() and r["output"].strip() for r in rows)


class _Ctx:
    def __init__(self, loop: int, loop_n: int, left: float) -> None:
        self.loop = type("Loop", (), {"index": loop})()
        self.state = type("State", (), {"config": {"run": {"loop_n": loop_n}}})()
        self._left = left

    def time_left(self) -> float:
        return self._left


def test_one_budget_figure_and_skip_data_processing_explained(tmp_path):
    import re

    from ftagent.planners.llm.propose import build_proposal_messages
    from ftagent.planners.llm.view import planner_view
    from tests.unit.test_forecast import _forecast

    scenario = _demo_scenario(tmp_path)
    scenario.forecast = _forecast(timeout_s=1800.0)
    trace = Trace(core_metric="accuracy", baseline_val=0.0)
    system, user = (m["content"] for m in build_proposal_messages(scenario, planner_view(trace), _settings(),
                                                                  _Ctx(0, 2, 2640.0)))
    text = system + user
    assert "s per optimizer step" in user  # the forecast is shown ...
    figures = re.findall(r"about [^,;:]+ per loop|at most about [0-9][^:]*", text)
    assert figures == ["about 22 min per loop"], figures  # ... but the time per loop comes once, from Budgets
    assert '"skip_data_processing" must be false: no loop has become the best yet' in system
    trace.record(Experiment(loop=0, hypothesis=Hypothesis(hypothesis="h", task="t"), val_score=50.0, decision=True,
                            artefacts={"process_data.py": str(tmp_path / "p.py")}))
    (tmp_path / "p.py").write_text("print(1)\n")
    trace.sota_loop = 0
    system = build_proposal_messages(scenario, planner_view(trace), _settings(), _Ctx(1, 2, 1000.0))[0]["content"]
    assert "copies the current best's (loop 0) process_data.py" in system and "only train.yaml" in system


# ------------------------------------------------------------------------------------ contamination

def _times3_items(template: str = " Put the final answer in \\boxed{}.") -> dict[str, str]:
    return {f"validation:{i}": f"What is {n} times 3?{template}" for i, n in enumerate(range(10, 90))}


def test_a_bare_benchmark_question_inside_a_longer_row_is_caught_by_whole_tokens():
    from ftagent.datasets.contamination import scan_rows

    items = _times3_items()  # 11 tokens each: the n-gram test alone missed the bare question
    rows = [{"instruction": "Please help: What is 28 times 3? Show your work.", "input": "", "output": "84"},
            {"instruction": "What is 128 times 3?", "input": "", "output": "384"},  # not the item "28 times 3"
            {"instruction": "What is 28 times 5?", "input": "", "output": "140"},
            {"instruction": "Compute 28 multiplied by 3.", "input": "", "output": "84"}]
    report = scan_rows(rows, items)
    # issue 39: "Compute 28 multiplied by 3." asks the item again in other words (the template match's hit)
    assert [(o.row_index, o.item_id) for o in report.flagged] == [(0, "validation:18"), (3, "validation:18")]
    # the template sentence alone (in every item) never flags a row
    assert not scan_rows([{"instruction": "Put the final answer in \\boxed{}.", "output": "1"}], items).flagged


def test_a_planted_copy_of_the_validation_item_the_brief_shows_is_caught(tmp_path):
    """The brief shows one validation item with its gold (and the feedback shows wrong ones): those
    are in the scan's list (every validation and test item is), so a data script that copies one fails."""
    import json

    from ftagent.core.paths import benchmark_data_dir
    from ftagent.tools.llamafactory.data_script import DataProcessor

    scenario = _demo_scenario(tmp_path)
    bench = benchmark_data_dir(scenario.file_path, "demo_add")
    bench.mkdir(parents=True, exist_ok=True)
    for split, pairs in (("validation", [(31, 58), (12, 40)]), ("test", [(70, 21)])):
        (bench / f"{split}.jsonl").write_text("".join(json.dumps({"question": f"What is {a} + {b}?",
                                                                  "answer": str(a + b)}) + "\n"
                                                      for a, b in pairs), encoding="utf-8")
    shown = brief.render_brief(scenario, benchmark=get_benchmark(scenario.benchmark))
    assert "What is 31 + 58?" in shown and "`89`" in shown  # the item and its gold reach every prompt
    rows = [{"instruction": f"What is {a} + {b}? Answer in \\boxed{{}}.", "input": "", "output": f"\\boxed{{{a + b}}}"}
            for a, b in ((11, 22), (45, 46))]
    processor = DataProcessor(scenario, _settings(), runner=None, input_columns=["question"], answer_column="answer")  # type: ignore[arg-type]
    processor._scan(rows)  # clean rows pass
    planted = rows + [{"instruction": "Example from the task: What is 31 + 58? Put the final answer in "
                                      "\\boxed{}.", "input": "", "output": "\\boxed{89}"}]
    with pytest.raises(StepError) as err:
        processor._scan(planted)
    assert err.value.error_type is ErrorType.DATA and "validation:0" in str(err.value.details)


def test_the_brief_warns_when_the_benchmark_fills_its_input_space(tmp_path):
    import json

    from ftagent.core.paths import benchmark_data_dir

    scenario = _demo_scenario(tmp_path)
    bench = benchmark_data_dir(scenario.file_path, "demo_add")
    bench.mkdir(parents=True, exist_ok=True)
    numbers = list(range(10, 90))
    for split, part in (("validation", numbers[:40]), ("test", numbers[40:])):
        (bench / f"{split}.jsonl").write_text("".join(json.dumps({"question": f"What is {n} times 3?",
                                                                  "answer": str(3 * n)}) + "\n" for n in part))
    text = brief.render_brief(scenario, benchmark=get_benchmark(scenario.benchmark))
    assert "fill about 100% of the questions of the form `What is N times 3?` (80 of about 80 possible" in text
    assert "(80 of about 80 possible; N from 10 to 89)" in text  # the values the items take, not inferred
    # the warning names the check that fails data covering this small space (issue 39 red team B3)
    assert "its checks 4 and 5); and data whose texts, worked answers included, answer 25% or more of this form's " \
           "items fails it as a whole (the input-space check)." in text
    # a sparse sample of a large space: no warning
    for split in ("validation", "test"):
        (bench / f"{split}.jsonl").write_text("".join(json.dumps({"question": f"What is {a} + {a * 7 % 89 + 10}?",
                                                                  "answer": "0"}) + "\n" for a in range(10, 50)))
    assert "possible; N from" not in brief.render_brief(scenario, benchmark=get_benchmark(scenario.benchmark))


def test_every_scan_is_an_event_and_a_report_field_passing_or_not(tmp_path):
    from ftagent.engine.event_log import EventLog
    from ftagent.engine.events import LoopEnd, SessionStart
    from ftagent.tools.llamafactory.data_script import DataProcessor
    from ftagent.views.report import build_report, render_markdown

    scenario = _demo_scenario(tmp_path)
    items = _times3_items("")
    processor = DataProcessor(scenario, _settings(), runner=None, input_columns=["question"], answer_column="answer")  # type: ignore[arg-type]
    processor._bench_items = {k: [v] for k, v in items.items()}
    session = tmp_path / "sess"
    log = EventLog(session / "events.jsonl")
    log.emit(SessionStart(session_id="sess", benchmark="times3"))

    class Ctx:
        def __init__(self, loop: int) -> None:
            self.loop = loop

        def emit(self, event) -> None:
            log.emit(event.model_copy(update={"loop": self.loop}))

    processor._scan([{"instruction": "What is 7 plus 7?", "output": "14"}], Ctx(0), "data.json")  # passes
    with pytest.raises(StepError):
        processor._scan([{"instruction": "Solve: What is 28 times 3?", "output": "84"}], Ctx(1), "data.json (debug)")
    for loop in (0, 1):
        log.emit(LoopEnd(loop=loop, status="succeeded" if loop == 0 else "failed"))
    report = build_report(session)
    assert report.loops[0].contamination == [{"dataset": "data.json", "rows_checked": 1, "items_checked": 80,
                                              "flagged_rows": 0, "passed": True}]
    assert report.loops[1].contamination[0]["passed"] is False and report.loops[1].contamination[0]["flagged_rows"] == 1
    assert "- contamination scans: 2 data set(s), 1 holding benchmark items" in render_markdown(report)


# ------------------------------------------------------------------------------------ offline planner

def test_the_offline_planner_writes_a_user_file_in_the_benchmarks_boxed_format(tmp_path):
    import json
    import subprocess
    import sys

    from ftagent.datasets.user_file.register import register_user_file
    from ftagent.planners.heuristic.planner import HeuristicCoder, HeuristicProposer
    from tests.unit.test_heuristic import scenario as heuristic_scenario

    path = tmp_path / "times3.jsonl"
    rows = [{"instruction": f"Compute {n} multiplied by 3.", "output": f"Multiplying {n} by 3 gives {3 * n}."}
            for n in range(10, 40)] + [{"instruction": "", "output": "junk"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    root = tmp_path / "datasets"
    info = register_user_file(path, root)
    sc = heuristic_scenario().model_copy(update={"datasets": [info.name]})
    ws = tmp_path / "ws"
    ws.mkdir()
    HeuristicCoder(sc).code(HeuristicProposer(sc).propose(Trace(), None), Trace(), ws, None, None)
    subprocess.run([sys.executable, "process_data.py"], cwd=ws, env={"FT_DATASETS_DIR": str(root),
                                                                     "PATH": "/usr/bin:/bin"},
                   check=True, capture_output=True)
    data = json.loads((ws / "data.json").read_text())
    assert len(data) == 30  # the empty row dropped
    row = next(r for r in data if r["instruction"].startswith("Compute 12 "))
    assert row["output"] == "\\boxed{36}"  # the benchmark (demo_add) scores the last \boxed{}
    assert row["instruction"] == "Compute 12 multiplied by 3. Put the final answer in \\boxed{}."


def test_the_offline_planner_reads_low_loss_and_zero_score_as_a_format_problem():
    from ftagent.planners.heuristic.planner import HeuristicFeedback, HeuristicProposer
    from ftagent.planners.heuristic.policy import FORMAT_HYPOTHESIS, base_recipe
    from tests.unit.test_heuristic import curve, exp
    from tests.unit.test_heuristic import scenario as heuristic_scenario

    sc = heuristic_scenario()
    low = curve([3, 1, 0.5, 0.2, 0.1, 0.08, 0.06, 0.05, 0.047, 0.046])  # still falling, like issue 35's
    trace = Trace(baseline_val=0.0, core_metric="accuracy")
    trace.record(exp(0, base_recipe(sc), low, 0.0))
    h = HeuristicProposer(sc).propose(trace, None)
    assert h.hypothesis == FORMAT_HYPOTHESIS and not h.skip_data_processing and "under-trained" not in h.hypothesis
    assert h.plan["recipe"]["max_steps"] == base_recipe(sc)["max_steps"]  # the same recipe, new data
    fb = HeuristicFeedback(sc).feedback(exp(0, {}, low, 0.0), trace, None)
    assert "format problem" in fb.next_step and "train longer" not in fb.next_step


# ------------------------------------------------------------------------------------ config prompt

def test_the_config_prompt_shows_what_applies_the_parents_data_and_the_last_failure(tmp_path):
    import json

    from ftagent.planners.llm.code_context import _last_failure_part, _parent_data_part
    from ftagent.planners.llm.code_messages import config_messages
    from ftagent.planners.llm.view import planner_view

    scenario = _demo_scenario(tmp_path)  # CPU only
    hyp = Hypothesis(hypothesis="[Training] full fine-tuning, lr 3e-4", task="full fine-tuning, 3 epochs", parent=0)
    parent_ws = tmp_path / "ws" / "loop_0"
    parent_ws.mkdir(parents=True)
    (parent_ws / "data.json").write_text(json.dumps([{"instruction": "What is 1 + 2?", "input": "",
                                                      "output": "\\boxed{3}"}] * 40))
    trace = Trace(core_metric="accuracy", baseline_val=0.0)
    trace.record(Experiment(loop=0, hypothesis=Hypothesis(hypothesis="h", task="t"), val_score=40.0, decision=True,
                            artefacts={"workspace": str(parent_ws)}))
    trace.record(Experiment(loop=1, parent=0, hypothesis=Hypothesis(hypothesis="h", task="t"), failure=StepFailure(
        stage="train", error_type=ErrorType.DIVERGED, message="training diverged at step 300/2000: loss nan",
        suggestion="Lower learning_rate (by 3-10x)")))
    trace.sota_loop = 0
    view = planner_view(trace)
    ws = tmp_path / "ws" / "loop_2"
    ws.mkdir()
    extra = [*_parent_data_part(ws, view.get(0), scenario, hyp), *_last_failure_part(view.experiments[-1])]
    text = config_messages(scenario, _settings(), hyp, ws, extra=extra)[0]["content"]
    for absent in ("quantization_bit", "use_liger_kernel", "flash_attn", "lora_rank", "module_dropout", "pure_bf16"):
        assert f"- {absent} (" not in text, absent
    assert "- learning_rate (" in text and "- per_device_train_batch_size (" in text
    assert "Not produced yet" not in text and "loop 0's data (the experiment built on), not this loop's" in text
    assert "- 40 rows written by loop 0's data script" in text
    assert "Loop 1 (the latest experiment) failed" in text and "[train/DIVERGED] training diverged" in text
    # a GPU run keeps the precision keys, a run naming no method keeps every method's arguments
    plain = config_messages(scenario, _settings(), Hypothesis(hypothesis="more data", task="t"), ws)[0]["content"]
    assert "- lora_rank (" in plain and "- quantization_bit (" not in plain


# ------------------------------------------------------------------------------------ forecast

def test_the_forecast_of_an_llm_planned_session_counts_the_calls_time_and_names_its_recipe(tmp_path):
    from ftagent.core.forecast_arithmetic import EvalProbe, TrainProbe
    from ftagent.finetune.llm_cost import LLM_CALL_S
    from ftagent.finetune.session_forecast import make_forecast
    from ftagent.views.forecast_text import forecast_lines, forecast_table_rows

    scenario = _demo_scenario(tmp_path)
    settings = _settings(file_path=str(tmp_path / "files"))
    train = TrainProbe(key="t", s_per_step=0.07, startup_s=10.0, validate_s=30.0, revalidate_s=15.0, steps=10)
    evaluation = EvalProbe(key="e", fixed_s=12.0, s_per_item=0.01, items=200)
    heuristic = make_forecast(scenario, settings, train, evaluation, planner="heuristic", loop_n=2, timeout_s=None,
                              baseline_needed=False)
    events = [{"type": "llm_call", "latency_s": 40.0}, {"type": "llm_call", "latency_s": 80.0},
              {"type": "llm_call", "latency_s": 1.0, "error": "timeout"}]
    llm = make_forecast(scenario, settings, train, evaluation, planner="llm", loop_n=2, timeout_s=None,
                        baseline_needed=False, events=events)
    assert heuristic.llm.seconds == 0 and all(lp.llm_s == 0 for lp in heuristic.loops)
    assert llm.llm.s_per_call == 60.0 and llm.llm.calls == 8  # 4 calls a loop, the mean of the 2 good calls
    assert llm.loops[0].llm_s == 240.0 and llm.loops[0].total_s == pytest.approx(
        llm.loops[0].train_s + llm.loops[0].eval_s + llm.loops[0].other_s + 240.0)
    text = "\n".join(forecast_lines(llm))
    assert "8 min of calls (60 s each, measured: the mean of this session's 2 LLM call(s) so far)" in text
    assert "the LLM planner is assumed to plan the heuristic planner's first recipe (full" in text
    assert forecast_table_rows(llm)[0][4] == "4 min"
    # the next session's forecast starts from the cached latency; with none at all, the assumption is said
    again = make_forecast(scenario, settings, train, evaluation, planner="llm", loop_n=1, timeout_s=None,
                          baseline_needed=False)
    assert again.llm.s_per_call == 60.0 and "earlier session" in again.llm.s_source
    fresh = make_forecast(scenario, _settings(file_path=str(tmp_path / "other")), train, evaluation, planner="llm",
                          loop_n=1, timeout_s=None, baseline_needed=False)
    assert fresh.llm.s_per_call == LLM_CALL_S and "assumed" in fresh.llm.s_source


def test_the_console_says_every_contamination_scan():
    import io

    from rich.console import Console

    from ftagent.engine.events import ContaminationScan
    from ftagent.views.console import ConsoleProgress

    out = io.StringIO()
    display = ConsoleProgress(Console(file=out, force_terminal=False, width=200), loop_n=2, timeout_s=None)
    display(ContaminationScan(dataset="data.json (debug)", rows_checked=100, items_checked=160, loop=0))
    display(ContaminationScan(dataset="data.json", rows_checked=2000, items_checked=160, flagged_rows=3, passed=False,
                              loop=0))
    text = out.getvalue()
    assert "loop 0 (1 of 2) contamination scan of data.json (debug): 100 rows vs 160 benchmark items, clean" in text
    assert "contamination scan of data.json: 2,000 rows vs 160 benchmark items, 3 row(s) hold benchmark items" in text
