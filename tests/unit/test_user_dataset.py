"""`--dataset ./my_data.jsonl`: detection, the copy and its registration, the converter, the scan, resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftagent.core.errors import UserInputError
from ftagent.datasets import registry
from ftagent.datasets.base import converter_source
from ftagent.datasets.catalogue import build_catalogue
from ftagent.datasets.user_file.layout import detect_layout
from ftagent.datasets.user_file.reading import looks_like_file, read_records
from ftagent.datasets.user_file.register import check_against_benchmark, register_user_file
from tests.helpers.user_files import write_user_file

ALPACA = [{"instruction": f"What is {a} + 1?", "input": "", "output": f"\\boxed{{{a + 1}}}"} for a in range(10, 30)]
SHAREGPT = [{"conversations": [{"from": "system", "value": "Be brief."},
                               {"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"},
                               {"from": "human", "value": f"What is {a} + 2?"}, {"from": "gpt", "value": str(a + 2)}]}
            for a in range(10, 20)]
MESSAGES = [{"messages": [{"role": "user", "content": f"Say {a}"}, {"role": "assistant", "content": str(a)}]}
            for a in range(5)]


@pytest.fixture
def root(tmp_path):
    return tmp_path / "files" / "datasets"


def test_looks_like_file():
    assert looks_like_file("./my_data.jsonl") and looks_like_file("data.parquet") and looks_like_file("a/b")
    assert not looks_like_file("demo_add") and not looks_like_file("all") and not looks_like_file(None)


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".parquet"])
def test_alpaca_in_every_format_is_detected_copied_and_registered(tmp_path, root, suffix):
    path = write_user_file(tmp_path / f"My Data{suffix}", ALPACA)
    info = register_user_file(path, root, reserved=set(registry.dataset_names()))
    assert (info.name, info.format, info.rows) == ("my_data", "alpaca", len(ALPACA))
    assert "Alpaca" in info.describe() and "20 rows" in info.describe()
    folder = root / "my_data"
    copy = folder / info.file_name
    assert copy.is_file() and not copy.is_symlink() and copy.read_bytes() == path.read_bytes()
    assert (folder / ".prepared").is_file()
    lf = json.loads((folder / "dataset_info.json").read_text())
    assert lf == {"my_data": {"file_name": info.file_name, "formatting": "alpaca",
                              "columns": {"prompt": "instruction", "response": "output", "query": "input"}}}
    source = registry.get_source("my_data")
    rows = source.to_alpaca(folder, None, None)
    assert [r["output"] for r in rows] == [r["output"] for r in ALPACA]


def test_sharegpt_from_value_is_registered_for_llamafactory_and_converted(tmp_path, root):
    info = register_user_file(write_user_file(tmp_path / "chats.jsonl", SHAREGPT), root)
    assert (info.format, info.messages, info.role_tag, info.user_tag, info.assistant_tag) == (
        "sharegpt", "conversations", "from", "human", "gpt")
    assert "ShareGPT" in info.describe()
    lf = json.loads((root / "chats" / "dataset_info.json").read_text())["chats"]
    assert lf["formatting"] == "sharegpt" and lf["columns"] == {"messages": "conversations"}
    assert lf["tags"] == {"role_tag": "from", "content_tag": "value", "user_tag": "human", "assistant_tag": "gpt",
                          "system_tag": "system"}
    row = registry.get_source("chats").to_alpaca(root / "chats", None, None)[0]
    assert row == {"instruction": "What is 10 + 2?", "input": "", "output": "12", "system": "Be brief.",
                   "history": [["Hi", "Hello"]]}


def test_sharegpt_role_content_messages(tmp_path, root):
    info = register_user_file(write_user_file(tmp_path / "msgs.jsonl", MESSAGES), root)
    lf = json.loads((root / "msgs" / "dataset_info.json").read_text())["msgs"]
    assert lf["columns"] == {"messages": "messages"}
    assert (lf["tags"]["role_tag"], lf["tags"]["user_tag"], lf["tags"]["assistant_tag"]) == ("role", "user", "assistant")
    assert info.rows == 5


def test_same_file_reuses_the_copy_a_changed_one_gets_a_new_name(tmp_path, root):
    path = write_user_file(tmp_path / "my_data.jsonl", ALPACA)
    first = register_user_file(path, root)
    again = register_user_file(path, root)
    assert again.name == first.name and again.reused and "reused the copy" in again.describe()
    write_user_file(path, ALPACA[:5])
    changed = register_user_file(path, root)
    assert changed.name == f"my_data_{changed.sha256[:8]}" and changed.rows == 5
    assert len(registry.get_source("my_data").to_alpaca(root / "my_data", None, None)) == len(ALPACA)  # kept


def test_a_builtin_name_is_never_taken(tmp_path, root):
    info = register_user_file(write_user_file(tmp_path / "demo_add.jsonl", ALPACA), root,
                              reserved=set(registry.dataset_names()))
    assert info.name == "user_demo_add"
    assert registry.get_source("demo_add").spec.repo_id is None  # the built-in is untouched
    assert registry.get_source("demo_add").spec.license != "your own file"


def test_user_files_are_not_in_all_nor_benchmark_defaults(tmp_path, root):
    register_user_file(write_user_file(tmp_path / "extra.jsonl", ALPACA), root)
    assert "extra" not in registry.resolve_dataset_choice("all", "demo_add", [])
    assert registry.resolve_dataset_choice(None, "demo_add", []) == ["demo_add"]
    assert registry.resolve_dataset_choice("extra", "demo_add", []) == ["extra"]


def test_catalogue_entry_has_the_builtins_stats_and_not_the_registration(tmp_path, root):
    register_user_file(write_user_file(tmp_path / "stats.jsonl", ALPACA), root)
    entry = build_catalogue(root, ["stats"])["stats"]
    assert entry.total_samples == len(ALPACA)
    (task,) = entry.tasks.values()
    assert task.files == ["stats.jsonl"]  # dataset_info.json (LLaMA-Factory's registration) is no data
    assert task.column_stats["output"].p50_tokens > 0 and task.samples[0]["instruction"] == ALPACA[0]["instruction"]
    assert "the user's own training file" in entry.readme


def test_the_converter_source_runs_alone_like_in_process_data(tmp_path, root):
    """The heuristic planner pastes the converter into process_data.py: it must be self-contained."""
    register_user_file(write_user_file(tmp_path / "alone.jsonl", SHAREGPT), root)
    code = converter_source(registry.get_source("alone"))
    namespace: dict = {}
    exec(compile(code, "process_data.py", "exec"), namespace)  # noqa: S102 - our own converter's source
    rows = namespace["to_alpaca"](str(root / "alone"), 4, 0)
    assert len(rows) == 4 and all(r["instruction"].startswith("What is") for r in rows)


def test_heuristic_process_data_trains_on_the_alpaca_file(tmp_path, root):
    from types import SimpleNamespace

    from ftagent.planners.heuristic.render import render_process_data

    register_user_file(write_user_file(tmp_path / "direct.jsonl", ALPACA), root)
    script = tmp_path / "ws" / "process_data.py"
    script.parent.mkdir()
    script.write_text(render_process_data(SimpleNamespace(datasets=["direct"]), 1000), encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], cwd=script.parent, capture_output=True, text=True,
                          env={**os.environ, "FT_DATASETS_DIR": str(root)}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads((script.parent / "data.json").read_text())
    assert sorted(r["output"] for r in rows) == sorted(r["output"] for r in ALPACA)


def test_contamination_names_count_and_row_never_the_text(tmp_path, root):
    rows = ALPACA[:3] + [{"instruction": "What is 77 + 11? Put the final answer in \\boxed{}.", "output": "88"}]
    info = register_user_file(write_user_file(tmp_path / "leaky.jsonl", rows), root)
    items = {"demo_add/test:7": ["What is 77 + 11?"], "demo_add/validation:0": ["What is 55 + 44?"]}
    with pytest.raises(UserInputError) as err:
        check_against_benchmark(info, root / "leaky", items, {})
    msg = str(err.value)
    assert "1 of 4 rows" in msg and "row 3" in msg and "demo_add/test:7" in msg and "77" not in msg
    assert not (root / "leaky").exists()  # the fresh copy is gone: the fixed file takes the name again
    fixed = register_user_file(write_user_file(tmp_path / "leaky.jsonl", ALPACA[:3]), root)
    assert fixed.name == "leaky" and not fixed.reused
    assert check_against_benchmark(fixed, root / "leaky", items, {}) == 3
    assert "contamination scan: none of its 3 rows holds one of" in fixed.describe()  # said when it passes too


def test_resume_registers_the_copy_again(tmp_path, root, monkeypatch):
    """A resumed process (`--path`, no --dataset) finds the session's user dataset by name."""
    from ftagent.core.paths import datasets_dir
    from ftagent.datasets.user_file.register import register_existing

    register_user_file(write_user_file(tmp_path / "resumed.jsonl", ALPACA), root)
    registry.DATASETS._objects.pop("resumed")
    registry._USER.discard("resumed")
    with pytest.raises(UserInputError):
        registry.get_source("resumed")
    assert "resumed" in register_existing(datasets_dir(tmp_path / "files"))
    assert registry.get_source("resumed").spec.task_type == "user file (alpaca)"


def test_resolve_run_swaps_the_file_for_its_copy(tmp_path, monkeypatch):
    from ftagent.core.settings import load_settings
    from ftagent.finetune.resolve import resolve_run

    path = write_user_file(tmp_path / "run_data.jsonl", ALPACA)
    monkeypatch.setenv("FT_FILE_PATH", str(tmp_path / "files"))
    settings = load_settings(target_benchmark="demo_add", base_model="builtin/tiny-qwen2", dataset=str(path))
    resolved = resolve_run(settings)
    assert resolved.dataset == "run_data" and settings.ft.dataset == str(path)  # the settings stay as given
    assert resolved.dataset_file == str(path)


# ------------------------------------------------------------------------------ bad files: detection

def test_unknown_columns_name_found_and_expected(tmp_path):
    path = write_user_file(tmp_path / "x.jsonl", [{"question": "q", "answer": "a"}])
    with pytest.raises(UserInputError, match=r"unknown columns: found answer, question; expected Alpaca"):
        detect_layout(path, read_records(path))


@pytest.mark.parametrize("rows,fragment", [
    ([{"conversations": [{"from": "human", "value": "q"}]}], "does not end with an assistant answer"),
    ([{"conversations": [{"from": "gpt", "value": "a"}, {"from": "human", "value": "q"}]}], "expected a user turn"),
    ([{"conversations": [{"speaker": "human", "text": "q"}]}], "expected `from`/`value` or `role`/`content`"),
    ([{"conversations": []}], "not a non-empty list"),
    ([{"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": " "}]}], "answer is empty"),
    ([{"instruction": "q", "output": "a", "history": "x"}], "`history` must be a list"),
])
def test_bad_rows(tmp_path, rows, fragment):
    path = write_user_file(tmp_path / "x.jsonl", rows)
    with pytest.raises(UserInputError, match=fragment):
        detect_layout(path, read_records(path))


# ------------------------------------------------------------------------------ bad files: the CLI

REPO = Path(__file__).resolve().parents[2]
BAD_FILES = {
    "unknown.jsonl": (b'{"question": "q", "answer": "a"}\n', "unknown columns: found answer, question; expected"),
    "empty.jsonl": (b"\n\n", "the file has no rows"),
    "empty_output.json": (json.dumps([{"instruction": "q", "output": ""}]).encode(),
                          "1 row(s) have an empty or missing `output` (first: row 0"),
    "lines.json": (b'{"instruction": "q", "output": "a"}\n{"instruction": "q", "output": "a"}\n',
                   "not a JSON document"),
    "broken.jsonl": (b'{"instruction": "q", "output": "a"}\n{"instruction": \n', "line 2 is not JSON"),
    "latin1.csv": ("instruction,output\nCaf\xe9,ok\n".encode("latin-1"), "not valid UTF-8 (byte 22"),
    "fake.parquet": (b"instruction,output\nq,a\n", "not a readable Parquet file"),
    "notes.txt": (b"hello", "unsupported file type '.txt'"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_file_is_one_error_exit_2_and_no_session(tmp_path, name):
    content, fragment = BAD_FILES[name]
    (tmp_path / name).write_bytes(content)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "CHAT_", "OPENAI_"))}
    env.update({"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "FT_FILE_PATH": str(tmp_path / "files"),
                "LOG_PATH": str(tmp_path / "log"), "WORKSPACE_PATH": str(tmp_path / "ws"), "FT_PLANNER": "heuristic"})
    proc = subprocess.run([sys.executable, "-m", "ftagent", "llm_finetune", "--benchmark", "demo_add",
                           "--base-model", "builtin/tiny-qwen2", "--dataset", f"./{name}", "--loop-n", "1"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --dataset ") and fragment in lines[0], proc.stderr
    assert not (tmp_path / "log").exists() and not (tmp_path / "ws").exists()
    assert not (tmp_path / "files" / "datasets").exists()  # nothing copied
    assert (tmp_path / name).read_bytes() == content  # the user's file is untouched


def test_llm_data_coder_gets_the_user_files_converter(tmp_path, root):
    from ftagent.planners.llm.code_context import converter_sources

    register_user_file(write_user_file(tmp_path / "for_llm.jsonl", ALPACA), root)
    sources = converter_sources(["for_llm", "demo_add"])
    assert "def to_alpaca(" in sources["for_llm"] and ".user_dataset.json" in sources["for_llm"]
    assert "demo_add_train.json" in sources["demo_add"]


def test_tasks_json_dataset_file_is_relative_to_tasks_json_and_checked(tmp_path):
    from ftagent.jobs.tasks import build_plan, read_tasks_file, task_descriptions

    sub = tmp_path / "exp"
    sub.mkdir()
    write_user_file(sub / "mine.jsonl", ALPACA)
    write_user_file(sub / "bad.jsonl", [{"question": "q"}])
    good = sub / "tasks.json"
    good.write_text(json.dumps({"tasks": [{"model": "builtin/tiny-qwen2", "benchmark": "demo_add",
                                           "dataset": "mine.jsonl"},
                                          {"model": "builtin/tiny-qwen2", "benchmark": "demo_add",
                                           "dataset": "demo_add"}]}))
    tasks, errors = read_tasks_file(good)
    assert not errors and tasks.tasks[0].dataset == str(sub / "mine.jsonl")
    plan = build_plan(tasks, job_id="j", log_base=tmp_path / "log", workspace_base=tmp_path / "ws", ftagent_bin="ftagent", descriptions=task_descriptions(tasks))
    assert plan.tasks[0].argv[-2:] == ["--dataset", str(sub / "mine.jsonl")]
    assert plan.tasks[1].argv[-2:] == ["--dataset", "demo_add"]
    bad = sub / "bad_tasks.json"
    bad.write_text(json.dumps({"tasks": [{"model": "m", "benchmark": "demo_add", "dataset": "bad.jsonl"},
                                         {"model": "m", "benchmark": "demo_add", "dataset": "demo_ad"}]}))
    _, errors = read_tasks_file(bad)
    assert len(errors) == 2 and "unknown columns: found question" in errors[0] and "demo_add" in errors[1], errors
