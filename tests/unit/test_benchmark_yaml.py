"""Benchmarks as data: the YAML loader, the built-in files, user benchmark files and FT_BENCHMARK_PATHS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftagent.benchmarks import benchmark_keys, describe, get_benchmark, resolve_benchmark
from ftagent.benchmarks.components import EXTRACTORS, METRICS, USER_METRICS, component_path
from ftagent.benchmarks.domain import KEY_SPECS
from ftagent.benchmarks.registry import BENCHMARKS, BUILTIN_DIR
from ftagent.benchmarks.schema import load_config
from ftagent.benchmarks.splits import permutation
from ftagent.core.errors import UserInputError
from ftagent.tools.opencompass import provides  # noqa: F401 - registers the "@Name" components

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "fixtures" / "benchmarks"
MINIMAL = """\
name: {name}
description: "Reply with the number only."
data: {{file: {name}.jsonl}}
prompt: "{{question}}"
answer: answer
metric: exact_match
"""


@pytest.fixture(autouse=True)
def _fresh_user_registry(monkeypatch):
    """User files registered by one test are not seen by the next; no FT_BENCHMARK_PATHS from outside."""
    monkeypatch.setattr(BENCHMARKS, "_user", {})
    monkeypatch.delenv("FT_BENCHMARK_PATHS", raising=False)
    monkeypatch.chdir(Path(__file__).parent)  # no stray .env


def _write(folder: Path, name: str = "my_bench", rows: int = 10, text: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(text if text is not None else MINIMAL.format(name=name), encoding="utf-8")
    with (folder / f"{name}.jsonl").open("w", encoding="utf-8") as fh:
        for i in range(rows):
            fh.write(json.dumps({"question": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n")
    return path


# ---------------------------------------------------------------- built-in files

def test_every_builtin_key_keeps_its_facts():
    """Same spec as before the move to YAML (captured from the adapter classes + scenarios.json)."""
    golden = json.loads((GOLDEN / "builtin_specs.json").read_text(encoding="utf-8"))
    assert set(golden) <= set(benchmark_keys())
    for key, before in golden.items():
        bench = get_benchmark(key)
        spec = bench.spec.model_dump()
        for field in ("category", "core_metric", "direction", "max_out_len", "subsets", "input_columns",
                      "output_column", "prompt", "answer_rule", "related_datasets", "data_source", "description"):
            assert spec[field] == before[field], (key, field)
        # the spec names ftagent's own components "@Name"; the tool layer says where they live
        assert spec["evaluator"].replace(bench.evaluator, component_path(bench.evaluator), 1).startswith(
            before["_evaluator"]), key
        assert component_path(bench.evaluator) == before["_evaluator"], key
        assert component_path(bench.postprocessor) == before["_postprocessor"], key
        assert bench.evaluator_kwargs == before["_evaluator_kwargs"] or key in KEY_SPECS, key
        assert bench.postprocessor_kwargs == before["_postprocessor_kwargs"], key
        assert bench.supports_judge == before["_supports_judge"], key


def test_domain_key_specs_view_matches_the_old_table():
    golden = json.loads((GOLDEN / "domain_key_specs.json").read_text(encoding="utf-8"))
    assert KEY_SPECS == golden


def test_builtin_files_are_named_by_their_key_and_includes_are_hidden():
    files = sorted(BUILTIN_DIR.glob("*.yaml"))
    keys = [p.stem for p in files if not p.name.startswith("_")]
    assert len(keys) == 30 and all(load_config(BUILTIN_DIR / f"{k}.yaml").name == k for k in keys)
    assert "_math_boxed" not in benchmark_keys() and "math_boxed" not in benchmark_keys()


def test_no_benchmark_fact_left_in_code_or_scenarios_json():
    assert not (REPO / "configs" / "scenarios.json").exists()
    for name in ("math.py", "knowledge.py", "code.py", "demo.py", "domain_adapters.py"):
        text = (REPO / "ftagent" / "benchmarks" / name).read_text(encoding="utf-8")
        assert "BenchmarkSpec(" not in text and "class " not in text, name  # composition, no adapter classes


# ---------------------------------------------------------------- the loader

def test_include_merges_family_defaults_and_the_file_wins(tmp_path):
    (tmp_path / "_family.yaml").write_text(
        "category: fam\nmetric: contains\ndata: {file: a.jsonl, fields: {question: q}}\nmax_out_len: 99\n")
    (tmp_path / "b.yaml").write_text("name: b\ninclude: _family.yaml\nprompt: '{question}'\n"
                                     "data: {file: b.jsonl}\nmax_out_len: 7\n")
    cfg = load_config(tmp_path / "b.yaml")
    assert cfg.category == "fam" and cfg.metric == "contains" and cfg.max_out_len == 7
    assert cfg.data.file == "b.jsonl" and cfg.data.fields == {"question": "q"}  # mappings merged key by key


def test_include_cycle_and_missing_include_are_user_errors(tmp_path):
    (tmp_path / "a.yaml").write_text("include: b.yaml\nname: a\n")
    (tmp_path / "b.yaml").write_text("include: a.yaml\n")
    with pytest.raises(UserInputError, match="include cycle"):
        load_config(tmp_path / "a.yaml")
    (tmp_path / "c.yaml").write_text("include: nope.yaml\nname: c\n")
    with pytest.raises(UserInputError, match="nope.yaml not found"):
        load_config(tmp_path / "c.yaml")


def test_bad_yaml_names_the_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nprompt: [unclosed\nmetric: exact_match\n")
    with pytest.raises(UserInputError, match=r"bad.yaml: not valid YAML \(line \d+"):
        load_config(path)
    path.write_text("- just\n- a list\n")
    with pytest.raises(UserInputError, match="expected a mapping"):
        load_config(path)


def test_missing_and_unknown_fields_in_one_message(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("name: m\ndata: {file: m.jsonl}\npromt: '{question}'\n")
    with pytest.raises(UserInputError) as err:
        load_config(path)
    msg = str(err.value)
    assert "`prompt` is required" in msg and "`metric` is required" in msg
    assert "`promt` unknown field. Did you mean 'prompt'?" in msg


def test_data_needs_a_file_or_both_splits(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text("name: d\ndata: {validation: v.jsonl}\nprompt: '{question}'\nmetric: exact_match\n")
    with pytest.raises(UserInputError, match="`data` data needs `file: rows.jsonl` or both `validation:` and `test:`"):
        load_config(path)


def test_unknown_metric_or_extractor_did_you_mean(tmp_path):
    path = _write(tmp_path, text=MINIMAL.format(name="my_bench").replace("exact_match", "exact_mach"))
    with pytest.raises(UserInputError, match="`metric`: unknown benchmark metric 'exact_mach'. Did you mean 'exact_match'"):
        get_benchmark(str(path))
    path.write_text(MINIMAL.format(name="my_bench") + "extractor: boxd\n")
    with pytest.raises(UserInputError, match="Did you mean 'boxed'"):
        get_benchmark(str(path))


# ---------------------------------------------------------------- user benchmark files

def test_minimal_user_file_prepares_with_the_standard_split(tmp_path):
    path = _write(tmp_path / "user", rows=10)
    key = resolve_benchmark(str(path))
    assert key == "my_bench" and "my_bench" in benchmark_keys()
    bench = get_benchmark(key)
    assert bench.spec.core_metric == "accuracy" and bench.spec.category == "user"
    assert bench.spec.input_columns == ["question"] and bench.spec.description == "Reply with the number only."
    root = tmp_path / "files" / "benchmarks"
    out = bench.prepare(root)
    assert out == root / "my_bench"
    val, test = bench.load_items(root, "validation"), bench.load_items(root, "test")
    answers = [str(2 * i) for i in range(10)]  # the rows' gold answers, in file order
    perm = permutation(10)
    assert [r["answer"] for r in val] == [answers[i] for i in perm[:5]] and len(test) == 5  # seed-42 shuffle
    (block,) = bench.dataset_blocks(root, "validation")
    assert block.evaluator == "@ExactMatchEvaluator" and block.postprocessor == "@strip_answer"
    assert component_path(block.evaluator) == "ftagent.tools.opencompass.oc_ext:ExactMatchEvaluator"
    assert component_path(block.postprocessor) == "ftagent.tools.opencompass.oc_ext:strip_answer"
    assert block.rounds == [{"role": "HUMAN", "prompt": "{question}"}] and block.abbr == "my_bench"


def test_user_file_with_both_splits_csv_and_named_fields(tmp_path):
    (tmp_path / "val.csv").write_text("q,gold\nhello,A\nworld,B\n", encoding="utf-8")
    (tmp_path / "test.csv").write_text("q,gold\nfoo,C\n", encoding="utf-8")
    path = tmp_path / "mc.yaml"
    path.write_text("name: mc\ndata: {validation: val.csv, test: test.csv}\nprompt: 'Pick: {q}'\n"
                    "answer: gold\nmetric: multiple_choice\n", encoding="utf-8")
    bench = get_benchmark(str(path))
    bench.prepare(tmp_path / "b", limit=None)
    assert [(r["q"], r["answer"]) for r in bench.load_items(tmp_path / "b", "validation")] == [("hello", "A"), ("world", "B")]
    assert [r["q"] for r in bench.load_items(tmp_path / "b", "test")] == ["foo"]
    assert bench.spec.input_columns == ["q"] and component_path(bench.evaluator).endswith(
        "oc_ext:OptionLetterEvaluator")


def test_user_data_problems_are_one_clear_message(tmp_path):
    path = _write(tmp_path, rows=3)
    (tmp_path / "my_bench.jsonl").write_text('{"question": "x"}\n', encoding="utf-8")
    with pytest.raises(UserInputError, match=r"row 1 of my_bench.jsonl has no field 'answer'"):
        get_benchmark(str(path)).prepare(tmp_path / "b")
    (tmp_path / "my_bench.jsonl").unlink()
    with pytest.raises(UserInputError, match="my_bench.jsonl not found"):
        get_benchmark(str(path)).prepare(tmp_path / "b")


def test_user_file_cannot_take_a_builtin_name(tmp_path):
    path = _write(tmp_path, name="gsm8k")
    with pytest.raises(UserInputError, match="'gsm8k' is already a built-in"):
        resolve_benchmark(str(path))


def test_show_user_file_and_list_with_benchmark_paths(tmp_path, monkeypatch):
    path = _write(tmp_path / "extra", name="extra_bench")
    text = describe(str(path))
    assert "extra_bench" in text and "ExactMatchEvaluator" in text and str(path) in text
    monkeypatch.setattr(BENCHMARKS, "_user", {})
    assert "extra_bench" not in benchmark_keys()
    other = _write(tmp_path / "more", name="second_bench")
    monkeypatch.setenv("FT_BENCHMARK_PATHS", os.pathsep.join([str(tmp_path / "extra"), str(other.parent)]))
    keys = benchmark_keys()
    assert {"extra_bench", "second_bench", "demo_add"} <= set(keys)
    assert get_benchmark("second_bench").spec.key == "second_bench"


def test_benchmark_paths_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("FT_BENCHMARK_PATHS", str(tmp_path / "missing"))
    with pytest.raises(UserInputError, match="FT_BENCHMARK_PATHS: .*missing is not a directory"):
        benchmark_keys()
    _write(tmp_path / "a", name="twin")
    _write(tmp_path / "b", name="twin")
    monkeypatch.setenv("FT_BENCHMARK_PATHS", f"{tmp_path / 'a'}{os.pathsep}{tmp_path / 'b'}")
    with pytest.raises(UserInputError, match="'twin' is defined twice"):
        benchmark_keys()
    assert get_benchmark("demo_add").spec.key == "demo_add"  # built-ins never need the user files parsed


def test_every_user_metric_is_an_oc_ext_evaluator():
    import ast

    tree = ast.parse((REPO / "ftagent/tools/opencompass/oc_ext.py").read_text(encoding="utf-8"))
    defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    for name in USER_METRICS:
        metric = METRICS.get(name)
        module, _, attr = component_path(metric.evaluator).partition(":")
        assert module == "ftagent.tools.opencompass.oc_ext" and attr in defined, name
        post = component_path(EXTRACTORS.get(metric.extractor or "none").postprocessor)
        assert post is None or post.partition(":")[2] in defined, name


# ---------------------------------------------------------------- CLI and jobs

def _cli(args, cwd: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "CHAT_", "OPENAI_"))}
    env.update({"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"})
    return subprocess.run([sys.executable, "-m", "ftagent", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_cli_show_user_file_and_bad_file_exit_2(tmp_path):
    _write(tmp_path)
    ok = _cli(["benchmarks", "show", "./my_bench.yaml"], tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "my_bench" in ok.stdout and "exact match" in ok.stdout
    (tmp_path / "bad.yaml").write_text("name: bad\ndata: {file: x.jsonl}\nprompt: '{question}'\n")
    bad = _cli(["benchmarks", "show", "./bad.yaml"], tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("error:") == 1 and "Traceback" not in bad.stderr
    assert "`metric` is required" in bad.stderr
    nofile = _cli(["llm_finetune", "--benchmark", "./nofile.yaml", "--base-model", "builtin/tiny-qwen2"], tmp_path)
    assert nofile.returncode == 2 and "nofile.yaml not found" in nofile.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml", "my_bench.jsonl", "my_bench.yaml"]


def test_job_accepts_plugin_and_user_benchmarks(tmp_path, monkeypatch):
    """Before: tasks.json benchmarks were checked against configs/scenarios.json, so these were rejected."""
    from ftagent.jobs.tasks import build_plan, read_tasks_file, task_descriptions, validate_tasks

    monkeypatch.setitem(BENCHMARKS._objects, "my_plugin", get_benchmark("demo_add"))
    spec, errors = validate_tasks({"tasks": [{"model": "m/x", "benchmark": "my_plugin"}]})
    assert spec is not None and not errors
    _write(tmp_path / "benches")
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps({"tasks": [{"model": "m/x", "benchmark": "benches/my_bench.yaml"},
                                           {"model": "m/y", "benchmark": "my_plugin"}]}))
    spec, errors = read_tasks_file(tasks)
    assert spec is not None, errors
    plan = build_plan(spec, job_id="j", log_base=tmp_path / "log", workspace_base=tmp_path / "ws",
                      ftagent_bin="ftagent", descriptions=task_descriptions(spec))
    first = plan.tasks[0]
    assert first.name == "my_bench_x"
    assert first.argv[first.argv.index("--benchmark") + 1] == str((tmp_path / "benches" / "my_bench.yaml").resolve())
    assert first.argv[first.argv.index("--benchmark-description") + 1] == "Reply with the number only."
    spec, errors = validate_tasks({"tasks": [{"model": "m/x", "benchmark": "my_plugn"}]})
    assert spec is None and "did you mean 'my_plugin'" in errors[0].lower()


def test_run_config_keeps_the_user_file_for_resume(tmp_path):
    from ftagent.benchmarks import resolve_benchmark
    from ftagent.finetune.resolve import benchmark_file

    path = _write(tmp_path)
    key = resolve_benchmark(str(path))
    assert key == "my_bench" and benchmark_file(key) == str(path.resolve())
    assert resolve_benchmark("gsm8k") == "gsm8k" and benchmark_file("gsm8k") is None
