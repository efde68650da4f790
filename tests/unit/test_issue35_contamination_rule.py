"""Issue 35 (relay critique), item 2: the contamination rule, stated exactly where the planner is told
about it (the brief's Contamination check, in the data prompt; issue 43: the proposal gets a summary)."""

from __future__ import annotations

from ftagent.planners.llm.preview import preview
from tests.helpers.prompt_view import fixed_machine, text_of  # noqa: F401 (fixed_machine: autouse)
from tests.unit.test_prompts import _demo_scenario, _settings

# --- 2. the contamination rule, exactly, where the planner is told about it ---------------------------------

def test_the_data_prompt_states_the_contamination_rule_from_the_scan_itself(tmp_path):
    from ftagent.datasets import contamination as c
    from ftagent.planners.llm.brief import CONTAMINATION_SUMMARY

    scenario = _demo_scenario(tmp_path)
    rule = c.rule_words()
    # the data script's writer gets the rule whole, under its heading (issue 43: its lead words not again); the
    # proposal, which plans the data, what planning needs of it
    data = text_of(preview("data", scenario, _settings())).split("## Contamination check\n", 1)[1]
    assert data.startswith("E" + rule.removeprefix("Contamination check, exactly: e"))
    proposal = text_of(preview("propose", scenario, _settings())).split("Training data rules", 1)[1]
    assert CONTAMINATION_SUMMARY in proposal and "Both sides are normalised" not in proposal
    # the numbers are the scan's own, and the consequence is the real one (the data step fails, nothing dropped)
    assert f"fewer than {c.N_GRAM} tokens" in rule and f"at least {c.MIN_COVERAGE:.0%}" in rule
    assert "whole word tokens" in rule and "NFKC" in rule
    assert "instruction, input, output, chosen, rejected, system and every history turn" in rule
    assert "One such row fails the data step" in rule and "no row is dropped for you" in rule
    # what the rule says is what the scan does: a bare core inside a longer row is caught, a longer number is not
    items = {"demo/validation:0": ["What is 28 times 3? Put the final answer in \\boxed{}."]}
    items |= {f"demo/validation:{i}": [f"What is {i} times 7? Put the final answer in \\boxed{{}}."]
              for i in range(1, 40)}
    caught = c.scan_rows([{"instruction": "Please: what is 28 times 3? Explain.", "output": "84"}], items)
    passed = c.scan_rows([{"instruction": "What is 128 times 3?", "output": "384"}], items)
    assert caught.flagged_rows == 1 and passed.flagged_rows == 0
