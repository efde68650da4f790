"""ChemCoTBench defects found against the real items and the official scorer (issue #21).

Each test fails on the code before its fix. Queries are verbatim from the published benchmark rows
(``bench/<task>/<subtask>.json``, a public copy of ``OpenMol/ChemCoTBench``).
"""

import json

import pytest

from ftagent.benchmarks.domain import chem
from ftagent.benchmarks.domain import chemcot as cc

pytestmark = pytest.mark.skipif(not chem.available(), reason="RDKit not installed")

LOGP_QUERY = (
    "You are a chemical assistent, Optimize the Source Molecule to improve the LogP value while following a "
    "structured intermediate optimization process. LogP is a measure of a molecule's lipophilicity, which is its "
    "tendency to dissolve in a lipid (fatty) environment compared to water. \nYour response must be directly "
    'parsable JSON format:\n{\n    "Final Target Molecule": "SMILES",\n}\n\n'
    "Source Molecule: NC(=O)c1cccc(O)c1.")
RCR_QUERY = (
    "Given the following reaction under the type of Acylation:\nCNc1cccnc1.O=C(O)c1cc(Cl)sc1Cl>>"
    "CN(C(=O)c1cc(Cl)sc1Cl)c1cccnc1,\ngive me the most recommended catalyst(s) for this reaction. Return the "
    'SMILES of the catalyst following the JSON format:\n{\n    "SMILES": str\n}\n')


def _row(query, task, subtask, gt="", meta=None):
    return cc.normalise_item({"id": "x", "query": query, "gt": gt, "task": task, "subtask": subtask,
                              "meta": json.dumps(meta or {})})


def test_mol_opt_source_drops_the_sentence_period():
    item = _row(LOGP_QUERY, "mol_opt", "logp")
    assert item["source_smiles"] == "NC(=O)c1cccc(O)c1"
    # methylating the phenol raises (penalised) logP: a success, not an unparseable source
    m = cc.mol_opt_metrics("logp", ['{"Final Target Molecule": "COc1cccc(C(N)=O)c1"}'], [item])
    assert m["success_rate"] == 100.0 and m["valid_smiles_rate"] == 100.0


def test_rcr_and_nepp_read_the_keys_their_queries_ask_for():
    item = _row(RCR_QUERY, "reaction", "rcr", gt="CN(C)C=O")
    assert cc.metrics("rcr", ['{\n    "SMILES": "CN(C)C=O"\n}'], [item])["exact_match"] == 100.0
    # a multi-component condition in another order is the same answer
    assert cc.reaction_metrics("rcr", ['{"SMILES": "ClCCl.CCOC(C)=O"}'], ["CCOC(C)=O.ClCCl"])["exact_match"] == 100.0
    # written as a reaction (reactants>conditions>product), the condition part is read, as the official RCR scorer
    assert cc.reaction_metrics("rcr", ['{"SMILES": "CCO>CN(C)C=O>CCOC"}'], ["CN(C)C=O"])["exact_match"] == 100.0
    gt = "C[O-].CC1(CNC(=O)c2cc(-c3ccccc3C(=O)O)ccc2Cl)CCCCCC1"
    assert cc.reaction_metrics("nepp", [json.dumps({"pred_smi": gt})], [gt])["exact_match"] == 100.0


def test_reaction_exact_match_ignores_stereo_as_the_official_evaluator():
    # MoleculeSMILESEvaluator canonicalises with isomericSmiles=False before comparing InChIs
    m = cc.reaction_metrics("fs", ['{"Major Product": "C[C@H](N)C(=O)O"}'], ["CC(N)C(=O)O"])
    assert m["exact_match"] == 100.0


def test_answer_tags_of_the_official_logs_are_read():
    text = "<|think_start|>Okay, the amide forms.<|think_end|><|answer_start|>CC(=O)NC<|answer_end|>"
    assert cc.extract_answer(text, "fs") == "CC(=O)NC"
    assert cc.extract_answer("<|answer_start|>G<|answer_end|>", "mechsel") == "G"


def test_functional_groups_use_the_benchmark_smarts():
    # the official hydroxyl pattern [OX2H] counts the OH of a carboxylic acid; amide needs a C on the carbonyl
    assert chem.group_count("CC(=O)O", "hydroxyl") == 1
    assert chem.group_count("NC=O", "amide") == 0
    assert chem.group_count("CSSC", "sulfide") == 1     # 2 divalent S minus 1 disulfide pair
    # adding a hydroxyl to methyl acetate by hydrolysis (CC(=O)OC -> CC(=O)O) is +1 OH for the benchmark
    assert chem.edit_correct("add", "CC(=O)OC", "CC(=O)O", "hydroxyl")


def test_murcko_soft_score_is_reported():
    m = cc.mol_und_metrics("Murcko_scaffold", ['{"Output Scaffold": "c1ccc(-c2ccccc2)cc1"}'],
                           ["c1ccc(-c2ccccc2)cc1"])
    assert m["scaffold_soft"] == 100.0 and m["scaffold_hard"] == 100.0


def test_logp_oracle_is_penalised_logp():
    from rdkit.Chem import Crippen

    smi = "NC(=O)c1cccc(O)c1"
    assert chem.property_oracle("logp")(smi) == pytest.approx(chem.penalized_logp(smi))
    assert chem.penalized_logp(smi) != pytest.approx(Crippen.MolLogP(chem.mol(smi)))


# published by the official molopt_eval_demo.ipynb for claude3.7 (success, best, winsorised mean
# improvement, valid, scaffold hard, scaffold soft; rates as fractions)
PUBLISHED = {"logp": (0.80, 0.32, 0.4069006780846787, 0.99, 0.72, 0.9038459342980477),
             "solubility": (0.75, 0.32, 0.3705101410563746, 0.92, 0.79, 0.8783154572632265),
             "qed": (0.73, 0.14, 0.11797018528900438, 0.94, 0.66, 0.818949146508879)}


@pytest.mark.parametrize("subtask", sorted(PUBLISHED))
def test_mol_opt_reproduces_the_published_official_numbers(subtask):
    from pathlib import Path

    # outside the chemcotbench fixture root: load_items reads every .json under it
    fixture = Path(__file__).parents[1] / "fixtures" / "benchmarks" / "chemcotbench_official"
    logs = json.loads((fixture / "claude3.7_molopt.json").read_text(encoding="utf-8"))["logs"][subtask]
    items = [_row(LOGP_QUERY.rsplit("Source Molecule: ", 1)[0] + f"Source Molecule: {src}.", "mol_opt", subtask)
             for src, _ in logs]
    m = cc.mol_opt_metrics(subtask, [out for _, out in logs], items)
    success, best, mean_gain, valid, hard, soft = PUBLISHED[subtask]
    assert (m["success_rate"], m["best_rate"], m["valid_smiles_rate"], m["scaffold_hard"]) == pytest.approx(
        (100 * success, 100 * best, 100 * valid, 100 * hard))
    assert m["scaffold_soft"] == pytest.approx(100 * soft, abs=1e-6)
    assert m["mean_improvement"] == pytest.approx(mean_gain, abs=1e-4)   # ESOL/RDKit version: 4e-6 on solubility


def test_retro_gold_joined_without_dots_scores_the_dotted_answer():
    # a real retro row: the two reactants are written back to back in `gt`; it stays as published
    gt = "COc1cc2ncc3c(N)nc(-c4cncc(OC[C@@H]5CN5)c4)cc3c2cc1OCO=P(Cl)(c1ccccc1)c1ccccc1"
    item = _row("Given the product SMILES ... {\"Reactants\": ...}", "reaction", "retro", gt=gt)
    assert item["answer"] == gt
    answer = '{"Reactants": "O=P(Cl)(c1ccccc1)c1ccccc1.COc1cc2ncc3c(N)nc(-c4cncc(OC[C@@H]5CN5)c4)cc3c2cc1OC"}'
    assert cc.metrics("retro", [answer], [item])["exact_match"] == 100.0
    assert chem.same_reactants("O=C1CCC1.CCc1nc(OCCO)c2cc(N)cc(F)c2n1.C[Si](C)(C)C#N",
                               "CCc1nc(OCCO)c2cc(N)cc(F)c2n1C[Si](C)(C)C#NO=C1CCC1")
    # ambiguous (the F belongs to either piece): each reading is a cut, the molecules decide
    glued = "OC(c1ccccc1)(c1ccccc1)C12CCN(CC1)CC2Fc1cccc(OCCCBr)c1"
    assert chem.same_reactants("OC(c1ccccc1)(c1ccccc1)C12CCN(CC1)CC2.Fc1cccc(OCCCBr)c1", glued)
    assert not chem.same_reactants("OC(c1ccccc1)(c1ccccc1)C12CCN(CC1)CC2", glued)  # one reactant missing
    assert not chem.same_reactants("CCO.CC(=O)Cl", glued)
    assert chem.same_reactants("CCO", "OCC") and not chem.same_reactants("CCO", "CCN")


# real ChemCoTBench retro rows (IDEA-XL/ChemCoTBench@ac04f91 baseline_and_eval/logs/retro/ether0.json,
# CC BY 4.0): their reactant lists, whose glued forms are the published `gt` of half the rows. The
# glued form of each is itself a valid SMILES: the gold is then that one molecule (issue 43), as a
# one-molecule gold is, whose valid cuts (`C.N…`) scored 100 before (47 of 47 on the real file).
VALID_WHEN_GLUED = [["COc1nnccc1CO", "CS(=O)(=O)Cl"], ["Nc1cc(F)cc([N+](=O)[O-])c1", "CC(C)(C)S(=O)Cl"]]


@pytest.mark.parametrize("reactants", VALID_WHEN_GLUED)
def test_retro_gold_that_is_one_valid_molecule_is_never_cut(reactants):
    glued = "".join(reactants)
    assert chem.mol(glued) is not None
    item = _row("... {\"Reactants\": ...}", "reaction", "retro", gt=glued)
    cut = json.dumps({"Reactants": ".".join(reversed(reactants))})
    assert cc.metrics("retro", [cut], [item])["exact_match"] == 0.0  # d350dfe: 100
    assert cc.metrics("retro", [json.dumps({"Reactants": glued})], [item])["exact_match"] == 100.0


def test_retro_one_molecule_gold_cut_into_valid_pieces_scores_zero():
    # a one-molecule gold and an answer that cuts it into valid molecules (d350dfe scored it right)
    gold = "CCN(CC)C(=O)c1ccccc1"
    assert not chem.same_reactants("C.CN(CC)C(=O)c1ccccc1", gold)
    assert not chem.same_reactants("CCN(CC)C(=O)c1ccccc1.C", "CCN(CC)C(=O)c1ccccc1C")  # glued valid: one molecule
    assert chem.same_reactants("CCN(CC)C(=O)c1ccccc1", gold)
    # a gold piece that is not one valid molecule is still read as its cuts
    assert chem.same_reactants("CCO.O=C=O", "CCOO=C=O") and chem.mol("CCOO=C=O") is None


def test_retro_gold_does_not_depend_on_rdkit_where_the_benchmark_is_prepared(monkeypatch):
    gt = "COc1cc2ncc3c(N)nc(-c4cncc(OC[C@@H]5CN5)c4)cc3c2cc1OCO=P(Cl)(c1ccccc1)c1ccccc1"
    with_rdkit = _row("q", "reaction", "retro", gt=gt)["answer"]
    monkeypatch.setattr(chem, "_rdkit", lambda: None)  # an ftagent install without the rdkit extra
    assert _row("q", "reaction", "retro", gt=gt)["answer"] == with_rdkit == gt
