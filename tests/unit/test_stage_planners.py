"""Issue 40: the planners choose stages (the offline policy; the LLM's reply and prompts), memory per stage."""

from __future__ import annotations

from ftagent.core.trace import Experiment, Trace
from ftagent.core.types import Hypothesis
from ftagent.planners.heuristic.stages import choose_stage, sampled_correct
from ftagent.tools.llamafactory.memory import model_spec
from ftagent.tools.llamafactory.stage_memory import stage_estimate, stage_table


def _exp(loop: int, stage: str = "sft", *, score: float | None = 40.0, decision: bool = False,
         weights_from: int | None = None, correct: int | None = None) -> Experiment:
    plan = {"sampling": {"samples": 8, "prompts": 4, "correct": correct, "prompts_mixed": 1}} if correct is not None else {}
    return Experiment(loop=loop, hypothesis=Hypothesis(hypothesis=stage, stage=stage, weights_from=weights_from),
                      val_score=score, decision=decision, plan=plan)


def _trace(*exps: Experiment) -> Trace:
    sota = [e.loop for e in exps if e.decision]
    return Trace(experiments=list(exps), sota_loop=sota[-1] if sota else None)


ENABLED = ["sft", "dpo", "grpo"]


def test_sft_until_it_plateaus_then_dpo_from_the_best_weights() -> None:
    assert choose_stage(Trace(), ENABLED).stage == "sft"
    assert choose_stage(_trace(_exp(0, decision=True)), ENABLED).stage == "sft"  # a gain: more SFT
    assert choose_stage(_trace(_exp(0, score=0.0)), ENABLED).stage == "sft"  # nothing beat the baseline yet
    choice = choose_stage(_trace(_exp(0, decision=True), _exp(1)), ENABLED)
    assert (choice.stage, choice.weights_from) == ("dpo", 0)
    assert "Loop 1 (SFT) brought no significant gain" in choice.reason and "DPO from loop 0" in choice.reason


def test_grpo_after_dpo_unless_the_best_weights_never_answered_right() -> None:
    tried = _trace(_exp(0, decision=True), _exp(1), _exp(2, "dpo", weights_from=0, correct=3))
    choice = choose_stage(tried, ENABLED)
    assert (choice.stage, choice.weights_from) == ("grpo", 0) and "answered 3 training prompts right" in choice.reason
    zero = _trace(_exp(0, decision=True), _exp(1), _exp(2, "dpo", weights_from=0, correct=0))
    choice = choose_stage(zero, ENABLED)
    assert choice.stage == "sft" and "every reward 0" in choice.reason
    assert sampled_correct(zero, 0) == 0 and sampled_correct(zero, 5) is None


def test_a_dpo_best_is_followed_by_grpo_not_by_more_preference() -> None:
    trace = _trace(_exp(0, decision=True), _exp(1), _exp(2, "dpo", weights_from=0, correct=3, decision=True))
    choice = choose_stage(trace, ENABLED)
    assert (choice.stage, choice.weights_from) == ("grpo", 2)
    after = _trace(*trace.experiments, _exp(3, "grpo", weights_from=2))
    assert choose_stage(after, ENABLED).stage == "sft"  # every enabled stage tried from the best weights


def test_without_sft_the_first_stage_starts_from_the_base_model() -> None:
    choice = choose_stage(Trace(), ["dpo", "grpo"])
    assert (choice.stage, choice.weights_from) == ("dpo", None) and "no SFT" in choice.reason
    assert choose_stage(_trace(_exp(0, "dpo", score=0.0)), ["dpo", "grpo"]).stage == "grpo"


def test_heuristic_proposer_reads_ft_stages_and_builds_a_stage_hypothesis(tmp_path) -> None:
    from types import SimpleNamespace

    from ftagent.planners.heuristic.planner import HeuristicProposer
    from tests.unit.test_prompts import _demo_scenario

    scenario = _demo_scenario(tmp_path)
    settings = SimpleNamespace(ft=SimpleNamespace(stages=["sft", "dpo"]))
    trace = _trace(_exp(0, decision=True), _exp(1))
    trace.experiments[0].plan = {"recipe": {"finetuning_type": "full", "cutoff_len": 64, "seed": 2, "learning_rate": 1e-3}}
    hyp = HeuristicProposer(scenario, settings).propose(trace, None)
    assert (hyp.stage, hyp.weights_from, hyp.parent) == ("dpo", 0, 0)
    assert hyp.plan["recipe"]["pref_loss"] == "sigmoid" and hyp.plan["recipe"]["cutoff_len"] == 64
    assert hyp.sampling is not None and "SFT has plateaued" in hyp.reason
    assert HeuristicProposer(scenario).propose(trace, None).stage == "sft"  # no settings: SFT only, as before


def test_the_llm_reply_names_stage_start_and_sampling_and_an_unknown_stage_is_refused() -> None:
    import pytest
    from pydantic import ValidationError

    from ftagent.planners.llm.propose import ProposalReply

    reply = ProposalReply.model_validate({"hypothesis": "h", "stage": "DPO", "weights_from": 2,
                                          "sampling": {"samples_per_prompt": 8, "temperature": 0.7}})
    assert reply.stage == "dpo" and reply.weights_from == 2 and reply.sampling.samples_per_prompt == 8
    with pytest.raises(ValidationError, match="Did you mean 'grpo'"):
        ProposalReply.model_validate({"hypothesis": "h", "stage": "gpro"})
    assert ProposalReply.model_validate({"hypothesis": "h"}).stage == "sft"  # an older reply: SFT


def test_the_proposal_prompt_states_each_enabled_stage_and_only_those() -> None:
    from ftagent.planners.llm.stages import stage_line, stages_rule

    text = stages_rule(["sft", "dpo", "grpo"])
    assert "`dpo` — direct preference optimisation" in text and "`grpo` — group relative" in text
    assert "`kto`" not in text and "weights_from" in text and "never benchmark items" in text
    assert stages_rule(["sft"]).startswith("One training stage only")
    exp = _exp(3, "dpo", weights_from=1, correct=5)
    assert stage_line(exp).startswith("- Stage: dpo from loop 1's weights; sampling of the start weights: 8 answers")
    assert stage_line(_exp(0)) == ""


def test_memory_per_stage_counts_the_reference_and_the_sequences() -> None:
    spec = model_spec("Qwen2.5-7B")
    sft, dpo = stage_estimate(spec, "sft", "lora", 80.0), stage_estimate(spec, "dpo", "lora", 80.0)
    assert dpo.reference_gb_per_gpu == 0 and dpo.max_seq_len == sft.max_seq_len // 2  # LoRA: adapter disabled
    full = stage_estimate(spec, "dpo", "full_gc", 80.0, 8)
    assert abs(full.reference_gb_per_gpu - 2 * spec.params / 8 / 1e9) < 0.01  # a bf16 copy, sharded by ZeRO-3
    assert stage_estimate(spec, "orpo", "full_gc", 80.0, 8).reference_gb_per_gpu == 0  # reference-free
    grpo = stage_estimate(spec, "grpo", "lora", 80.0)
    assert grpo.sequences == 8 and grpo.max_seq_len == sft.max_seq_len // 8
    assert stage_estimate(spec, "grpo", "full_gc", 80.0, 8, grpo_beta=0.04).reference_gb_per_gpu > 0
    assert "| dpo | lora | yes |" in stage_table(spec, ["sft", "dpo"], 80.0)


def test_report_and_ui_name_each_loops_stage(tmp_path) -> None:
    from ftagent.engine.event_log import EventLog
    from ftagent.engine.events import (
        HypothesisEvent,
        LoopEnd,
        SamplingEvent,
        SessionStart,
        TrainingEvent,
    )
    from ftagent.ui.frames import stage_text
    from ftagent.views.report import build_report, render_markdown
    from ftagent.views.session import load_session

    session = tmp_path / "sess"
    log = EventLog(session / "events.jsonl")
    log.emit(SessionStart(session_id="sess", benchmark="demo_add"))
    log.emit(HypothesisEvent(loop=0, hypothesis="sft", stage="sft"))
    log.emit(TrainingEvent(loop=0, output_dir="o0", config={"stage": "sft", "learning_rate": 1e-3}, chain=["sft"]))
    log.emit(LoopEnd(loop=0, status="succeeded"))
    log.emit(HypothesisEvent(loop=1, hypothesis="dpo", stage="dpo", weights_from=0))
    log.emit(SamplingEvent(loop=1, stage="dpo", model="m", source="data.json of loop 0", prompts=4, samples=16,
                           correct=5, prompts_mixed=2, temperature=1.0, samples_per_prompt=4, start_loop=0))
    log.emit(TrainingEvent(loop=1, output_dir="o1", config={"stage": "dpo", "learning_rate": 1e-4, "pref_beta": 0.1},
                           stage="dpo", chain=["sft", "dpo"]))
    log.emit(LoopEnd(loop=1, status="succeeded"))
    rows = {r.loop: r for r in build_report(session).loops}
    assert rows[1].config["stage"] == "dpo" and list(rows[1].config)[0] == "stage"
    assert rows[1].chain == ["sft", "dpo"] and rows[1].weights_from == 0 and rows[1].sampling["correct"] == 5
    assert rows[0].config["stage"] == "sft"
    assert "stage=dpo, learning_rate=0.0001" in render_markdown(build_report(session))
    lp = next(x for x in load_session(session).loops if x.index == 1)
    assert stage_text(lp).startswith("**Stage**: dpo, from loop 0's weights (chain sft → dpo); sampled 16 answers")
