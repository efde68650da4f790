"""Issue 35 (relay critique), item 2: the contamination rule, stated exactly where the planner is told
about it (the brief's Training data rules, in the data and proposal prompts)."""

from __future__ import annotations

from ftagent.planners.llm.preview import preview
from tests.helpers.prompt_view import fixed_machine, text_of  # noqa: F401 (fixed_machine: autouse)
from tests.unit.test_prompts import _demo_scenario, _settings

# --- 2. the contamination rule, exactly, where the planner is told about it ---------------------------------

def test_the_data_prompt_states_the_contamination_rule_from_the_scan_itself(tmp_path):
    from ftagent.datasets import contamination as c

    scenario = _demo_scenario(tmp_path)
    for step in ("data", "propose"):
        text = text_of(preview(step, scenario, _settings()))
        rules = text.split("Training data rules", 1)[1]
        assert c.rule_words() in rules, step
    rule = c.rule_words()
    # the numbers are the scan's own, and the consequence is the real one (the data step fails, nothing dropped)
    assert f"fewer than {c.N_GRAM} tokens" in rule and f"at least {c.MIN_COVERAGE:.0%}" in rule
    assert "whole word tokens" in rule and "NFKC" in rule and "instruction, input or output" in rule
    assert "One such row fails the data step" in rule and "no row is dropped for you" in rule
    # what the rule says is what the scan does: a bare core inside a longer row is caught, a longer number is not
    items = {"demo/validation:0": ["What is 28 times 3? Put the final answer in \\boxed{}."]}
    items |= {f"demo/validation:{i}": [f"What is {i} times 7? Put the final answer in \\boxed{{}}."]
              for i in range(1, 40)}
    caught = c.scan_rows([{"instruction": "Please: what is 28 times 3? Explain.", "output": "84"}], items)
    passed = c.scan_rows([{"instruction": "What is 128 times 3?", "output": "384"}], items)
    assert caught.flagged_rows == 1 and passed.flagged_rows == 0
