"""ChemCoTBench: loader, JSON extraction, hand-checked RDKit metrics, unavailable oracles."""

from pathlib import Path

import pytest

from ftagent.benchmarks.domain import chem, evaluate_subtask
from ftagent.benchmarks.domain import chemcot as cc

FIX = str(Path(__file__).parents[1] / "fixtures" / "benchmarks" / "chemcotbench")
needs_rdkit = pytest.mark.skipif(not chem.available(), reason="RDKit not installed")


def test_loader_normalises_references():
    edit = cc.load_items(FIX, "mol_edit")
    assert edit[0]["answer"] == "Oc1ccccc1" and edit[0]["source_smiles"] == "c1ccccc1"
    assert (edit[1]["group_a"], edit[1]["group_b"]) == ("hydroxyl", "halo")
    assert cc.load_items(FIX, subtask="fs")[0]["answer"] == "CCOC(C)=O"   # fs gt JSON -> Major Product
    assert cc.build_prompt(edit[0]).endswith("Input Molecule: c1ccccc1")


def test_extraction():
    assert cc.extract_answer('```json\n{"count": 3}\n```', "fg_count") == "3"
    assert cc.extract_answer("There are 2 groups.", "fg_count") is None   # free text is not the asked JSON
    assert cc.extract_answer('<think>no</think>{"output": "Yes"}', "equivalence") == "Yes"
    assert cc.extract_answer('{"Final Target Molecule": "CCO"} bye', "qed") == "CCO"
    assert cc.extract_answer("I cannot answer.", "rcr") is None


def test_counting_and_yes_no_by_hand():
    # gold 2, 3: preds 2 (hit), unparseable (error |3| for mae) -> accuracy 50, mae (0 + 3)/2 = 1.5
    m = cc.mol_und_metrics("fg_count", ['{"count": 2}', "no idea"], ["2", "3"])
    assert (m["accuracy"], m["mae"], m["unparseable"]) == (50.0, 1.5, 1)
    m = cc.mol_und_metrics("equivalence", ['{"output": "yes"}', '{"output": "No"}'], ["Yes", "Yes"])
    assert m["accuracy"] == 50.0


@needs_rdkit
def test_scaffold_edit_reaction_by_hand():
    # c1ccccc1 written differently is the same scaffold; invalid SMILES scores 0
    m = cc.mol_und_metrics("Murcko_scaffold", ['{"Output Scaffold": "C1=CC=CC=C1"}', '{"output": "C1CC("}'],
                           ["c1ccccc1", "c1ccccc1"])
    assert m["scaffold_hard"] == 50.0 and m["tanimoto"] == pytest.approx(50.0) and m["valid_rate"] == 50.0
    items = cc.load_items(FIX, "mol_edit")
    # add OH to benzene: phenol correct (+1 hydroxyl); sub Cl->OH: chlorobenzene -> phenol correct
    m = evaluate_subtask("chemcotbench", "add", ['{"output": "Oc1ccccc1"}'], items[:1])
    assert m["correct_rate"] == 100.0 and m["tanimoto"] == 100.0
    m = cc.mol_edit_metrics("sub", ['{"output": "Oc1ccccc1"}', '{"output": "not_a_smiles((("}'], [items[1]] * 2)
    assert m["correct_rate"] == 50.0 and m["valid_rate"] == 50.0
    # delete asks for one fewer group: adding one is wrong
    assert not chem.edit_correct("delete", "OCCO", "OCC(O)CO", "hydroxyl")
    assert chem.edit_correct("delete", "OCCO", "CCO", "hydroxyl")
    fs = cc.load_items(FIX, subtask="fs")
    m = cc.reaction_metrics("fs", ['{"Major Product": "O=C(OCC)C"}', "garbage"], [fs[0]["answer"]] * 2)
    assert m["exact_match"] == 50.0 and m["validity"] == 50.0
    assert cc.reaction_metrics("mechsel", ['{"choice": "B) SN2"}'], ["B"])["accuracy"] == 100.0
    assert cc.reaction_metrics("rcr", ['{"SMILES": "CN(C)C=O"}'], ["CN(C)C=O"])["exact_match"] == 100.0


@needs_rdkit
def test_mol_opt_qed_and_unavailable_oracle():
    items = cc.load_items(FIX, "mol_opt")
    qed_item, drd_item = items[0], items[1]
    # decane has a low QED; ibuprofen-like aryl acid is higher -> success; decane itself -> no gain
    preds = ['{"output": "CC(C)Cc1ccc(C(C)C(=O)O)cc1"}', '{"output": "CCCCCCCCCC"}', "nonsense"]
    m = cc.mol_opt_metrics("qed", preds, [qed_item] * 3)
    assert chem.property_oracle("qed")(preds[0][12:-2]) > chem.property_oracle("qed")("CCCCCCCCCC")
    assert m["success_rate"] == pytest.approx(100 / 3)
    assert m["valid_smiles_rate"] == pytest.approx(200 / 3)
    m = cc.mol_opt_metrics("drd", ['{"output": "c1ccccc1O"}'], [drd_item])
    assert m["status"] == "oracle unavailable" and m["success_rate"] is None
    # an injected oracle is used: larger molecules score higher here
    m = cc.mol_opt_metrics("drd", ['{"output": "c1ccccc1NC"}'], [drd_item], oracle=lambda s: float(len(s)))
    assert m["success_rate"] == 100.0 and "status" not in m


def test_without_rdkit_metrics_say_unavailable(monkeypatch):
    monkeypatch.setattr(chem, "available", lambda: False)
    m = cc.mol_edit_metrics("add", ['{"output": "Oc1ccccc1"}'], cc.load_items(FIX, "mol_edit")[:1])
    assert m["status"] == "unavailable" and m["correct_rate"] is None
    m = cc.reaction_metrics("fs", ['{"output": "CCOC(C)=O"}'], ["CCOC(C)=O"])
    assert m["status"] == "degraded" and m["exact_match"] == 100.0
