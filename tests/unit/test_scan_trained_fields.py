"""Issue 39, red team B3: the contamination scan reads every text LLaMA-Factory trains on, through the real entry
points (the data step's ``DataProcessor.scan``, the validate step's ``scan_config``), and its reading of a row is
LLaMA-Factory's own (the converter, run in the tool env on rows of every stage).

Before the fix the scan read ``instruction``/``input``/``output`` only: an item in ``history`` or ``system``, the
config's ``default_system``, or a reworded item with its gold passed; a pair was split into two rows, so the
flagged row's index was not its index in data.json.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ftagent.core.errors import ErrorType, StepError
from ftagent.datasets.trained_text import trained_row
from ftagent.tools.llamafactory.config import write_dataset_info
from ftagent.tools.llamafactory.data_script import DataProcessor
from tests.unit.test_prompts import _demo_scenario, _settings
from tests.unit.test_stage_leaks import _bench

REPO = Path(__file__).resolve().parents[2]


def _processor(tmp_path: Path) -> DataProcessor:
    scenario = _demo_scenario(tmp_path)
    _bench(scenario)  # validation: 31 + 58, 12 + 40; test: 70 + 21
    return DataProcessor(scenario, _settings(), runner=None, input_columns=["question"],  # type: ignore[arg-type]
                         answer_column="answer")


def _flagged(data: DataProcessor, rows: list[dict]) -> dict:
    with pytest.raises(StepError) as err:
        data.scan(rows)
    assert err.value.error_type is ErrorType.DATA
    return err.value.details or {}


HONEST = {"instruction": "What is 131 + 258?", "input": "", "output": "\\boxed{389}"}


def test_an_item_in_history_or_system_fails_the_data_step(tmp_path: Path) -> None:
    data = _processor(tmp_path)
    data.scan([HONEST])
    in_history = {**HONEST, "history": [["What is 31 + 58?", "\\boxed{89}"]]}
    in_system = {**HONEST, "system": "You know that 70 + 21 = 91."}
    assert _flagged(data, [HONEST, in_history])["examples"][0] == {"row_index": 1, "item_id": "demo_add/validation:0",
                                                                   "coverage": 1.0}
    assert _flagged(data, [in_system])["examples"][0]["item_id"] == "demo_add/test:0"


def test_a_reworded_item_with_its_gold_fails_the_data_step(tmp_path: Path) -> None:
    """The answers reach the data step's scan: "the total of", named operands -- the numbers and the gold."""
    data = _processor(tmp_path)
    rows = [HONEST, {"instruction": "Let p = 58 and q = 31. What is the total of p and q?", "input": "",
                     "output": "The total is \\boxed{89}."}]
    assert _flagged(data, rows)["examples"][0]["row_index"] == 1
    data.scan([{**rows[1], "output": "\\boxed{90}"}])  # the same numbers, another answer: another question


def test_a_pair_is_flagged_at_its_own_row_index(tmp_path: Path) -> None:
    data = _processor(tmp_path)
    pair = {"instruction": "What is 12 + 40?", "input": "", "chosen": "\\boxed{52}", "rejected": "\\boxed{51}"}
    honest_pair = {**pair, "instruction": "What is 112 + 40?", "chosen": "\\boxed{152}"}
    assert _flagged(data, [honest_pair, honest_pair, pair])["examples"][0]["row_index"] == 2


def test_an_item_in_the_validated_default_system_fails_validation(tmp_path: Path) -> None:
    data = _processor(tmp_path)
    config = tmp_path / "train.yaml"
    config.write_text("template: chatml\ndefault_system: 'Worked example: 12 + 40 = 52.'\n", encoding="utf-8")
    with pytest.raises(StepError) as err:
        data.scan_config(config)
    assert err.value.error_type is ErrorType.DATA and "validation:1" in str(err.value)
    config.write_text("template: chatml\ndefault_system: You add numbers carefully.\n", encoding="utf-8")
    data.scan_config(config)  # an honest system prompt passes


# -- the reading of a row is LLaMA-Factory's own -------------------------------------------------------------
def _tools_python() -> str | None:
    root = os.environ.get("FT_TOOLS_ENV") or str(REPO / "git_ignore_folder" / "finetune_files" / "envs" / "tools")
    python = Path(root) / "bin" / "python"
    return str(python) if python.is_file() else None


CONVERT = """
import json, sys, types
from datasets import load_dataset
from llamafactory.data.converter import align_dataset
from llamafactory.data.parser import get_dataset_list
from llamafactory.hparams import DataArguments

cache, found = sys.argv[1], []
for folder, name in zip(sys.argv[2::2], sys.argv[3::2]):
    attr = get_dataset_list([name], folder)[0]
    rows = load_dataset("json", data_files=folder + "/" + attr.dataset_name, split="train", cache_dir=cache)
    out = align_dataset(rows, attr, DataArguments(dataset_dir=folder), types.SimpleNamespace(local_process_index=0))
    found.append([[m["content"] for m in r["_prompt"] + r["_response"]] + [r["_system"]] for r in out])
print(json.dumps(found))
"""


def _llamafactory_texts(datasets: list[tuple[Path, str]], cache: Path) -> list[list[list[str]]]:
    """For each ``(folder, name)``: every text LLaMA-Factory's converter makes of each row of dataset ``name``
    registered in ``folder``'s dataset_info.json (the prompt turns, the responses, the system), loaded by HF
    datasets as the trainer loads it. One process for all (LLaMA-Factory takes seconds to import)."""
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    args = [str(x) for folder, name in datasets for x in (folder, name)]
    out = subprocess.run([_tools_python(), "-c", CONVERT, str(cache), *args], capture_output=True,
                         text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _ours(row: dict) -> list[str]:
    view = trained_row(row)
    return [t for turn in view.turns for t in (turn.prompt, *turn.answers)] + [view.system]


ROWS = {
    "alpaca": [
        {"instruction": "Say hi.", "input": "", "output": "Hi!"},
        {"instruction": "What is 2", "input": "5 + 68?", "output": "93", "system": "Be brief.",
         "history": [["What is 1 + 1?", "2"], ["And 2 + 2?", "4"]]},
    ],
    "pairwise": [
        {"instruction": "Q1", "input": "context", "chosen": "good", "rejected": "bad"},
        {"instruction": "Q2", "input": "", "chosen": "yes", "rejected": "no", "system": "S",
         "history": [["earlier", "answer"]]},
    ],
    "kto": [
        {"instruction": "Q1", "input": "", "output": "fine", "kto_tag": True},
        {"instruction": "Q2", "input": "x", "output": "poor", "kto_tag": False, "history": [["h", "a"]]},
    ],
}


SHAREGPT = [
    {"conversations": [{"from": "system", "value": "You are terse."}, {"from": "human", "value": "What is 31 + 58?"},
                       {"from": "gpt", "value": "89"}, {"from": "human", "value": "And 12 + 40?"},
                       {"from": "gpt", "value": "52"}]},
    {"conversations": [{"from": "human", "value": "Say hi."}, {"from": "gpt", "value": "Hi!"}]},
]


@pytest.mark.skipif(_tools_python() is None, reason="needs the tool env (LLaMA-Factory)")
def test_the_scan_reads_what_llamafactorys_converter_trains(tmp_path: Path) -> None:
    """Rows of every stage's format in a data.json registered by write_dataset_info, and a ShareGPT --dataset
    file as the start-up scan reads it (``to_alpaca``: the system turn, every earlier turn pair as history):
    LLaMA-Factory's own converters (AlpacaDatasetConverter, SharegptDatasetConverter, through align_dataset on the
    file loaded by HF datasets as the trainer loads it) give exactly the texts :func:`trained_row` reads."""
    from ftagent.datasets.user_file.convert import to_alpaca
    from ftagent.datasets.user_file.register import register_user_file

    datasets, ours = [], []
    for data_format, rows in sorted(ROWS.items()):
        folder = tmp_path / data_format
        folder.mkdir()
        (folder / "data.json").write_text(json.dumps(rows), encoding="utf-8")
        write_dataset_info(folder, "ftagent_data", data_format=data_format)
        datasets.append((folder, "ftagent_data"))
        ours.append(rows)
    source = tmp_path / "chats.jsonl"
    source.write_text("\n".join(json.dumps(r) for r in SHAREGPT), encoding="utf-8")
    info = register_user_file(source, tmp_path / "datasets")
    datasets.append((tmp_path / "datasets" / info.name, info.name))
    ours.append(to_alpaca(tmp_path / "datasets" / info.name, None, None, keep_all=True))
    theirs = _llamafactory_texts(datasets, tmp_path / "cache")
    for rows, converted in zip(ours, theirs, strict=True):
        for row, texts in zip(rows, converted, strict=True):
            assert sorted(t for t in texts if t) == sorted(t for t in _ours(row) if t), (row, texts)
    assert trained_row(ours[-1][0]).system == "You are terse." and len(trained_row(ours[-1][0]).turns) == 2
