"""ChemCoTDataset training targets: struct_cot is decoded, not emitted as escaped JSON (issue #21)."""

import json

from ftagent.datasets import chemcot


def _write(tmp_path, records):
    folder = tmp_path / "chemcotbench-cot" / "mol_und"
    folder.mkdir(parents=True)
    (folder / "fg_count.json").write_text(json.dumps(records), encoding="utf-8")


def test_struct_cot_is_decoded_once_twice_and_fenced(tmp_path):
    cot = {"step1": "Find the hydroxyl groups: C-O-H at both ends.", "count": "2"}
    once = json.dumps(cot)
    twice_fenced = json.dumps("```json\n" + json.dumps(once) + "\n```")
    _write(tmp_path, [{"query": f"q{i} {{\"count\": n}}", "struct_cot": s, "meta": "{}"}
                      for i, s in enumerate([once, twice_fenced])])
    outputs = [r["output"] for r in chemcot.to_alpaca(tmp_path)]
    assert len(outputs) == 2
    for out in outputs:
        assert '\\"' not in out and "```" not in out
        assert json.loads(out) == cot


def test_plain_text_cot_is_kept(tmp_path):
    _write(tmp_path, [{"query": 'How many? {"count": n}', "struct_cot": "Two OH groups.", "meta": '{"gt": 2}'}])
    (row,) = chemcot.to_alpaca(tmp_path)
    assert row["output"].startswith("Two OH groups.") and '{"count": 2}' in row["output"]


def test_rcr_target_uses_the_key_its_query_asks_for(tmp_path):
    # the real rcr query asks for {"SMILES": str}; the scorer now reads exactly that key
    query = ("Given the following reaction under the type of Acylation:\nCNc1cccnc1.O=C(O)c1cc(Cl)sc1Cl>>"
             "CN(C(=O)c1cc(Cl)sc1Cl)c1cccnc1,\ngive me the most recommended catalyst(s) for this reaction. Return "
             'the SMILES of the catalyst following the JSON format:\n{\n    "SMILES": str\n}\n')
    rec = chemcot.normalize_rcr_record({"query": query, "gt": "CN(C)C=O", "meta": "{}",
                                        "cot_result": '```json\n{"step1": "amide coupling in DMF"}\n```'})
    folder = tmp_path / "chemcotbench-cot" / "rxn"
    folder.mkdir(parents=True)
    (folder / "rcr.json").write_text(json.dumps([rec]), encoding="utf-8")
    (row,) = chemcot.to_alpaca(tmp_path)
    assert row["output"].endswith('```json\n{"SMILES": "CN(C)C=O"}\n```')
    from ftagent.benchmarks.domain import chemcot as cc

    assert cc.extract_answer(row["output"], "rcr") == "CN(C)C=O"
