"""PANORAMA: loader on the parquet fixtures, prompts, extraction and hand-computed metrics."""

from pathlib import Path

import pytest

from ftagent.benchmarks.domain import panorama as pan

FIX = Path(__file__).parents[1] / "fixtures" / "benchmarks" / "panorama"
pytest.importorskip("pyarrow")


def test_loader_decodes_json_columns_and_prompts():
    par, pi, noc = (pan.load_items(str(FIX), t) for t in pan.TASKS)
    assert par[0]["identifier"] == "par4pc_app14704145_claim1"
    assert isinstance(pi[0]["options"], dict) and pi[0]["gold_answers"] == [8]
    assert noc[1]["answer"]["code"] == "103"
    p = pan.build_prompt("par4pc", par[0])
    assert "(H) Patent ID: US20140007" in p and '{"answer": "A"}' in p
    assert "Claim 1: 1. A cup holder" in pan.build_prompt("pi4pc", pi[0])
    assert pan.build_prompt("pi4pc", pi[0]).index("2: Intro") < pan.build_prompt("pi4pc", pi[0]).index("36: Steel")
    assert '"code": "103"' in pan.build_prompt("noc4pc", noc[0], cot=True)


@pytest.mark.parametrize("text,want", [
    ('{"answer": ["A", "c", "AB"]}', ["A", "C"]),
    ('```json\n{"answer": "A, G"}\n```\nHope this helps.', ["A", "G"]),
    ('<think>maybe B</think>Sure! {"reason": "x", "answer": "G"} done', ["G"]),
    ('{"answer": ["A", "B"] oops', ["A", "B"]),    # unclosed object: regex fallback on "answer": [...]
    ('{"answer": ["A", "B"', None),                 # truncated mid-list: unparseable
    ("I think it is a hard one.", None),            # no JSON -> unparseable (no letter scan)
])
def test_par4pc_extraction(text, want):
    assert pan.extract_par4pc(text) == want


def test_fork_fallback_letter_scan_is_opt_in():
    assert pan.extract_par4pc("Patents A and D.", fork_fallback=True) == ["A", "D"]
    assert pan.extract_pi4pc("paragraph 36 fits") is None
    assert pan.extract_pi4pc("paragraph 36 fits", fork_fallback=True) == 36
    assert pan.extract_pi4pc('{"answer": "12"}') == 12
    assert pan.extract_noc4pc('{"code": "allow"}') == "ALLOW"
    assert pan.extract_noc4pc('{"code": "104"}') is None
    assert pan.extract_noc4pc("Rejected under 103 I think") is None
    assert pan.extract_noc4pc("Rejected under 103 I think", fork_fallback=True) == "103"


def test_par4pc_metrics_by_hand():
    refs = pan.load_items(str(FIX), "par4pc")  # gold {A,G} silver {C}; gold {B}
    preds = ['{"answer": ["A", "C"]}', "no json here"]
    # item 1: pred {A,C}: TP=1 (A), FP=1 (C, silver counts as FP for F1), FN=1 (G) -> F1 = 2/(2+1+1)=0.5
    # item 2: unparseable -> pred {}: TP=0, FP=0, FN=1 -> F1 = 0
    # official macro F1 = mean(0.5, 0) = 25.0
    # pooled: TP=1 FP=1 FN=2 -> P=1/2, R=1/3, F1 = 2*(1/6)/(5/6) = 0.4 -> micro_f1 = 40.0
    # custom: item1 FP_custom = |{C}-gold-silver| = 0 -> (2*1-0-1)/(2*2)=0.25; item2 (0-0-1)/2 <0 -> 0; mean 12.5
    m = pan.par4pc_metrics(preds, refs)
    assert m["macro_f1"] == pytest.approx(25.0)
    assert m["micro_f1"] == pytest.approx(40.0)
    assert m["precision"] == pytest.approx(50.0) and m["recall"] == pytest.approx(100 / 3)
    assert m["custom_score"] == pytest.approx(12.5)
    assert m["exact_match"] == 0.0 and m["unparseable"] == 1
    # bare gold lists (the fork's output_column) give the same F1 numbers
    assert pan.par4pc_metrics(preds, [["A", "G"], ["B"]])["macro_f1"] == pytest.approx(25.0)


def test_pi4pc_metrics_by_hand():
    refs = pan.load_items(str(FIX), "pi4pc")  # gold [8] silver [36]; gold [36]
    preds = ['{"answer": 36}', '{"answer": 36}', "none"][:2]
    # item1: 36 is silver -> silver hit; item2: 36 is gold -> gold hit
    # gold_hit_rate = 1/2 = 50; accuracy = 2/2 = 100; custom = (2*1 + 1)/(2*2) = 75
    m = pan.pi4pc_metrics(preds, refs)
    assert (m["gold_hit_rate"], m["accuracy"], m["custom_score"], m["valid_count"]) == (50.0, 100.0, 75.0, 2)


def test_noc4pc_metrics_by_hand():
    refs = pan.load_items(str(FIX), "noc4pc")  # gold 102, 103, ALLOW
    preds = ['{"code": "102"}', '{"code": "102"}', "garbage"]
    # all items: 102: TP1 FP1 FN0 -> P=.5 R=1 F1=2/3; 103: TP0 FN1 -> 0; ALLOW: FN1 (unparseable) -> 0
    # macro = (2/3)/3 = 22.22; accuracy = 1/3
    # valid only (fork): items 1,2: 102 F1 = 2/3, 103 F1 0, ALLOW no support -> 0 -> macro 22.22; acc 50
    m = pan.noc4pc_metrics(preds, refs)
    assert m["macro_f1"] == pytest.approx(200 / 9)
    assert m["accuracy"] == pytest.approx(100 / 3)
    assert m["macro_f1_valid_only"] == pytest.approx(200 / 9)
    assert m["accuracy_valid_only"] == pytest.approx(50.0)
    assert (m["valid_count"], m["total_count"]) == (2, 3)
