"""The folder a user file's copy lives in (``FT_FILE_PATH/datasets/<name>/``), written whole or not at all: the
copy, ``.user_dataset.json``, LLaMA-Factory's ``dataset_info.json`` for the copy as it is, ``FTAGENT_NOTES.md``
(what the planner reads, its make-up first) and the ``.prepared`` marker."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from ftagent.datasets.user_file.convert import to_alpaca
from ftagent.datasets.user_file.info import INFO_FILE, UserDataset
from ftagent.datasets.user_file.layout import SYSTEM_ROLE

LF_INFO_FILE = "dataset_info.json"
NOTES_FILE = "FTAGENT_NOTES.md"


def write_folder(path: Path, out: Path, info: UserDataset, alpaca: list[dict[str, Any]] | None) -> None:
    """Stage the copy and its files next to ``out``, then move the folder into place. ``alpaca``: the
    file's rows when they are Alpaca already (a ShareGPT file is profiled through its converter)."""
    from ftagent.datasets.makeup import profile_rows
    from ftagent.datasets.prepare import MARKER, PreparedMarker

    staging = out.with_name(f".{out.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    shutil.copyfile(path, staging / info.file_name)
    (staging / INFO_FILE).write_text(info.model_dump_json(indent=2), encoding="utf-8")
    makeup = profile_rows(alpaca if alpaca is not None else to_alpaca(staging, None, None, keep_all=True))
    info.usable_rows = makeup.usable
    (staging / INFO_FILE).write_text(info.model_dump_json(indent=2), encoding="utf-8")
    (staging / LF_INFO_FILE).write_text(json.dumps(llamafactory_entry(info), indent=2), encoding="utf-8")
    (staging / NOTES_FILE).write_text(notes(info, makeup.to_markdown()), encoding="utf-8")
    marker = PreparedMarker(name=info.name, repo_id=None, source="user", prepared_at=info.registered_at)
    (staging / MARKER).write_text(marker.model_dump_json(indent=2), encoding="utf-8")
    staging.replace(out)


def llamafactory_entry(info: UserDataset) -> dict[str, Any]:
    """The copy's LLaMA-Factory ``dataset_info.json`` (``dataset_dir`` = the dataset folder)."""
    if info.format == "alpaca":
        columns = {"prompt": "instruction", "response": "output"}
        columns.update({lf: col for lf, col in (("query", "input"), ("system", "system"), ("history", "history"))
                        if col in info.columns})
        return {info.name: {"file_name": info.file_name, "formatting": "alpaca", "columns": columns}}
    turns: dict[str, str | None] = {"messages": info.messages}
    if "system" in info.columns:
        turns["system"] = "system"
    tags = {"role_tag": info.role_tag, "content_tag": info.content_tag, "user_tag": info.user_tag,
            "assistant_tag": info.assistant_tag, "system_tag": SYSTEM_ROLE}
    return {info.name: {"file_name": info.file_name, "formatting": "sharegpt", "columns": turns, "tags": tags}}


def notes(info: UserDataset, makeup: str = "") -> str:
    """``FTAGENT_NOTES.md``: what the planner reads about the file (its make-up first: the catalogue
    shows only the start of these notes)."""
    convert = ("rows are Alpaca already" if info.format == "alpaca" else
               "each conversation becomes one Alpaca row: the last user turn → `instruction`, the last answer "
               "→ `output`, earlier turn pairs → `history`, a system turn → `system`")
    return (f"# {info.name}: the user's own training file\n\n"
            f"- {info.describe()}\n"
            f"- The user chose this file for the session: it is raw data for the task -- check its make-up "
            "below, keep the rows that fit the benchmark, and write them in the benchmark's format.\n"
            + (f"\n{makeup}\n\n" if makeup else "")
            + f"- Default converter (`ftagent datasets show {info.name} --code`): {convert}; it reads "
            f"`{INFO_FILE}` and `{info.file_name}` in this folder and drops rows without a text question and "
            "answer.\n"
            f"- `dataset_info.json` here registers `{info.file_name}` for LLaMA-Factory as it is.\n")
