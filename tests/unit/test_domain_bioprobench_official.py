"""BioProBench behaviour that differed from the official Metrics/*.py and prompts (issue #21).

Each test fails on the code before its fix; expected values follow YuyangSunshine/bioprotocolbench
``Metrics/{PQA,ORD,ERR,GEN}.py`` and ``Scripts/prompt_format.py`` @ b6f36cb.
"""

import pytest

from ftagent.benchmarks.domain import bioprobench as bio

S, E = bio.START, bio.END
ORD_ITEM = {"question": "Please sort the following steps titled 'Lysis' in the correct order.",
            "wrong_steps": ["Spin.", "Add buffer.", "Collect cells."],
            "correct_steps": ["Collect cells.", "Add buffer.", "Spin."]}


def test_prompts_are_the_official_wording():
    p = bio.build_prompt("ORD", ORD_ITEM)
    assert "- Give me the correct order of the steps as a list of their original indices (start from 0), no other words." in p
    assert p.endswith(f"{S}a list of the original indices{E}\n")
    pqa = bio.build_prompt("PQA", {"question": "Spin at ____ g.", "choices": ["1,000", "2,000"]})
    assert f"{S}your selected choice & your confidence score{E}" in pqa and "Choices:\n['1,000', '2,000']" in pqa


def test_pqa_empty_answer_is_wrong_not_failed():
    # official: "[ANSWER_START]80%[ANSWER_END]" -> answer "" with confidence 80: a wrong answer
    m = bio.pqa_metrics([f"{S}80%{E}"], ["1,400"])
    assert m["failed"] == 0 and m["accuracy"] == 0.0 and m["brier_score"] == pytest.approx(0.64)


def test_err_is_case_sensitive_as_official():
    assert bio.extract_err(f"{S}TRUE{E}") is None
    assert bio.extract_err(f"{S}FALSE{E}") is None


def test_gen_untagged_text_is_the_answer_and_last_start_tag_wins():
    assert bio.extract_gen("1. Spin.\n2. Dry.") == "1. Spin.\n2. Dry."
    assert bio.extract_gen(f"{S} draft {E} {S}1. Spin.{E}") == "1. Spin."
    m = bio.gen_metrics(["1. Spin the tubes."], [["1. Spin the tubes."]])
    assert m["ROUGE-L"] == pytest.approx(100.0) and m["failed"] == 0


def test_gen_rouge_l_uses_the_porter_stemmer():
    pytest.importorskip("rouge_score")
    # official rouge_score(use_stemmer=True): "centrifuged"/"centrifuge" and "tubes"/"tube" match
    m = bio.gen_metrics(["centrifuged tubes"], [["centrifuge tube"]])
    assert m["ROUGE-L"] == pytest.approx(100.0)


def test_ord_scores_step_texts_as_official():
    ref = bio.reference("ORD", ORD_ITEM)
    assert bio.ord_metrics([f"{S}[2, 1, 0]{E}"], [ref])["exact_match"] == 100.0
    # duplicate step texts: officially valid (indices are 0..n-1) and scored on the texts
    dup = {"wrong_steps": ["Wash.", "Spin.", "Wash."], "correct_steps": ["Wash.", "Spin.", "Wash."]}
    m = bio.ord_metrics([f"{S}[0, 1, 2]{E}"], [bio.reference("ORD", dup)])
    assert m["failed"] == 0 and m["exact_match"] == 100.0
