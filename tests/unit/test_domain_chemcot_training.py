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
