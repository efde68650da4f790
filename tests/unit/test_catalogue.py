"""dataset_info.json: tasks, counts, token stats, samples, incremental updates, token counters."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ftagent.datasets import catalogue
from ftagent.datasets.tokens import ApproxCounter, load_token_counter

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "datasets"


def _root(tmp_path, *names):
    for name in names:
        shutil.copytree(FIXTURES / name, tmp_path / name)
    return tmp_path


def test_approx_counter():
    c = ApproxCounter()
    assert c.count("") == 0
    assert c.count("abcdefgh") == 2 and c.count("abcdefghi") == 3
    assert c.count("经济师") == 3 and c.count("经济师 abcd") == 3 + 2


def test_analysis_of_fixtures(tmp_path):
    root = _root(tmp_path, "chemcot", "deepscaler")
    cat = catalogue.build_catalogue(root)
    assert set(cat) == {"chemcot", "deepscaler"}
    chem = cat["chemcot"]
    assert set(chem.tasks) == {"mol_und", "mol_edit", "mol_opt", "rxn"}
    assert chem.tasks["rxn"].sample_count == 3 and chem.total_samples == 7
    deep = cat["deepscaler"].tasks["_root"]
    assert deep.files == ["deepscaler.json"] and deep.sample_count == 5
    sol = deep.column_stats["solution"]
    assert sol.empty_count == 3 and 0 < sol.min_tokens <= sol.p50_tokens <= sol.max_tokens
    assert len(deep.samples) == 3
    assert "deepscaler.json" in cat["deepscaler"].file_tree
    on_disk = json.loads((root / "dataset_info.json").read_text())
    assert on_disk["deepscaler"]["tasks"]["_root"]["sample_count"] == 5
    text = catalogue.render_entry("deepscaler", cat["deepscaler"])
    assert "## Dataset `deepscaler`" in text and "5 rows" in text and "`solution` (empty 3;" in text
    assert "sample 2:" in text and "deepscaler.json (0.6 KiB)" in text and "license: mit" not in text
    summary = catalogue.render_entry("deepscaler", cat["deepscaler"], "summary")
    assert "sample 1:" in summary and "sample 2:" not in summary and len(summary) < len(text)


def test_render_lists_non_string_columns_and_bounds_samples(tmp_path):
    root = _root(tmp_path, "panorama")
    entry = catalogue.build_catalogue(root)["panorama"]
    text = catalogue.render_entry("panorama", entry)
    assert "`options` (mapping)" in text and "`claim_number` (integer)" in text
    assert "row continues" in text  # a long row is cut, with the size of what was left out
    assert max(len(line) for line in text.splitlines()) < 1700
    assert catalogue.read_catalogue(root).keys() == {"panorama"}


def test_parquet_csv_and_truncation(tmp_path, monkeypatch):
    monkeypatch.setattr(catalogue, "SAMPLE_CHARS", 10)
    root = _root(tmp_path, "panorama", "financeiq")
    cat = catalogue.build_catalogue(root)
    assert cat["panorama"].tasks["PAR4PC"].sample_count == 4  # train+validation+test before the hook
    ctx = cat["panorama"].tasks["NOC4PC"].samples[0]["context"]
    assert ctx.startswith('{"title"') and "omitted" in ctx
    assert cat["financeiq"].tasks["test"].sample_count == 10


def test_incremental(tmp_path, monkeypatch):
    root = _root(tmp_path, "deepscaler")
    calls = []
    real = catalogue.analyze_dataset
    monkeypatch.setattr(catalogue, "analyze_dataset", lambda d, c: calls.append(d.name) or real(d, c))
    catalogue.build_catalogue(root)
    catalogue.build_catalogue(root)
    assert calls == ["deepscaler"]
    shutil.copytree(FIXTURES / "tableinstruct", root / "tableinstruct")
    catalogue.build_catalogue(root)
    assert calls == ["deepscaler", "tableinstruct"]
    shutil.rmtree(root / "deepscaler")
    assert set(catalogue.build_catalogue(root)) == {"tableinstruct"}


def test_model_tokenizer_is_used_when_present(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "hello": 1, "world": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    model = tmp_path / "model"
    model.mkdir()
    tok.save(str(model / "tokenizer.json"))
    counter = load_token_counter(model)
    assert counter.name == "tokenizer:model"
    assert counter.count("hello world hello") == 3
    assert isinstance(load_token_counter(tmp_path / "missing"), ApproxCounter)
    root = _root(tmp_path / "ds", "deepscaler")
    first = catalogue.build_catalogue(root)
    second = catalogue.build_catalogue(root, model_dir=model)  # other counter → analysed again
    assert first["deepscaler"].token_counter != second["deepscaler"].token_counter


def test_category_columns_get_value_counts():
    from ftagent.datasets.catalogue import column_stats
    from ftagent.datasets.tokens import ApproxCounter

    rows = [{"qtype": "FactChecking" if i % 3 else "NumericalReasoning", "id": f"x{i}", "q": f"question {i}"}
            for i in range(30)]
    stats = column_stats(rows, ApproxCounter())
    assert stats["qtype"].values == {"FactChecking": 20, "NumericalReasoning": 10}
    assert stats["id"].values == {} and stats["q"].values == {}  # all distinct: not a category
