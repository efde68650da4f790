"""Shared extraction and text metrics, checked against hand computations."""

import math

import pytest

from ftagent.benchmarks.domain import KEY_SPECS, core_value
from ftagent.benchmarks.domain import common as c


def test_parse_json_object_variants():
    assert c.parse_json_object('```json\n{"a": 1}\n```') == {"a": 1}
    assert c.parse_json_object('Answer: {"a": {"b": "}"}} thanks') == {"a": {"b": "}"}}
    assert c.parse_json_object('{"a": 1,}') is None
    assert c.parse_json_object("no json") is None
    assert c.strip_think("<think>x</think> y") == "y" and c.strip_think("<think>never closed") == ""


def test_rouge_l_by_hand():
    # pred "the cat sat on mat" (5), ref "the cat is on the mat" (6); LCS = the cat on mat = 4
    # P = 4/5, R = 4/6 -> F1 = 2*0.8*0.6667/(1.4667) = 0.72727
    assert c.rouge_l("The cat sat on mat", "the cat is on the mat") == pytest.approx(8 / 11)
    assert c.rouge_l("", "x") == 0.0


def test_sentence_bleu_by_hand():
    hyp = "the cat sat on the mat".split()
    assert c.sentence_bleu(hyp, hyp) == pytest.approx(1.0)
    ref = "the cat is on the mat".split()
    # 1-grams: the,cat,sat,on,the,mat vs ref counts -> matches 5/6
    # 2-grams: the cat, cat sat, sat on, on the, the mat -> matches the cat, on the, the mat = 3/5
    # 3-grams: 4 total, matches "on the mat" = 1/4; 4-grams: 3 total, 0 matches -> method1 0.1/3
    # BP = 1 (equal length). BLEU-4 = exp(mean(log(5/6), log(3/5), log(1/4), log(0.1/3)))
    want = math.exp((math.log(5 / 6) + math.log(3 / 5) + math.log(1 / 4) + math.log(0.1 / 3)) / 4)
    assert c.sentence_bleu(hyp, ref) == pytest.approx(want)
    # BLEU-2 = sqrt(5/6 * 3/5) ; shorter hypothesis gets BP exp(1 - 6/3)
    assert c.sentence_bleu(hyp, ref, weights=(0.5, 0.5)) == pytest.approx(math.sqrt(0.5))
    short = "the cat on".split()
    assert c.sentence_bleu(short, ref, weights=(1.0,)) == pytest.approx(math.exp(1 - 2))
    assert c.sentence_bleu(["dog"], ref) == 0.0


def test_macro_f1_none_is_wrong():
    # labels a,b; gold a,b; pred a,None: a: TP1 -> 1.0; b: FN1 -> 0 -> 0.5
    assert c.macro_f1(["a", "b"], ["a", None], ["a", "b"]) == pytest.approx(0.5)


def test_key_specs_cover_the_21_keys():
    assert len(KEY_SPECS) == 21
    assert KEY_SPECS["panorama_par4pc_cot"]["max_out_len"] == 16384
    assert KEY_SPECS["tablebench_visualization"]["core_metric"] == "Pass@1"
    assert KEY_SPECS["bioprobench_ord"]["core_metric"] == "kendall_tau"
    assert KEY_SPECS["chemcotbench_mol_opt"]["training_dataset"] == "chemcot"
    assert all(s["direction"] == "max" for s in KEY_SPECS.values())
    # mean of present sub-task cores; an unavailable (None) core is skipped, never counted as 0
    res = {"par4pc": {"macro_f1": 40.0}, "pi4pc": {"gold_hit_rate": 20.0}, "noc4pc": {"macro_f1": None}}
    assert core_value("panorama", res) == pytest.approx(30.0)
    assert core_value("chemcotbench_mol_opt", {"drd": {"success_rate": None}}) is None
