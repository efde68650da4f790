"""Issue 43, "What the planner reads": the speed figure says how it scales, the checking step is named, and
each fact of the code-writing prompts is said once, where it is used. Each test fails on d350dfe."""

from __future__ import annotations

import pytest

from ftagent.core.forecast_arithmetic import Forecast, LoopForecast, TrainPlan, TrainProbe
from ftagent.planners.llm.estimate import estimate_line, speed_update_line


def _forecast() -> Forecast:
    probe = TrainProbe(key="t", s_per_step=1.2, startup_s=17.0, validate_s=28.0, steps=10, load="2 cpus, busy")
    return Forecast(planner="llm", loops=[LoopForecast(loop=0, train_s=300, eval_s=120, other_s=95)],
                    plan=TrainPlan(method="lora", rows=2000, epochs=1, effective_batch=32, cutoff_len=512),
                    timeout_s=3600, train_probe=probe)


def test_the_speed_figure_says_how_it_scales_with_the_batch():
    """d350dfe: '1.2 s per optimizer step measured; expect 0.9-1.6 s' with nothing of other batch sizes (the
    loop then ran 2.76 s/step)."""
    line = estimate_line(_forecast())
    assert "1.2 s per optimizer step measured at that batch (0.037 s per row)" in line
    assert "between about the same at any batch (a small model" in line and "one batch measured does not say" in line
    assert "twice the batch" not in line  # relay round r2: a law the tiny model's own figures contradicted
    later = speed_update_line(_forecast(), 0, 276.0, 100, rows_per_s=16.0)
    assert "2.8 s per optimizer step (100 steps in 4 min 36 s, 0.062 s per row" in later
    assert "effective batch 32: 0.037 s per row" in later and "one batch measured does not say which" in later


def test_the_checking_step_is_named_not_called_validation():
    """'Each loop also spends … on validation' meant the validate step, not scoring the validation split."""
    line = estimate_line(_forecast())
    assert "on validation" not in line
    assert ("2 min evaluating the candidate (both splits) and 1 min 35 s processing the data and checking it (the "
            "validate step: config and template checks and a few training steps)") in line
    assert "minus the evaluation and checking time" in line


# --- each fact once, where it is used (the code-writing prompts were 15-19k characters) --------------------------

def _loop_prompts(tmp_path) -> dict[str, str]:
    """One loop's four requests (proposal, data script, config, feedback) on the golden demo scenario."""
    from tests.unit.test_prompts import _demo_scenario, _previews, _settings

    scenario = _demo_scenario(tmp_path / "demo")
    return _previews(scenario, tmp_path / "demo", _settings())


def test_the_contamination_rule_is_said_once_in_a_loops_prompts_to_the_data_script_writer(tmp_path):
    """d350dfe: the ~2.3k-character rule was in the proposal and the data-script prompt alike. The data-script
    writer, who filters the rows, gets the rule; the proposal gets what planning needs of it, one bullet."""
    prompts = _loop_prompts(tmp_path)
    rule = "Both sides are normalised first"  # a sentence of the rule (ftagent.datasets.contamination.rule_words)
    assert {step: text.count(rule) for step, text in prompts.items()} == \
        {"propose": 0, "data": 1, "config": 0, "feedback": 0}
    assert "## Contamination check\nEvery row of data.json" in prompts["data"]  # under its heading, said once
    from ftagent.planners.llm.brief import CONTAMINATION_SUMMARY

    assert prompts["propose"].count(CONTAMINATION_SUMMARY) == 1
    for step, text in prompts.items():  # the data cap: in the brief's data rules, not again in the rules around it
        assert text.count("At most 2000 training samples") + text.count("Keep at most 2000") <= 1, step


def _user_file(tmp_path, rows, suffix=".jsonl"):
    """``rows`` written as a user file of ``suffix`` and registered (the real --dataset path); its folder name."""
    from ftagent.datasets.user_file.register import register_user_file
    from tests.helpers.user_files import write_user_file

    root = tmp_path / "datasets"
    return register_user_file(write_user_file(tmp_path / f"raw{suffix}", rows), root).name, root


def test_the_data_prompt_shows_a_plain_jsonl_files_converter_without_the_other_formats_branches(tmp_path):
    """d350dfe: the converter of a plain Alpaca JSONL file carried its ShareGPT, CSV and parquet branches (~2.6k
    characters); the prompt shows to_alpaca with only this file's reader and row builder."""
    from ftagent.planners.llm.code_context import converter_sources

    rows = [{"instruction": f"Multiply {n} by 3.", "input": "", "output": f"{3 * n}"} for n in range(100, 140)]
    name, _ = _user_file(tmp_path, rows)
    code = converter_sources([name])[name]
    for other in ("read_parquet", "csv", "role_tag", "turns", "pairs"):
        assert other not in code, other
    assert "def to_alpaca(" in code and "splitlines()" in code and len(code) < 1800, len(code)


SHAREGPT = [{"conversations": [{"from": "system", "value": "Be brief."}, {"from": "human", "value": "Hi"},
                               {"from": "gpt", "value": "Hello"}, {"from": "human", "value": f"What is {a} + 2?"},
                               {"from": "gpt", "value": str(a + 2)}]} for a in range(10, 20)]
ALPACA = [{"instruction": f"What is {a} + 1?", "input": "x" if a % 3 else "", "output": f"{a + 1}"} for a in range(20)] + \
    [{"instruction": "", "input": "", "output": "dropped"}]


@pytest.mark.parametrize(("suffix", "rows"), [(".jsonl", ALPACA), (".json", ALPACA), (".csv", ALPACA),
                                              (".parquet", ALPACA), (".jsonl", SHAREGPT), (".json", SHAREGPT)])
def test_the_shown_converter_reads_its_file_as_the_registered_one_does(tmp_path, suffix, rows):
    """What the prompt shows (and `ftagent datasets show --code`, and the heuristic planner pastes) runs alone and
    returns what the registered converter returns, for each reader and layout it was cut from."""
    from ftagent.datasets import registry
    from ftagent.datasets.base import converter_source
    from ftagent.datasets.user_file.convert import to_alpaca

    name, root = _user_file(tmp_path, rows, suffix)
    source = registry.get_source(name)
    assert source.converter is to_alpaca  # the registered converter
    namespace: dict = {}
    exec(compile(converter_source(source), "process_data.py", "exec"), namespace)  # noqa: S102 - our own source
    for args in ((None, None), (5, 0), (None, None, True)):
        assert namespace["to_alpaca"](str(root / name), *args) == to_alpaca(root / name, *args), args
    assert len(to_alpaca(root / name, None, None, True)) == len(rows)


def test_a_raw_files_samples_are_shown_once_each(tmp_path):
    """d350dfe: two of the catalogue's samples reappeared among the stratified ones of the file's notes, and a
    group of identical rows showed the same row twice."""
    import json
    import re

    from ftagent.datasets.catalogue import build_catalogue, read_catalogue, render_entry
    from tests.helpers.times3_raw import raw_rows

    name, root = _user_file(tmp_path, raw_rows(), ".json")
    build_catalogue(root, [name])
    entry = render_entry(name, read_catalogue(root)[name], "full")
    shown = [json.loads(m) for m in re.findall(r"^- (?:sample \d+: )?(\{.*\})$", entry, flags=re.MULTILINE)]
    keyed = [json.dumps({k: v for k, v in r.items() if v}, sort_keys=True) for r in shown]
    assert len(shown) >= 5 and len(keyed) == len(set(keyed)), entry
    assert "- samples: in the README excerpt below" in entry


def test_the_config_prompt_says_the_row_count_the_proposal_plans(tmp_path):
    """d350dfe: the config prompt said "Rows: not known yet" when the task fixed 2,000. The proposal now names the
    count as a number ("rows"), the config is sized by it."""
    from ftagent.core.trace import Trace
    from ftagent.planners.llm.preview import preview
    from ftagent.planners.llm.propose import LLMProposer, ProposalReply
    from tests.unit.test_prompts import _demo_scenario, _settings

    scenario = _demo_scenario(tmp_path)

    class Client:
        def chat_json(self, messages, model, stage):
            assert '"rows": the number of training rows' in messages[0]["content"]
            return model.model_validate({"hypothesis": "[Data] 2,000 generated rows", "task": "1) 2,000 rows 2) full",
                                         "rows": "2,000"})

    trace = Trace(core_metric="accuracy", baseline_val=62.0)
    hypothesis = LLMProposer(scenario, _settings(), client=Client()).propose(trace, None)  # type: ignore[arg-type]
    assert hypothesis.rows == 2000
    text = preview("config", scenario, _settings(), trace, hypothesis=hypothesis).messages[-1]["content"]
    data = text.split("# Training data", 1)[1].split("\n#", 1)[0]
    assert "- Rows: 2,000, as the proposal plans;" in data and "not known" not in data, data
    more = preview("config", scenario, _settings(), trace, hypothesis=hypothesis.model_copy(update={"rows": 5000}))
    assert "- Rows: 2,000, as the proposal plans (the proposal planned 5,000; at most 2,000 are kept)" in \
        more.messages[-1]["content"]
    assert ProposalReply.model_validate({"hypothesis": "h", "rows": "about a thousand"}).rows is None  # never refused
