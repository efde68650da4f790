"""The 21 domain benchmark adapters and the DomainEvaluator scoring logic (no tool env).

The evaluator module imports OpenCompass; the project venv has none, so :func:`oc_domain` loads it
against a minimal stand-in for the two OpenCompass names it uses (``BaseEvaluator`` and the
``ICL_EVALUATORS`` registry). The real OpenCompass run is in tests/integration/test_domain_eval.py.
"""

from __future__ import annotations

import importlib
import json
import shutil
import sys
import types
from pathlib import Path

import pytest

from ftagent.benchmarks import benchmark_keys, describe, get_benchmark
from ftagent.benchmarks.adapter import Benchmark
from ftagent.benchmarks.base import BenchmarkAdapter, read_jsonl
from ftagent.benchmarks.domain import KEY_SPECS, MEAN_CORE, family_module
from ftagent.benchmarks.domain_adapters import build_prompt, family_of, raw_dir
from ftagent.core.errors import EnvironmentFailure
from ftagent.tools.opencompass.render import ModelSpec, render_config

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "benchmarks"


def _prepared(tmp_path: Path, key: str) -> tuple[Benchmark, Path]:
    root = tmp_path / "benchmarks"
    shutil.copytree(FIXTURES / KEY_SPECS[key]["family"], raw_dir(root, key))
    adapter = get_benchmark(key)
    adapter.prepare(root)
    return adapter, root


@pytest.fixture()
def oc_domain(monkeypatch):
    """``ftagent.tools.opencompass.oc_domain`` imported against a minimal OpenCompass stand-in."""
    registered: dict[str, type] = {}

    class BaseEvaluator:
        def __init__(self, pred_postprocessor=None) -> None:
            self.pred_postprocessor = pred_postprocessor

    class Registry:
        def register_module(self, name=None):
            def deco(cls):
                registered[name or cls.__name__] = cls
                return cls
            return deco

    icl = types.ModuleType("opencompass.openicl.icl_evaluator")
    icl.BaseEvaluator = BaseEvaluator
    reg = types.ModuleType("opencompass.registry")
    reg.ICL_EVALUATORS = Registry()
    for name, mod in {"opencompass": types.ModuleType("opencompass"),
                      "opencompass.openicl": types.ModuleType("opencompass.openicl"),
                      "opencompass.openicl.icl_evaluator": icl, "opencompass.registry": reg}.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.delitem(sys.modules, "ftagent.tools.opencompass.oc_domain", raising=False)
    module = importlib.import_module("ftagent.tools.opencompass.oc_domain")
    assert registered["DomainEvaluator"] is module.DomainEvaluator
    yield module
    sys.modules.pop("ftagent.tools.opencompass.oc_domain", None)


class Rows:
    """The part of a HF Dataset the evaluator reads (``column_names`` and column access)."""

    def __init__(self, rows: list[dict]) -> None:
        self.rows = rows
        self.column_names = list(rows[0])

    def __getitem__(self, column: str) -> list:
        return [r[column] for r in self.rows]


def _evaluator(oc_domain, adapter: Benchmark, root: Path, subset: str, split: str = "validation"):
    path = adapter.bench_dir(root) / split / f"{subset}.jsonl"
    return oc_domain.DomainEvaluator(**adapter.evaluator_kwargs_for(subset, path)), read_jsonl(path)


# ---------------------------------------------------------------- registry and specs

def test_all_21_keys_registered_with_training_dataset_and_core_metric():
    assert len(KEY_SPECS) == 21 and set(KEY_SPECS) <= set(benchmark_keys())
    for key, info in KEY_SPECS.items():
        adapter = get_benchmark(key)
        assert isinstance(adapter, BenchmarkAdapter) and adapter.spec.key == key
        assert adapter.spec.related_datasets == [info["training_dataset"]]
        assert adapter.spec.core_metric == info["core_metric"] and adapter.spec.direction == "max"
        assert adapter.spec.subsets == list(info["subtasks"])
    text = describe("panorama")
    assert "par4pc: macro_f1" in text and "mean of these" in text and "LG-AI-Research/PANORAMA" in text


# ---------------------------------------------------------------- data

@pytest.mark.parametrize("key", ["panorama_par4pc_cot", "panorama", "chemcotbench", "tablebench_gen",
                                 "bioprobench_ord", "bioprobench_gen"])
def test_prepare_from_raw_files_builds_prompt_gold_and_full_item(tmp_path, key):
    adapter, root = _prepared(tmp_path, key)
    rows = adapter.load_items(root, "validation")
    assert rows and {r["subset"] for r in rows} <= set(KEY_SPECS[key]["subtasks"])
    family = family_of(adapter)
    mod = family_module(family)
    for row in rows:
        assert set(row) == {"prompt", "answer", "item_json", "subset"}
        item = json.loads(row["item_json"])
        assert row["prompt"] == build_prompt(adapter, row["subset"], item) and row["prompt"]
        assert isinstance(row["answer"], str)
        if family == "panorama":
            assert "silver_answers" in item or row["subset"] == "noc4pc"
        if family == "bioprobench":
            assert mod.reference(row["subset"], item) is not None


def test_panorama_cot_prompt_differs_from_zero_shot(tmp_path):
    plain, root = _prepared(tmp_path / "a", "panorama_par4pc")
    cot, root_cot = _prepared(tmp_path / "b", "panorama_par4pc_cot")
    p = plain.load_items(root, "validation")[0]["prompt"]
    c = cot.load_items(root_cot, "validation")[0]["prompt"]
    assert p != c


def test_offline_without_files_is_one_clear_environment_failure(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(EnvironmentFailure) as err:
        get_benchmark("bioprobench_pqa").prepare(tmp_path)
    msg = str(err.value)
    assert str(tmp_path / "bioprobench_pqa" / "raw") in msg and "PQA" in msg and "bowenxian/BioProBench" in msg


def test_raw_folder_without_the_subtask_files_says_what_is_expected(tmp_path):
    raw = raw_dir(tmp_path, "tablebench_fact_checking")
    raw.mkdir(parents=True)
    (raw / "other.json").write_text("[]", encoding="utf-8")
    with pytest.raises(FileNotFoundError, match="TableBench_TCoT.jsonl"):
        get_benchmark("tablebench_fact_checking").prepare(tmp_path)


def test_dataset_blocks_pass_evaluator_kwargs_and_render(tmp_path):
    adapter, root = _prepared(tmp_path, "tablebench_gen")
    blocks = adapter.dataset_blocks(root, "validation")
    by_abbr = {b.abbr: b for b in blocks}
    assert set(by_abbr) == {f"tablebench_gen-{s}" for s in KEY_SPECS["tablebench_gen"]["subtasks"]}
    vis = by_abbr["tablebench_gen-visualization"]
    assert vis.max_out_len == 16384 and by_abbr["tablebench_gen-fact_checking"].max_out_len == 4096
    assert vis.rounds == [{"role": "HUMAN", "prompt": "{prompt}"}] and vis.input_columns == ["prompt"]
    assert vis.evaluator_kwargs == {"family": "tablebench", "subtask": "visualization", "core_metric": "Pass@1",
                                    "headline": MEAN_CORE, "items_path": vis.path}
    single, root1 = _prepared(tmp_path / "one", "bioprobench_err")
    (block,) = single.dataset_blocks(root1, "validation")
    assert block.abbr == "bioprobench_err" and block.evaluator_kwargs["headline"] is None
    source = render_config(blocks, ModelSpec(abbr="m", path="/m", tokenizer_path="/m"),
                           benchmark="tablebench_gen", split="validation")
    assert "from ftagent.tools.opencompass.oc_domain import DomainEvaluator" in source
    assert "core_metric='Pass@1'" in source
    # the domain datasets post-process nothing themselves; only the model's stock step strips reasoning
    assert source.count("pred_postprocessor") == 1
    assert "pred_postprocessor=dict(type='extract-non-reasoning-content')" in source


# ---------------------------------------------------------------- evaluator

def test_evaluator_scores_full_items_with_details(tmp_path, oc_domain):
    adapter, root = _prepared(tmp_path, "panorama")
    ev, rows = _evaluator(oc_domain, adapter, root, "noc4pc")
    gold = json.loads(rows[0]["item_json"])["answer"]["code"]
    out = ev.score([f'```json\n{{"code": "{gold}"}}\n```'], [r["answer"] for r in rows], Rows(rows))
    assert out["accuracy"] == 100.0 and out["mean_core"] == out["macro_f1"] and out["num_items"] == 1.0
    assert out["details"] == [{"pred": f'```json\n{{"code": "{gold}"}}\n```', "answer": gold,
                               "core_metric": "macro_f1", "score": out["macro_f1"],
                               "correct": out["macro_f1"] >= 100.0}]
    wrong = ev.score(["no idea"], [r["answer"] for r in rows], Rows(rows))
    assert wrong["accuracy"] == 0.0 and wrong["details"][0]["correct"] is False


def test_evaluator_reloads_items_from_path_without_test_set(tmp_path, oc_domain):
    adapter, root = _prepared(tmp_path, "tablebench_fact_checking")
    ev, rows = _evaluator(oc_domain, adapter, root, "fact_checking")
    out = ev.score([f"Final Answer: {rows[0]['answer']}"], [rows[0]["answer"]])
    assert out["accuracy"] == 100.0 and out["details"][0]["correct"] is True
    assert "mean_core" not in out  # single-sub-task key: the core metric is the headline itself
    with pytest.raises(ValueError, match="1 items for 2 predictions"):
        ev.score(["a", "b"], ["x", "y"])


def test_evaluator_never_scores_an_unavailable_oracle_as_zero(tmp_path, oc_domain):
    adapter, root = _prepared(tmp_path, "chemcotbench_mol_opt")
    ev, rows = _evaluator(oc_domain, adapter, root, "drd")  # TDC oracle: needs downloaded model files
    out = ev.score(["```json\n{\"Final Target Molecule\": \"c1ccccc1O\"}\n```"], [rows[0]["answer"]], Rows(rows))
    assert "success_rate" not in out and "mean_core" not in out
    assert out["status"] in ("oracle unavailable", "unavailable") and out["reason"]
    assert "success_rate" in out["unavailable_metrics"]
    assert out["details"][0]["score"] is None and "correct" not in out["details"][0]
    assert all(isinstance(v, float) for k, v in out.items() if k not in ("status", "reason", "unavailable_metrics",
                                                                       "details"))


def test_numeric_metrics_drops_none_strings_and_bools(oc_domain):
    assert oc_domain.numeric_metrics({"a": 1, "b": None, "c": "x", "d": True, "e": 2.5}) == {"a": 1.0, "e": 2.5}
