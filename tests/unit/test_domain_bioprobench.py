"""BioProBench: loader, extraction of [ANSWER_START]…[ANSWER_END], hand-computed metrics."""

from pathlib import Path

import pytest

from ftagent.benchmarks.domain import bioprobench as bio
from ftagent.benchmarks.domain import evaluate_subtask

FIX = str(Path(__file__).parents[1] / "fixtures" / "benchmarks" / "bioprobench")
S, E = bio.START, bio.END


def test_loader_and_prompts():
    ords = bio.load_items(FIX, "ORD")
    # wrong_steps ["Spin.", "Add buffer.", "Collect cells."], correct order Collect, Add, Spin -> [2, 1, 0]
    assert ords[0]["correct_ids"] == [2, 1, 0]
    assert "['Spin.', 'Add buffer.', 'Collect cells.']" in bio.build_prompt("ORD", ords[0])
    err = bio.load_items(FIX, "ERR")
    assert "Add 500 mL buffer." in bio.build_prompt("ERR", err[0])      # is_correct False -> corrupted
    assert "Spin at 1,000 g." in bio.build_prompt("ERR", err[1])
    assert "Choices:\n['1,200'" in bio.build_prompt("PQA", bio.load_items(FIX, "PQA")[0])



def test_extraction_edge_cases():
    assert bio.extract_pqa(f"{S} 1,400 & 80% {E}") == ("1,400", 80)
    assert bio.extract_pqa(f"{S} 50 uL 90 {E}") == ("50 uL", 90)
    assert bio.extract_pqa(f"{S} a & b & 3 {E}") == (None, None)
    assert bio.extract_pqa(f"{S} 1,400 & 120% {E}") == (None, None)
    assert bio.extract_pqa("1,400 & 80%") == (None, None)                 # wrong/missing tags
    assert bio.extract_ord(f"{S}[0]{E} then {S}[2, 1, 0]{E}") == [2, 1, 0]  # last pair
    assert bio.extract_ord(f"{S}[2, 'x']{E}") is None
    assert bio.extract_ord(f"{S}__import__('os'){E}") is None
    assert bio.extract_err(f"<think>False?</think>{S}True{E}") is True
    assert bio.extract_err("so the answer is\nfalse") is False
    assert bio.extract_err(f"{S}maybe{E}") is None
    assert bio.extract_gen(f"<Structure>..</Structure>{S}\n1. a\n2. b\n{E}") == "1. a\n2. b"
    assert bio.extract_gen("no tags") == "no tags"      # official: untagged text is the answer
    assert bio.extract_gen(None) is None


def test_pqa_metrics_by_hand():
    items = bio.load_items(FIX, "PQA")  # answers "1,400", "50 uL"
    preds = [f"{S} 1,400 & 80% {E}", f"{S} 5 uL & 60% {E}", "no tags"][:2] + []
    # item1 correct conf .8 -> (0.8-1)^2 = 0.04; item2 wrong conf .6 -> 0.36; brier = 0.2; acc 50
    m = evaluate_subtask("bioprobench", "PQA", preds, items)
    assert m["accuracy"] == pytest.approx(50.0) and m["brier_score"] == pytest.approx(0.2)
    m = bio.pqa_metrics(preds + ["garbage"], ["1,400", "50 uL", "x"])
    assert m["failed"] == 1 and m["accuracy"] == pytest.approx(50.0)


def test_ord_metrics_by_hand():
    preds = [f"{S}[2, 1, 0]{E}", f"{S}[1, 0]{E}", f"{S}[0, 1, 2]{E}", f"{S}[0, 0]{E}"]
    golds = [[2, 1, 0], [0, 1], [2, 0, 1], [0, 1]]
    # item1 exact: 3 pairs concordant; item2 reversed: 1 pair discordant;
    # item3 pred 0,1,2 vs gold 2,0,1: pairs (2,0) disc, (2,1) disc, (0,1) conc -> 1 of 3
    # item4 not a permutation -> failed. pooled: C = 3+0+1 = 4, T = 3+1+3 = 7 -> tau = (8-7)/7
    # per-item: 1, -1, -1/3 -> mean -1/9; exact 1/3
    m = bio.ord_metrics(preds, golds)
    assert m["kendall_tau"] == pytest.approx(1 / 7)
    assert m["kendall_tau_item_mean"] == pytest.approx(-1 / 9)
    assert m["exact_match"] == pytest.approx(100 / 3) and m["failed"] == 1


def test_err_metrics_by_hand():
    preds = [f"{S}False{E}", f"{S}False{E}", f"{S}True{E}", f"{S}True{E}", "???"]
    golds = [False, True, False, True, False]
    # positive = False: TP=1 (1), FP=1 (2), FN=1 (3), TN=1 (4); item 5 failed
    # P = R = F1 = 0.5; accuracy = 2/4
    m = bio.err_metrics(preds, golds)
    assert (m["precision"], m["recall"], m["f1"], m["accuracy"], m["failed"]) == (50.0, 50.0, 50.0, 50.0, 1)


def test_gen_metrics_by_hand():
    items = bio.load_items(FIX, "GEN")
    ref = " ".join(items[0]["output"])
    perfect = f"{S}\n{ref}\n{E}"
    m = evaluate_subtask("bioprobench", "GEN", [perfect], items)
    assert m["ROUGE-L"] == pytest.approx(100.0) and m["BLEU-4"] == pytest.approx(100.0)
    # no output scores 0 and counts as failed: mean(100, 0) = 50
    m = bio.gen_metrics([perfect, None], [items[0]["output"]] * 2)
    assert m["ROUGE-L"] == pytest.approx(50.0) and m["failed"] == 1
