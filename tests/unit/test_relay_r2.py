"""Relay round r2 (demo_add, FT_STAGES=sft,dpo,grpo, FT_PARALLEL_TRIALS=2, --loop-n 4): what the player
found in the prompts, each checked through the code that renders them (docs/llm.md "Sixth and seventh relay
rounds")."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace as NS

from ftagent.core.slots import Slot
from ftagent.core.types import Hypothesis
from ftagent.engine.loop import LoopEngine
from ftagent.engine.parallel import LocalSlotPool
from ftagent.engine.session import Session
from ftagent.planners.llm.prompting import time_left
from ftagent.planners.llm.propose import running_words
from tests.unit._workflows import RecordedLoop, RecordingWorkflow, TraceState


class _HypLoop(RecordedLoop):
    hypothesis: Hypothesis | None = None


class _PromptWorkflow(RecordingWorkflow):
    """Propose (serial) writes a hypothesis; propose, train and feedback record what the prompts' budget
    lines say there (the proposal's, the coders', the feedback's)."""

    serial_steps = ("propose", "feedback")

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.said: dict[tuple[int, str], str] = {}
        self._lock = threading.Lock()

    def new_loop(self, index: int) -> _HypLoop:
        return _HypLoop(index=index)

    def _make(self, name: str):
        inner = super()._make(name)

        def step(ctx):
            if name == "propose":
                with self._lock:
                    self.said[(ctx.loop.index, name)] = time_left(ctx)
                ctx.loop.hypothesis = Hypothesis(hypothesis=f"[Training] idea number {ctx.loop.index} " + "word " * 60)
            elif name == "train":  # after its sleep: the other trial has proposed by then
                out = inner(ctx)
                with self._lock:
                    self.said[(ctx.loop.index, name)] = time_left(ctx)
                return out
            elif name == "feedback":
                with self._lock:
                    self.said[(ctx.loop.index, name)] = time_left(ctx, finished=True)
            return inner(ctx)

        return step


def test_k_at_once_the_budget_lines_name_the_loops_running_and_the_loops_left(tmp_path: Path) -> None:
    """r2: "this is loop 2 (numbered from 0); 1 more loop(s) after it" beside a running loop 1 read as loops one
    after another; the feedback of loop 1 said nothing of loop 2 running. Now every request says K, which loops
    run now (by number, what each tests in one line) and how many are left to start."""
    wf = _PromptWorkflow(plan={(i, "train"): "sleep:1.5" for i in range(4)})
    session = Session.create(tmp_path / "log", {"run": {"loop_n": 4}}, state_cls=TraceState)
    summary = LoopEngine(wf, session, loop_n=4, pool=LocalSlotPool([Slot(index=i) for i in range(2)])).run()
    assert (summary.status, summary.loops_done) == ("completed", 4)
    for (index, step), text in wf.said.items():
        this = f"loop {index} has just finished" if step == "feedback" else f"this is loop {index}"
        assert f"- loops run 2 at once (FT_PARALLEL_TRIALS), numbered from 0 in the order they start; {this}" in text
        assert "- loops in this session: 4 (--loop-n counts trials: each loop is one trial, whichever slot it runs on); " in text, text
        assert "numbered from 0)" not in text and "more loop(s)" not in text  # the one-at-a-time wording is gone
    train0 = wf.said[(0, "train")]  # loop 1 trains beside loop 0 (each sleeps 1.5 s in train, then records)
    assert "- running now beside it: loop 1 ([Training] idea number 1 word" in train0 and " …)" in train0
    assert "2 started, 0 finished; 2 more will start as slots free up" in train0
    last = wf.said[(3, "feedback")]
    assert "4 started" in last and "no more will start" in last and "(this one included)" in last


def test_time_left_words_with_two_at_once() -> None:
    """The exact lines (a proposal of loop 2 while loop 1 runs; its feedback once loop 1 has finished)."""
    running = NS(index=1, hypothesis=Hypothesis(hypothesis="[Data] reversed   sum\nformat"))
    ctx = NS(time_left=lambda: 3600.0, loop=NS(index=2), state=NS(config={"run": {"loop_n": 4}}, loop_index=3),
             trials_at_once=lambda: 2, peers=lambda: [running])
    assert time_left(ctx) == (
        "- time left in this session: 1 h\n"
        "- loops run 2 at once (FT_PARALLEL_TRIALS), numbered from 0 in the order they start; this is loop 2\n"
        "- running now beside it: loop 1 ([Data] reversed sum format) — results not in yet\n"
        "- loops in this session: 4 (--loop-n counts trials: each loop is one trial, whichever slot it runs on); 3 started, 1 finished; 1 more will start as slots free up\n"
        "- so about 30 min per loop, this one included (2 run at once), for data processing, training and "
        "evaluation together: plan the training to fit in that (the per-run limits above are ceilings, not targets)")
    alone = NS(time_left=lambda: None, loop=NS(index=3), state=NS(config={"run": {"loop_n": 4}}, loop_index=4),
               trials_at_once=lambda: 2, peers=lambda: [])
    assert time_left(alone, finished=True) == (
        "- no session time limit (no --timeout): only the number of loops ends the session\n"
        "- loops run 2 at once (FT_PARALLEL_TRIALS), numbered from 0 in the order they start; loop 3 has just "
        "finished\n- no other loop is running now\n"
        "- loops in this session: 4 (--loop-n counts trials: each loop is one trial, whichever slot it runs on); 4 started, 4 finished (this one included); no more will start: "
        "the loops above are the session's last")


def test_running_experiments_are_named_by_loop() -> None:
    """The proposal's "Running now" lines name their loop; one proposed in this round but not started says so."""
    h1, h2 = Hypothesis(hypothesis="idea one", task="t1"), Hypothesis(hypothesis="idea two", task="t2")
    ctx = NS(trials_at_once=lambda: 2, peers=lambda: [NS(index=1, hypothesis=h1.model_copy())])
    assert running_words([h1, h2], ctx) == ("- loop 1: idea one Task: t1\n"
                                            "- proposed in this round, not started yet: idea two Task: t2")


def test_the_config_prompt_names_the_experiments_own_stage(tmp_path: Path) -> None:
    """r2: the managed line said `stage` "(the hypothesis's stage: sft, dpo, kto; orpo and simpo …)" in a session
    whose stages were sft, dpo, grpo. It names this experiment's stage (and the pref_loss an orpo run forces);
    a session stored with the old words gets the new ones too."""
    from ftagent.core.settings import FTSettings, LLMSettings, PathSettings, Settings
    from ftagent.planners.llm.code_messages import config_messages
    from tests.unit.test_prompts import _demo_scenario

    scenario = _demo_scenario(tmp_path / "demo")
    settings = Settings(FTSettings(stages="sft,dpo,grpo"), LLMSettings(), PathSettings())
    for stage, words in (("sft", "`stage: sft` (this experiment's stage, sft)"),
                         ("dpo", "`stage: dpo` (this experiment's stage, dpo)"),
                         ("orpo", "`stage: dpo`, `pref_loss: orpo` (this experiment's stage, orpo)")):
        text = config_messages(scenario, settings, Hypothesis(hypothesis="h", task="t", stage=stage))[0]["content"]
        assert words in text and "kto" not in text.split("Fixed values")[1].split("\n#")[0], stage
    scenario.parameter_catalogue = scenario.parameter_catalogue.replace(
        "(the experiment's stage, from its proposal)",
        "(the hypothesis's stage: sft, dpo, kto; orpo and simpo are dpo with their pref_loss)")  # a stored session
    text = config_messages(scenario, settings, Hypothesis(hypothesis="h", task="t"))[0]["content"]
    assert "`stage: sft` (this experiment's stage, sft)" in text and "orpo and simpo" not in text


def test_the_speed_figures_say_what_was_measured_at_which_batch(tmp_path: Path) -> None:
    """r2: "twice the batch is about twice the time per step" beside the probe's 0.32 s/step at batch 32 and loop
    0's 0.31 s/step at batch 16. The latest run's line names its batch, and with two batches measured says what
    they show; no scaling law is asserted."""
    from ftagent.core.forecast_arithmetic import Forecast, TrainPlan, TrainProbe
    from ftagent.core.trace import Experiment, Trace
    from ftagent.planners.llm.propose import history_sections
    from ftagent.planners.llm.view import planner_view

    probe = TrainProbe(key="full", steps=10, s_per_step=0.32, startup_s=49.0, validate_s=30.0)
    forecast = Forecast(planner="llm", loops=[], plan=TrainPlan(method="full", rows=400, epochs=1, effective_batch=32, cutoff_len=64),
                        train_probe=probe)
    out = tmp_path / "loop_0" / "output"
    out.mkdir(parents=True)
    (out / "trainer_state.json").write_text(
        '{"global_step": 7500, "log_history": [{"step": 7500, "train_runtime": 2359.0, '
        '"train_samples_per_second": 50.9}]}', encoding="utf-8")
    trace = Trace(core_metric="accuracy", baseline_val=0.0)
    trace.record(Experiment(loop=0, hypothesis=Hypothesis(hypothesis="h", task="t"), val_score=100.0, decision=True,
                            config={"per_device_train_batch_size": 16, "gradient_accumulation_steps": 1},
                            artefacts={"output_dir": str(out), "workspace": str(out.parent)}))
    body = history_sections(planner_view(trace), forecast)[0].body
    line = next(x for x in body.splitlines() if x.startswith("- Training speed"))
    assert "measured 0.31 s per optimizer step at effective batch 16 (7,500 steps" in line
    assert "probe before the first run measured 0.32 s per step" in line and "effective batch 32: 0.01 s per row" in line
    assert ("Measured here: 0.31 s per step at batch 16, 0.32 s at batch 32: a step's time was about the same at both "
            "batches (1× the time per step for 2× the rows)") in line
    assert "twice the batch" not in line and "in proportion to the tokens" not in line


def test_the_trivial_baseline_says_which_constant_scores_what_on_which_items(tmp_path: Path) -> None:
    """r2: "chosen on validation's feedback part (12 items; seed 39005, share 0.7) [most frequent gold answer, its
    share of the items]" read as if 0.7 were the share of '122'. The line says the constant, its score, the items
    it is scored on and the items it was chosen on, in words, and no seed or share; another feedback part of the
    same size is still computed again (the stored baseline keeps which part it was)."""
    from ftagent.benchmarks import get_benchmark
    from ftagent.benchmarks.base import read_jsonl
    from ftagent.benchmarks.baselines import stored_constant_baseline
    from ftagent.core.holdout import Holdout

    bench = get_benchmark("demo_add")
    bench.prepare(tmp_path)
    val = read_jsonl(tmp_path / "demo_add" / "validation.jsonl")
    part = Holdout(seed=39005, share=0.7, feedback={"demo_add": [str(i) for i in range(12)]})
    base = stored_constant_baseline(bench, tmp_path, tmp_path / "cache", holdout=part)
    assert base is not None
    (sub,) = base.subsets.values()
    answer = sub.answer
    line = base.line()
    assert line == (f"a constant answer scores {base.score:.1f} accuracy on the validation split ({len(val)} items): "
                    f"always {answer!r}, the gold answer met most often on validation's feedback part (12 items)")
    assert "seed" not in line and "share" not in line and "[" not in line
    other = Holdout(seed=7, share=0.7, feedback={"demo_add": [str(i) for i in range(12, 24)]})
    again = stored_constant_baseline(bench, tmp_path, tmp_path / "cache", holdout=other)
    assert again is not None and again.choice == "seed 7, share 0.7"
    assert next(iter(again.subsets.values())).answer == constant_of(val[12:24])


def constant_of(rows: list[dict]) -> str:
    from collections import Counter

    return Counter(" ".join(str(r["answer"]).split()) for r in rows).most_common(1)[0][0]


def test_a_later_loops_config_prompt_says_whose_data_it_shows(tmp_path: Path) -> None:
    """r2: loop 3's config prompt showed loop 0's plain-format statistics ("tokens per output: p50 7, max 7") under
    "Training data" with "(this loop's data script may change it)", while loop 3's script wrote reversed sums of up
    to 11 tokens. The section now says whose data it is and that this loop's script writes new data."""
    import json

    from ftagent.core.settings import FTSettings, LLMSettings, PathSettings, Settings
    from ftagent.core.trace import Experiment, Trace
    from ftagent.planners.llm.code_context import config_extra
    from ftagent.planners.llm.code_messages import config_messages
    from ftagent.planners.llm.view import planner_view
    from tests.unit.test_prompts import _demo_scenario

    scenario = _demo_scenario(tmp_path / "demo")
    ws = tmp_path / "ws" / "loop_0"
    ws.mkdir(parents=True)
    (ws / "data.json").write_text(json.dumps([{"instruction": "What is 47 + 89?", "input": "",
                                               "output": "\\boxed{136}"}]), encoding="utf-8")
    trace = Trace(core_metric="accuracy", baseline_val=0.0)
    trace.record(Experiment(loop=0, hypothesis=Hypothesis(hypothesis="plain", task="t"), val_score=100.0,
                            decision=True, artefacts={"workspace": str(ws)}))
    settings = Settings(FTSettings(), LLMSettings(), PathSettings())
    new = Hypothesis(hypothesis="reversed sums", task="write '231 \\boxed{132}'", parent=0, rows=400)
    text = config_messages(scenario, settings, new, tmp_path / "ws" / "loop_3",
                           extra=config_extra(tmp_path / "ws" / "loop_3", planner_view(trace), scenario, new)
                           )[0]["content"]
    assert "# Training data (loop 0's, not this loop's)" in text
    assert ("These figures are loop 0's data (the experiment built on), not this loop's: this loop's data script "
            "writes new data (the proposal plans 400 rows), and it runs after this config is written") in text
    assert "may change it" not in text and "- 1 rows written by loop 0's data script" in text
    same = new.model_copy(update={"skip_data_processing": True})
    text = config_messages(scenario, settings, same, None,
                           extra=config_extra(None, planner_view(trace), scenario, same))[0]["content"]
    assert "# Training data (loop 0's: this loop runs its data script again)" in text


def test_the_sampled_loss_table_shows_the_steps_the_summary_names() -> None:
    """r2: "min 0.0001 at step 4500" beside a sampled table of 4250 and 4750 (30 points every 250 steps, 12
    sampled). The table keeps the minimum's step, the last step and the plateau's start."""
    from ftagent.core.trace import Experiment
    from ftagent.planners.llm.history import experiment_block
    from ftagent.planners.llm.loss_words import loss_summary

    values = [2.062, 0.9, 0.4, 0.2, 0.1, 0.05, 0.02, 0.01, 0.005, 0.003, 0.002, 0.001, 0.0008, 0.0006, 0.0004,
              0.0003, 0.0002, 0.0001, 0.0002, 0.0002, 0.0002, 0.0002, 0.0002, 0.0002, 0.0002, 0.0002, 0.0002,
              0.0002, 0.0002, 0.0002]
    history = [{"step": 250 * (i + 1), "loss": v} for i, v in enumerate(values)]
    summary = loss_summary(history)
    assert summary is not None and summary.min_step == 4500
    exp = Experiment(loop=1, hypothesis=Hypothesis(hypothesis="h", task="t"), val_score=100.0, loss_history=history)
    block = experiment_block(exp, baseline=0.0, core_metric="accuracy", direction="max", detail="full")
    assert "min 0.0001 at step 4500" in block
    table = block.split("- Loss curve (sampled):")[1]
    for step in summary.named_steps():
        assert f"| {step} | " in table, step
    assert summary.flat_from_step is not None and f"flat from step {summary.flat_from_step}" in block
    assert table.count("\n| ") <= 12 + 3  # 12 sampled rows at most, plus the named ones


def test_the_demo_add_notes_say_the_swapped_pairs_are_left_out_and_the_raw_rows_pass_the_scan() -> None:
    """r2: the notes said the 200 benchmark pairs were removed, while check 4 counts "the two numbers of a plus …
    in either order"; the player could not tell whether (b, a) was removed too. The code removes both orders; the
    notes now say so with the count the code removes, and the claim that the raw rows pass is checked here."""
    from ftagent.benchmarks.demo import demo_add_pairs
    from ftagent.datasets.contamination import scan_rows
    from ftagent.datasets.demo_add import benchmark_pairs, generate_rows
    from tests.unit.test_redteam39_contamination import _answers, _items

    notes = (Path(__file__).resolve().parents[2] / "ftagent" / "datasets" / "readmes" / "demo_add.md").read_text(
        encoding="utf-8")
    removed = benchmark_pairs()
    assert {(b, a) for a, b in demo_add_pairs()} <= removed and len(demo_add_pairs()) == 200
    assert f"in both orders, (a, b) and (b, a): {len(removed)} pairs in all" in " ".join(notes.split())
    rows = generate_rows(exclude=removed)
    report = scan_rows(rows, _items(), answers=_answers())
    assert report.flagged_rows == 0 and not report.spaces and len(rows) == 6000


def test_the_data_prompt_says_which_loops_run_beside_it(tmp_path: Path) -> None:
    """r2: loop 1's data task said "same selection as the plain-format experiment" and its writer was not told
    that loop 0 (that experiment) ran beside it. With K at once the data prompt names the loops in flight; one
    loop at a time it has no such section (the golden prompts)."""
    from ftagent.core.settings import FTSettings, LLMSettings, PathSettings, Settings
    from ftagent.planners.llm.code_messages import data_messages
    from tests.unit.test_prompts import _demo_scenario

    scenario = _demo_scenario(tmp_path / "demo")
    settings = Settings(FTSettings(), LLMSettings(), PathSettings())
    plain = Hypothesis(hypothesis="[Data] 400 stratified raw rows, plain \\boxed{sum} output", task="t")
    ctx = NS(loop=NS(index=1), state=NS(config={"run": {"loop_n": 4}}, loop_index=2), trials_at_once=lambda: 2,
             peers=lambda: [NS(index=0, hypothesis=plain)])
    hyp = Hypothesis(hypothesis="[Data] reversed sums", task="same selection as the plain-format experiment")
    text = data_messages(scenario, settings, hyp, ctx=ctx)[0]["content"]
    assert "## Loops running now" in text
    assert ("- running now beside it: loop 0 ([Data] 400 stratified raw rows, plain \\boxed{sum} output) — results "
            "not in yet") in text
    assert "this is loop 1" in text and "2 started, 0 finished; 2 more will start as slots free up" in text
    alone = data_messages(scenario, settings, hyp, ctx=NS(loop=NS(index=1), state=NS(config={}, loop_index=1)))
    assert "Loops running now" not in alone[0]["content"]
