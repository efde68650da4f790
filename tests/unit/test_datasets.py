"""Registry entries, post-download hooks and default converters, on the published-layout fixtures."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from ftagent.core.errors import UserInputError
from ftagent.datasets.base import DatasetSource, converter_source
from ftagent.datasets.registry import (
    dataset_names,
    datasets_for_benchmark,
    get_source,
    resolve_dataset_choice,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "datasets"


def copy_fixture(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copytree(FIXTURES / name, dst)
    return dst


def test_registry_lists_all_and_suggests_on_typo():
    assert {"deepscaler", "chemcot", "panorama", "financeiq", "tableinstruct", "bioprobench",
            "demo_add"} <= set(dataset_names())
    for name in dataset_names():
        src = get_source(name)
        assert isinstance(src, DatasetSource)
        assert src.readme().startswith(f"# {name}")
    with pytest.raises(UserInputError, match="Did you mean 'chemcot'"):
        get_source("chemcott")


@pytest.mark.parametrize("key,expected", [
    ("aime25", ["deepscaler"]), ("chemcotbench_mol_und", ["chemcot"]), ("panorama_pi4pc_cot", ["panorama"]),
    ("FinanceIQ_gen", ["financeiq"]), ("tablebench_gen", ["tableinstruct"]), ("bioprobench_ord", ["bioprobench"]),
    ("demo_add", ["demo_add"]), ("mmlu", []),
])
def test_datasets_for_benchmark(key, expected):
    from ftagent.benchmarks import get_benchmark

    assert datasets_for_benchmark(key, list(get_benchmark(key).spec.related_datasets)) == expected


def test_resolve_dataset_choice():
    assert resolve_dataset_choice("all", None, []) == dataset_names()
    assert resolve_dataset_choice(None, "aime24", []) == ["deepscaler"]
    assert resolve_dataset_choice("panorama", "aime24", []) == ["panorama"]


def test_chemcot_hook_fixes_rcr_schema(tmp_path):
    root = copy_fixture("chemcot", tmp_path)
    src = get_source("chemcot")
    src.post_download(root)
    src.post_download(root)  # idempotent
    rows = json.loads((root / "chemcotbench-cot/rxn/rcr.json").read_text())
    assert all("gt" not in r and "cot_result" not in r for r in rows)
    assert json.loads(rows[0]["meta"]) == {"reactants": ["C=CC"], "gt": "Pd/C"}
    assert rows[0]["struct_cot"] == '{"step1": "identify alkene", "answer": "Pd/C"}'
    assert rows[1]["struct_cot"] == '{"step1": "SN2 likes polar aprotic"}'
    out = src.to_alpaca(root, None, 0)
    assert len(out) == 7
    rcr = [r for r in out if r["instruction"].startswith("Suggest a solvent")][0]
    assert "```" not in rcr["output"].split("\n\n")[0] and '"DMSO"' in rcr["output"]


def test_chemcot_answer_uses_the_key_the_query_names(tmp_path):
    """The training answer is JSON under the key the question asks for (the benchmark reads that key)."""
    root = copy_fixture("chemcot", tmp_path)
    src = get_source("chemcot")
    src.post_download(root)
    out = {r["instruction"]: r["output"] for r in src.to_alpaca(root, None, 0)}
    fg = out["How many hydroxyl groups are in CCO? Answer in JSON with key count."]
    assert fg.endswith('```json\n{"count": 1}\n```')  # "Step 1" in the CoT does not hide the answer
    assert out["Input Molecule: CCO. Add a methyl group."].endswith('{"answer": "CC(C)O"}\n```')
    rcr = out["Suggest a catalyst for hydrogenating C=CC."]
    assert rcr.count("Pd/C") == 1  # the CoT's own JSON already answers: nothing appended


def test_panorama_hook_removes_eval_splits_and_converts(tmp_path):
    root = copy_fixture("panorama", tmp_path)
    src = get_source("panorama")
    src.post_download(root)
    left = sorted(str(p.relative_to(root)) for p in root.rglob("*.parquet"))
    assert left == ["NOC4PC/train.parquet", "PAR4PC/train.parquet", "PI4PC/train.parquet"]
    rows = src.to_alpaca(root, None, 0)
    assert len(rows) == 6
    outs = [json.loads(r["output"]) for r in rows]
    assert {"answer": ["A", "G"]} in outs and {"answer": 8} in outs
    assert any(o.get("code") == "102" and o["reason"].startswith("Regarding Claim 1") for o in outs)
    assert all("16000001" not in r["instruction"] and "15000001" not in r["instruction"] for r in rows)


def _csv_rows(path: Path) -> list[list[str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.reader(fh))[1:]


def test_financeiq_split_is_deterministic_and_disjoint_from_benchmark(tmp_path):
    from ftagent.benchmarks.splits import split_indices
    from ftagent.datasets.financeiq import training_rows

    # the rows in neither of the benchmark's splits (seed-42 shuffle, min(100, n//2) each side)
    assert [len(training_rows(n)) for n in (1, 3, 7, 200, 1211)] == [0, 1, 1, 0, 1011]
    original = _csv_rows(FIXTURES / "financeiq/data/test/经济师.csv")
    used = {i for idx in split_indices(len(original)).values() for i in idx}
    runs = []
    for i in range(2):
        root = copy_fixture("financeiq", tmp_path / str(i))
        get_source("financeiq").post_download(root)
        assert not (root / "data/dev").exists() and not (root / "data/test").exists()
        runs.append((root / "data/train/经济师.csv").read_bytes())
        train = _csv_rows(root / "data/train/经济师.csv")
        assert train == [original[i] for i in training_rows(len(original))] and len(train) == 1
        held_out = [original[i] for i in sorted(used)]  # what the benchmark evaluates (validation + test)
        assert not {tuple(r) for r in train} & {tuple(r) for r in held_out}
        assert len(_csv_rows(root / "data/train/注册会计师（CPA）.csv")) == 1
    assert runs[0] == runs[1]
    rows = get_source("financeiq").to_alpaca(root, None, 0)
    assert len(rows) == 2
    assert all(r["output"] in {"答案是: A", "答案是: B", "答案是: C", "答案是: D"} for r in rows)
    assert any(r["instruction"].startswith("以下是关于注册会计师（CPA）的单项选择题") for r in rows)


def test_bioprobench_hook_removes_test_files(tmp_path):
    root = copy_fixture("bioprobench", tmp_path)
    src = get_source("bioprobench")
    src.post_download(root)
    assert sorted(p.name for p in root.glob("*.json")) == ["ERR.json", "GEN.json", "ORD.json", "PQA.json"]
    rows = src.to_alpaca(root, None, 0)
    assert len(rows) == 5
    outs = {r["output"] for r in rows}
    assert "[ANSWER_START][1, 2, 0][ANSWER_END]" in outs
    assert "[ANSWER_START]False[ANSWER_END]" in outs and "[ANSWER_START]True[ANSWER_END]" in outs
    assert "[ANSWER_START]1,400 & 90%[ANSWER_END]" in outs
    assert "[ANSWER_START]1. Pellet cells.\n2. Resuspend.\n3. Lyse.[ANSWER_END]" in outs
    assert not any("TEST-" in r["instruction"] for r in rows)


def test_deepscaler_and_tableinstruct_converters(tmp_path):
    rows = get_source("deepscaler").to_alpaca(FIXTURES / "deepscaler", None, 0)
    assert len(rows) == 4  # the row without an answer is dropped
    assert all("\\boxed{" in r["output"] for r in rows)
    by_problem = {r["instruction"].split("\n")[0]: r["output"] for r in rows}
    assert by_problem["Find the remainder when $2^{10}$ is divided by 7."] == "The final answer is $\\boxed{2}$."
    assert by_problem["Compute $3! + 4!$."].endswith("$\\boxed{30}$.")
    assert get_source("deepscaler").to_alpaca(FIXTURES / "deepscaler", 2, 5) == rows_first(5, 2)
    table = get_source("tableinstruct").to_alpaca(FIXTURES / "tableinstruct", None, 0)
    assert len(table) == 3 and all("Final Answer" in r["output"] for r in table)


def rows_first(seed, n):
    return get_source("deepscaler").to_alpaca(FIXTURES / "deepscaler", None, seed)[:n]


@pytest.mark.parametrize("name", ["deepscaler", "chemcot", "panorama", "financeiq", "tableinstruct",
                                  "bioprobench", "demo_add"])
def test_converter_source_runs_as_plain_code(name, tmp_path):
    """The converter's source, executed alone (as in a generated process_data.py), gives the same rows."""
    src = get_source(name)
    if name == "demo_add":
        root = tmp_path / "demo_add"
        src.generate(root)
    else:
        root = copy_fixture(name, tmp_path)
        src.post_download(root)
    code = converter_source(src)
    namespace: dict = {}
    exec(compile(code, "process_data.py", "exec"), namespace)  # noqa: S102 - the point of the test
    assert namespace["to_alpaca"](str(root), 3, 7) == src.to_alpaca(root, 3, 7)
    assert "ftagent" not in code
