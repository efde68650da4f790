"""What LLaMA-Factory trains on of one ``data.json`` row: the texts the contamination scan reads (issue 39, red
team B3: the scan read ``instruction``/``input``/``output`` only; an item copied into ``history`` or ``system``
was trained on and never compared).

The facts come from LLaMA-Factory (0.9.5, the tool env), not from a list of our own:

* ftagent registers every ``data.json`` with ``formatting: alpaca`` and the columns of :func:`dataset_columns`
  (``tools.llamafactory.config.write_dataset_info`` writes them; the roles are ``DatasetAttr``'s,
  llamafactory/data/parser.py);
* ``AlpacaDatasetConverter.__call__`` (llamafactory/data/converter.py) turns a row into ``_prompt``: a user and
  an assistant turn per ``history`` pair ``[old_prompt, old_response]`` (when the column is a list), then one
  user turn ``"\\n".join`` of the non-empty ``instruction`` and ``input``; ``_response``: ``[output]`` (SFT, KTO,
  and GRPO's gold: tools/trl/grpo_script.py), or ``[chosen, rejected]`` (``ranking``); ``_system``: the row's
  ``system`` value;
* the template renders ``system or default_system`` (llamafactory/data/template.py ``Template._encode``), and a
  ``default_system`` in train.yaml replaces the template's (``get_template_and_fix_tokenizer``); with
  ``mask_history: false`` (the default) every history answer is trained. The config's ``default_system`` is
  therefore scanned as well (:func:`ftagent.integrity.training_data.contamination_check` and the validate step).

:func:`trained_row` reads a row the way the converter does, with every column some stage maps (``output``,
``chosen`` and ``rejected`` together: the scan does not know the stage, and a column one stage does not train
can only make it stricter). ``tests/unit/test_scan_trained_fields.py`` runs LLaMA-Factory's own converters (Alpaca rows of
every stage, a ShareGPT user file) and checks that their texts and these are the same.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: LLaMA-Factory's ``DatasetAttr`` role → the data.json column ftagent maps to it, by data format
#: (:mod:`ftagent.core.stage_specs` ``DataFormat``); ``kto_tag`` is a boolean, never text
BASE_COLUMNS: dict[str, dict[str, str]] = {
    "alpaca": {"prompt": "instruction", "query": "input", "response": "output"},
    "pairwise": {"prompt": "instruction", "query": "input", "chosen": "chosen", "rejected": "rejected"},
    "kto": {"prompt": "instruction", "query": "input", "response": "output", "kto_tag": "kto_tag"},
}
#: columns mapped when a row carries them (unmapped, LLaMA-Factory would silently train without them)
OPTIONAL_COLUMNS = ("system", "history")
#: every text column any stage maps: what the scan reads
TEXT_COLUMNS = ("instruction", "input", "output", "chosen", "rejected", "system", "history")


def dataset_columns(data_format: str, present: Iterable[str]) -> dict[str, str]:
    """The ``columns`` of a data.json's ``dataset_info.json`` entry: the format's own, plus ``system`` and
    ``history`` when some row carries them (``present``: every key of every row)."""
    columns = dict(BASE_COLUMNS[data_format])
    keys = set(present)
    columns.update({key: key for key in OPTIONAL_COLUMNS if key in keys})
    return columns


@dataclass(frozen=True)
class Turn:
    """One user turn and the answers trained on it (several for a preference pair)."""

    prompt: str
    answers: tuple[str, ...]
    glued: str = ""  # instruction and input joined without the newline, when a number is cut across them


@dataclass(frozen=True)
class TrainedRow:
    """A row as LLaMA-Factory trains it: its system text and its turns, history first."""

    system: str
    turns: tuple[Turn, ...]

    def prompts(self) -> list[str]:
        """Every user text (and its glued form), the system text first when there is one."""
        out = [self.system] if self.system else []
        for turn in self.turns:
            out += [t for t in (turn.prompt, turn.glued) if t]
        return out

    def texts(self) -> list[str]:
        """Every trained text: the prompts and every answer."""
        return self.prompts() + [a for turn in self.turns for a in turn.answers if a]


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _history(value: Any) -> list[Turn]:
    if not isinstance(value, list):  # the converter reads a list only
        return []
    turns = []
    for pair in value:
        if isinstance(pair, list | tuple) and len(pair) == 2:
            turns.append(Turn(_text(pair[0]), (_text(pair[1]),)))
        else:  # LLaMA-Factory cannot unpack it (the run fails); its text is read all the same
            turns.append(Turn(_text(pair), ()))
    return turns


def _glued(instruction: str, query: str) -> str:
    """``instruction + input`` when the first ends and the second starts with a digit: "What is 2" + "5 + 68?"
    renders as "2\\n5", which a tokenizer that splits digits reads one newline away from "25" (red team B3)."""
    head, tail = instruction.rstrip(), query.lstrip()
    return head + tail if head[-1:].isdigit() and tail[:1].isdigit() else ""


def trained_row(row: Mapping[str, Any]) -> TrainedRow:
    """``row`` as :class:`TrainedRow` (see the module docstring); a row that is not a mapping has no text."""
    if not isinstance(row, Mapping):
        return TrainedRow("", ())
    instruction, query = _text(row.get("instruction")), _text(row.get("input"))
    prompt = "\n".join(t for t in (instruction, query) if t)  # AlpacaDatasetConverter: "prompt\nquery"
    answers = tuple(_text(row.get(k)) for k in ("output", "chosen", "rejected") if row.get(k) not in (None, ""))
    turns = (*_history(row.get("history")), Turn(prompt, answers, _glued(instruction, query)))
    return TrainedRow(_text(row.get("system")), turns)
