"""Issue 35, relay round 4: what a played planner could not tell from its prompts (rendered by the real
builders, as the other test_issue35_* files do)."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from ftagent.planners.llm import brief
from ftagent.planners.llm.preview import preview
from tests.helpers.prompt_view import fixed_machine, text_of  # noqa: F401 (fixed_machine: autouse)
from tests.unit.test_prompts import _demo_scenario, _previews, _settings, _trace


@pytest.fixture()
def demo(tmp_path):
    scenario = _demo_scenario(tmp_path / "demo")
    return scenario, _previews(scenario, tmp_path / "demo", _settings())


# --- 1. whether numbers are content words of the paraphrase guard, from the guard's own tokeniser --------------

def test_the_paraphrase_rule_says_numbers_count_and_the_guard_does_what_it_says():
    from ftagent.datasets import contamination as c

    rule = c.rule_words()
    assert "numbers included" in rule and "`171` and `71` differ" in rule
    # issue 39: the example is the session's own item (here none: a neutral one, never another benchmark's)
    assert "{171, legs, many, spiders}" in rule and "plus 11" not in rule
    assert "{11, 171, plus}" in c.rule_words(question="What is 171 plus 11?")
    assert f"less {len(c.STOPWORDS)} function words" in rule
    # the worked example is true: items of one template keep only N, so the paraphrase guard skips them
    items = {f"v:{n}": f"What is {n} plus 11? Put the final answer in \\boxed{{}}." for n in range(10, 70)}
    report = c.fuzzy_scan([{"instruction": "What is 171 plus 11? Put the final answer in \\boxed{}."}], items)
    assert report.items_checked == 0 and not report.flagged
    assert "closing instruction sentence and answer format" in rule


# --- 2. "like the benchmark's prompt" vs the contamination rule: which wins -----------------------------------

def test_the_data_rules_say_the_contamination_rule_wins_over_looking_like_the_benchmark(demo):
    data = demo[1]["data"]
    assert "should read like the benchmark's prompt" not in data
    assert "Where that pulls against the contamination check, the check\n  wins" in data
    assert "keep the benchmark's format, put the content outside its items" in data


# --- 3. the logging rule, from one owner, in the proposal prompt too -------------------------------------------

def test_the_logging_rule_is_stated_where_the_recipe_is_asked_and_where_the_config_is_written(demo):
    from ftagent.planners.llm.templates import LOGGING_RULE

    assert LOGGING_RULE in demo[1]["propose"] and LOGGING_RULE in demo[1]["config"]
    assert "20-50 loss points" in LOGGING_RULE


# --- 4. no --timeout: no limit; later loops: the latest measured s/step beside the probe's ---------------------

def _forecast(timeout_s=None):
    from ftagent.core.forecast_arithmetic import Forecast, TrainPlan, TrainProbe

    probe = TrainProbe(key="t", s_per_step=0.079, startup_s=17.0, validate_s=28.0, steps=10, load="2 cpus, busy")
    return Forecast(planner="llm", loops=[], plan=TrainPlan(method="full", rows=2000, epochs=1, effective_batch=32,
                                                           cutoff_len=64), timeout_s=timeout_s, train_probe=probe)


def test_without_a_timeout_the_prompts_say_there_is_no_wall_clock_limit():
    from ftagent.planners.llm.estimate import estimate_line
    from ftagent.planners.llm.prompting import time_left

    line = estimate_line(_forecast())
    assert "no wall-clock limit" in line and "leave time for the remaining loops" not in line
    ctx = NS(time_left=lambda: None, loop=NS(index=0), state=NS(config={"run": {"loop_n": 2}}))
    assert "no session time limit (no --timeout)" in time_left(ctx)
    timed = NS(time_left=lambda: 600.0, loop=NS(index=0), state=NS(config={"run": {"loop_n": 2}}))
    assert "no session time limit" not in time_left(timed)


def test_a_later_loop_shows_the_latest_measured_speed_beside_the_probe(tmp_path):
    scenario = _demo_scenario(tmp_path / "demo").model_copy(update={"forecast": _forecast()})
    trace = _trace(tmp_path / "demo", scenario.baseline.score, scenario.core_metric)  # loop 0 trained, 0.5 s/step
    text = text_of(preview("propose", scenario, _settings(), trace))
    results = text.split("# Results so far", 1)[1].split("\n#", 1)[0]
    assert "the latest training run (loop 0) measured 0.5 s per optimizer step" in results
    assert "the 10-step probe before the first run measured 0.079 s per step" in results
    first = text_of(preview("propose", scenario, _settings()))  # before any training: the probe alone
    assert "0.079 s per optimizer step measured" in first and "latest training run" not in first


# --- 5. no filler: the scenario sentence, a prompt template that is only a placeholder ------------------------

def test_no_filler_sentence_and_no_placeholder_only_prompt_template(demo, tmp_path):
    assert "The same facts reach every prompt" not in demo[1]["propose"]
    assert "# Scenario\n\n## Objective" in demo[1]["propose"]
    scenario = _demo_scenario(tmp_path / "q")

    def spec(prompt):
        return NS(spec=NS(prompt=prompt, input_columns=["question"], output_column="answer", answer_rule="",
                          description="", max_out_len=None), config=None)

    assert brief.brief_facts(scenario, benchmark=spec("{question}")).prompt_format == ""
    assert "How the benchmark asks" not in brief.render_brief(scenario, benchmark=spec("{question}"))
    said = "{question}\nAnswer with a number."
    assert brief.brief_facts(scenario, benchmark=spec(said)).prompt_format == said


# --- 6. a very small model: one factual line, from the model facts ---------------------------------------------

def test_a_very_small_model_is_said_to_learn_surface_forms(demo, tmp_path):
    assert "learns the exact surface form of its training rows" in demo[1]["propose"]  # 558K parameters
    scenario = _demo_scenario(tmp_path / "big")
    big = scenario.model_copy(update={"model_info": scenario.model_info.model_copy(
        update={"num_parameters": 7_000_000_000})})
    assert "surface form" not in brief.render_brief(big, benchmark=None)
