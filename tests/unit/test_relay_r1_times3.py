"""Relay round r1 (issue 39 item 5, played on the user benchmark "What is 3 times N?" with a raw file of
"Multiply N by 3." rows): what the player of the LLM found missing or confusing in the requests."""

from __future__ import annotations

import json

from ftagent.datasets.contamination import rule_words, scan_rows
from ftagent.datasets.makeup import profile_rows
from ftagent.datasets.template_scan import signature, variants
from tests.helpers.times3_raw import benchmark_items, benchmark_numbers


def test_the_rule_lists_each_phrasing_the_scan_reads_and_each_is_read_so():
    """The rule said "`add A and B` read as `A plus B` (likewise product, difference, quotient)": whether
    "Multiply N by 3." is "N times 3" to check 4 -- and so whether the raw file's clean two-digit rows stay
    clean in the benchmark's wording -- had to be guessed. Each listed phrasing is checked against the scan."""
    from ftagent.datasets.template_scan import READ_AS

    rule = rule_words()
    for op, phrases in READ_AS:
        for phrase in phrases:
            assert f"`{phrase}`" in rule, phrase
            text = phrase.replace("A", "12").replace("B", "45")
            assert tuple(signature(text)) in variants(["12", op, "45"]), (phrase, signature(text))
    assert "`multiply A by B`" in rule and "likewise product" not in rule


def test_a_raw_row_that_passed_the_scan_still_passes_in_the_benchmarks_wording():
    """What the rule now says of raw rows: "Multiply 24 by 3." (24 is no item's N) passes, and so does the
    benchmark's own sentence with 24; "Multiply N by 3." with an item's N is a hit (check 4)."""
    items = {f"times3/validation:{i}": it["question"] for i, it in enumerate(benchmark_items())}
    used = set(benchmark_numbers())
    free, taken = min(n for n in range(10, 100) if n not in used), min(used)

    def flagged(text: str) -> bool:
        return bool(scan_rows([{"instruction": text, "input": "", "output": ""}], items).flagged)

    assert not flagged(f"Multiply {free} by 3.")
    assert not flagged(f"What is 3 times {free}? Put the final answer in \\boxed{{}}.")
    assert flagged(f"Multiply {taken} by 3.") and flagged(f"What is {taken} times 3?")
    assert "stay fine rewritten in the benchmark's wording" in rule_words()


def test_each_anomaly_example_names_its_anomaly_and_weighting_by_repetition_is_allowed():
    """An exact duplicate ("Multiply 24 by 3." → "... gives 72.") was listed under Anomalies as "e.g." with no
    reason, and "must drop or repair them" read as a ban on repeating rows on purpose."""
    good = [{"instruction": f"Multiply {n} by 3.", "input": "", "output": f"Multiplying {n} by 3 gives {3 * n}."}
            for n in range(100, 140)]
    rows = [{"instruction": "", "input": "", "output": "lorem"}, {"instruction": 7, "input": "", "output": "x"},
            {"instruction": "asdf", "input": "", "output": ""}, *good, good[3]]
    view = profile_rows(rows).to_markdown()
    assert f"  - e.g. an exact duplicate of an earlier row: {json.dumps(good[3])}" in view, view
    assert "  - e.g. empty instruction: " in view and "  - e.g. not text: " in view and "  - e.g. empty answer: " in view
    assert "repeating rows on purpose, to weight a group, is a choice of the plan" in view


def test_the_example_item_comes_with_its_token_counts(tmp_path):
    """cutoff_len was chosen without knowing how long the benchmark's own prompt is in the model's tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from tests.unit.test_issue39_holdout import _times3_scenario

    vocab = {c: i for i, c in enumerate(["[UNK]", "What", "is", "3", "times", "?", "Put", "the", "final", "answer",
                                         "in", "\\", "boxed", "{", "}", "."])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    (tmp_path / "m").mkdir()
    tok.save(str(tmp_path / "m" / "tokenizer.json"))
    brief = _times3_scenario(tmp_path, "times3_tokens")[0].description_text  # its own name
    # "What is 3 times 61 ? Put the final answer in \ boxed {}." (the number and "{}." one [UNK] each): 14
    assert ("Reference answer: `\\boxed{" in brief and "(the model's tokenizer counts 14 tokens in this prompt "
            "and 5 in the reference answer, before the chat template's tokens)" in brief), brief


def test_division_items_are_matched_by_template_and_a_next_sentences_operation_hides_no_hit():
    """Found while checking the rule's list against the scan: "over" is also a function word, so "84 / 12"
    (and "/" was not read as "over" at all) had the signature ``84 12``, no template, and no division item was
    ever template-matched; and the longer-expression guard looked across sentences, so "Multiply 16 by 3.
    Plus, show your work." passed check 4."""
    items = {f"d:{k}": f"What is {12 * k} / 12?" for k in (5, 6, 7, 8, 9)}
    items |= {f"t:{n}": f"What is 3 times {n}? Put the final answer in \\boxed{{}}." for n in range(10, 30)}

    def flagged(text: str) -> bool:
        return bool(scan_rows([{"instruction": text, "input": "", "output": ""}], items).flagged)

    for hit in ("Divide 84 by 12.", "What is 84 divided by 12?", "the quotient of 84 and 12", "What's 84 ÷ 12?",
                "Multiply 16 by 3. Plus, show your work.", "Show your work, minus the fluff. Multiply 16 by 3."):
        assert flagged(hit), hit
    for honest in ("What is 12 / 84?", "Divide 84 by 7.", "Divide 120 by 12.", "Multiply 16 by 3 plus 4.", "What is 2 plus 3 times 16?",
                   "Read it over and divide 85 by 12.", "On 12/05 we met."):
        assert not flagged(honest), honest


def _saturated_trace(holdout: bool):
    from ftagent.core.holdout import Holdout
    from ftagent.core.trace import Experiment, Trace
    from ftagent.core.types import Hypothesis

    trace = Trace(core_metric="accuracy", direction="max", baseline_val=0.0)
    if holdout:
        trace.holdout = Holdout(seed=39005, share=0.7, feedback={"times3": ["7"]}, selection={"times3": ["0", "1"]})
    trace.record(Experiment(loop=0, val_score=100.0, hypothesis=Hypothesis(hypothesis="h", task="t")))
    trace.sota_loop = 0
    return trace


def test_the_best_rule_names_the_selection_part_and_a_saturated_best_asks_for_a_cheaper_run(tmp_path):
    """req_4's "Rule:" said a gain on "validation" decides, beside "Why: Selection part (21 validation items
    never shown ...)"; at 100 % req_5 still closed with "Propose the next improvement on loop 0", which no
    experiment can be, and suggested a robustness run that nothing measures."""
    from ftagent.planners.llm.propose import build_proposal_messages, sota_rule
    from ftagent.planners.llm.view import planner_view
    from tests.unit.test_prompts import _demo_scenario, _settings

    split = planner_view(_saturated_trace(holdout=True))
    rule = sota_rule(split, 0.0)
    assert "accuracy gain on the selection part of validation (never shown to you)" in rule, rule
    assert "no later loop can replace it" in rule and "robustness" not in rule
    assert "gain on the validation split" in sota_rule(planner_view(_saturated_trace(holdout=False)), 0.0)
    ask = build_proposal_messages(_demo_scenario(tmp_path), split, _settings())[1]["content"]
    assert "Loop 0 (the current best) already scores the metric's maximum" in ask
    assert "Propose the next improvement" not in ask


def test_the_feedback_marks_where_the_verdict_ends_and_the_review_begins():
    """req_5: loop 0's "Feedback:" line was the system's verdict with the reviewer's prose pasted after it; a
    later model may take the reviewer's claims for measurements."""
    from ftagent.core.settings import FTSettings, LLMSettings, PathSettings, Settings
    from ftagent.planners.llm.feedback import FeedbackReply, LLMFeedback

    class Client:
        def chat_json(self, messages, model, stage):
            return FeedbackReply(reason="The digit rule was learnt.", next_step="stop")

    trace = _saturated_trace(holdout=False)
    fb = LLMFeedback(None, Settings(FTSettings(), LLMSettings(), PathSettings()), client=Client())  # type: ignore[arg-type]
    fb._messages = lambda *a: []  # type: ignore[method-assign]
    result = fb.feedback(trace.experiments[0], trace, None)
    verdict = result.reason.split(" Review: ")
    assert len(verdict) == 2 and verdict[1] == "The digit rule was learnt." and verdict[0], result.reason


def test_row_tokens_are_counted_as_llamafactory_builds_the_turns(tmp_path):
    """req_6: the config prompt said the longest row is 31 tokens, the data script measured 29: the prompt
    counted "instruction input output" joined by spaces (an empty input left two), LLaMA-Factory's Alpaca
    converter joins the non-empty instruction and input by a newline into the user turn."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from ftagent.planners.llm.prompting import debug_data_stats

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, " ": 1, "\n": 2, "a": 3, "b": 4, "c": 5}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split(pattern=" ", behavior="isolated")
    model = tmp_path / "m"
    model.mkdir()
    tok.save(str(model / "tokenizer.json"))
    (tmp_path / "data.json").write_text(json.dumps([{"instruction": "a b", "input": "", "output": "c"}]))
    stats = debug_data_stats(tmp_path, str(model))
    assert "max 4\n" in stats, stats  # "a", " ", "b" + "c"; before: "a b  c", 6


def test_the_previous_config_leaves_out_the_keys_the_prompt_says_the_system_sets(tmp_path):
    """req_6: "Previous version of the config" showed `disable_gradient_checkpointing`, `bf16`, `fp16`,
    `preprocessing_num_workers`, `dataloader_num_workers` -- keys the same prompt lists as set by the system
    (on a CPU). The config prompt of a child loop, as `ftagent prompts` and the coder build it."""
    from ftagent.core.trace import Experiment, Trace
    from ftagent.core.types import Hypothesis
    from ftagent.planners.llm.code_messages import config_messages
    from ftagent.planners.llm.preview import preview
    from tests.unit.test_prompts import _demo_scenario, _settings

    scenario = _demo_scenario(tmp_path)
    validated = tmp_path / "train.yaml"
    validated.write_text("finetuning_type: full\nlearning_rate: 0.001\nsave_strategy: 'no'\n"
                         "disable_gradient_checkpointing: true\nbf16: false\nfp16: false\n"
                         "preprocessing_num_workers: 1\ndataloader_num_workers: 0\n", encoding="utf-8")
    trace = Trace(core_metric="accuracy", baseline_val=62.0)
    trace.record(Experiment(loop=0, val_score=70.0, artefacts={"train.yaml": str(validated)},
                            hypothesis=Hypothesis(hypothesis="h", task="t")))
    child = Hypothesis(hypothesis="h2", task="t2", parent=0)
    text = preview("config", scenario, _settings(), trace, hypothesis=child).messages[-1]["content"]
    shown = text.split("# Previous version of the config\n", 1)[1].split("\n\n", 1)[0]
    assert shown == "```yaml\nfinetuning_type: full\nlearning_rate: 0.001\nsave_strategy: 'no'\n```", shown
    gpu = scenario.model_copy(update={"parameter_catalogue": _catalogue_text(True)})
    on_gpu = config_messages(gpu, _settings(), child, previous=validated.read_text())[-1]["content"]
    assert "disable_gradient_checkpointing: true" in on_gpu  # on a GPU it is the planner's choice


def _catalogue_text(gpu: bool) -> str:
    from tests.unit.test_prompts import _catalogue_text as text

    return text(gpu)


def test_a_loss_flat_near_zero_for_most_of_the_run_is_called_flat():
    """req_4/req_5: loop 0's curve (35 points, the real run) reached 0.0006 at step 1,400 and stayed within the
    4-decimal rounding to step 7,000; the summary said "falling, levelling off at the end", and the player had
    to read the table to see that 80 % of the run taught nothing."""
    from ftagent.planners.llm.loss_words import loss_summary

    losses = [2.1617, 0.0899, 0.0155, 0.0101, 0.0041, 0.0007, 0.0006, 0.0005, 0.0004, 0.0004, 0.0003, 0.0003, 0.0003,
              *[0.0002] * 6, *[0.0001] * 16]
    summary = loss_summary([{"step": 200 * (i + 1), "loss": v} for i, v in enumerate(losses)])
    assert summary is not None and summary.trend.startswith("fell early, then flat from step 1400 for the last 83%")
    assert "a run that ends there reaches the same loss" in summary.trend
    # a curve still well above the rounding keeps its ratio rule: 0.0226 -> 0.0169 in the last fifth is falling
    falling = [2.0, 1.0, 0.5, 0.2, 0.1, 0.06, 0.04, 0.03, 0.0226, 0.02, 0.0185, 0.0169]
    assert loss_summary([{"step": i, "loss": v} for i, v in enumerate(falling)]).trend == \
        "falling, still falling at the end"
