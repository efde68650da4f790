"""Which ``train.yaml`` keys a plan may set: values, never paths (issue 39, red team breaches B1 and B2).

A key whose value names a file or a folder decides what the trainer reads or writes: ``resume_from_checkpoint``
made LLaMA-Factory start from weights the data script had written into the workspace (B1; transformers
``Trainer._load_from_checkpoint``), ``tokenized_path`` and ``cache_dir`` make it load a dataset other than the
scanned ``data.json`` (B2's class). The rule is an allowlist, so a key nobody thought of is refused, not kept:

* **system keys** — what ftagent sets (or removes) in every run: the paths (``model_name_or_path``,
  ``output_dir``, ``dataset_dir``, ``dataset``, ``deepspeed``; GRPO's ``dataset_file``), defaults.yaml's
  ``system_managed``, the tracker's keys, the stage's. They pass the filter and the config manager replaces them.
* **value keys** — a parameter whose type in LLaMA-Factory's (or TRL's) own dataclass admits only booleans,
  numbers, ``None``, a list of those or a ``Literal`` of choices: the plan's.
* **text keys** — string-typed parameters that name no file (``template``, ``lora_target``, ``optim`` ...), each
  listed in ``configs/llamafactory/defaults.yaml`` (``text_keys``) after reading what upstream does with it: the
  plan's.
* **every other key is refused**: written with a value, validation fails with CONFIG naming it (the coder's next
  round sees why); written empty (``resume_from_checkpoint: null``, as LLaMA-Factory's example configs do), it is
  dropped with a note. A string-typed key a new LLaMA-Factory adds is therefore refused until someone lists it.

What the trainer can read at all is the other half of the rule (:mod:`ftagent.runners.fresh`): even a path that
got through would name a folder its sandbox does not have.
"""

from __future__ import annotations

import re
from typing import Any

from ftagent.tools.llamafactory.catalogue import LFParam

#: the type words (of a dataclass field's annotation, as the catalogue writes it) that admit no free text
VALUE_WORDS = frozenset({"bool", "int", "float", "None", "NoneType", "Literal", "list", "Optional", "Union"})
_LITERAL = re.compile(r"Literal\[[^\]]*\]")
_WORD = re.compile(r"[A-Za-z_][\w.]*")

REFUSED_REASON = "names a file, a folder or an account: only the system sets those"
EMPTY_REASON = "empty; the system sets paths"


def is_value_type(type_name: str) -> bool:
    """True when the annotation admits only booleans, numbers, None, lists of those or Literal choices
    (``Optional[int]``, ``float | None``, ``Literal['lora', 'full']``, ``list[float]``); False for ``str``,
    ``dict``, ``Path``, ``Any``, an enum or any other class (those are decided by name: text keys)."""
    words = _WORD.findall(_LITERAL.sub("Literal", type_name or ""))
    return bool(words) and all(word in VALUE_WORDS for word in words)


def is_empty(value: Any) -> bool:
    """A value that asks for nothing (``null``, ``""``, ``false``, ``[]``, ``{}``)."""
    return value is None or value is False or (isinstance(value, (str, list, dict)) and not value)


def planner_may_set(name: str, param: LFParam, *, text_keys: frozenset[str], system_keys: frozenset[str]) -> bool:
    """Whether the plan's value of ``name`` may reach a run: a system key (replaced later), a value key, a text key."""
    return name in system_keys or name in text_keys or is_value_type(param.type)


def refused_message(refused: list[tuple[str, Any]]) -> tuple[str, str]:
    """The CONFIG failure's message and suggestion for keys the plan may not set."""
    shown = ", ".join(f"{key}: {_short(value)}" for key, value in refused[:6])
    names = ", ".join(key for key, _ in refused)
    message = (f"train.yaml sets keys that name files, folders or accounts, which only the system sets: {shown}. "
               "The trainer sees the start weights, the validated data and an empty output folder, nothing else")
    suggestion = (f"Remove {names} from train.yaml. The system sets the paths: the start weights (the hypothesis's "
                  "weights_from), the data (data.json from process_data.py), the output and the caches; training "
                  "always starts from the start weights (no checkpoint to resume).")
    return message, suggestion


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 200 else text[:197] + "..."
