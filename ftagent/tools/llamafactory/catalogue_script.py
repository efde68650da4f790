"""Dump LLaMA-Factory's parameter catalogue (standalone; runs with the tool env's python).

Usage: python catalogue_script.py OUT_DIR

Writes ``OUT_DIR/constants.json`` (version, fine-tuning methods, training stages, chat templates,
supported models), ``OUT_DIR/parameters.json`` (every dataclass field of LLaMA-Factory's argument
classes: name, type, default, help, the class that defines it, and whether the type accepts a mapping
or a list) and ``OUT_DIR/grpo_parameters.json`` (the same for TRL's ``GRPOConfig``, which the GRPO stage
runs with). No ftagent imports: this file is executed inside the tool environment.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from importlib import metadata

# This file lives in ftagent's own ``tools/llamafactory`` folder (config.py, logs.py ...): drop the script folder from the import
# path so that ``import llamafactory`` finds the real package.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]


def _type_name(tp: object) -> str:
    if isinstance(tp, str):
        text = tp
    elif isinstance(tp, type):
        text = tp.__name__
    else:
        text = repr(tp)
    return text.replace("typing.", "")


def _default(field: dataclasses.Field) -> object:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        try:
            value = field.default_factory()
        except Exception:  # noqa: BLE001 - a factory we cannot call is reported as such
            return "<factory>"
    else:
        return None
    if hasattr(value, "value") and not isinstance(value, (int, float, str, bool)):
        value = value.value  # enums
    try:
        json.dumps(value)
    except TypeError:
        return repr(value)
    return value


def _owner(cls: type, name: str) -> str:
    for klass in cls.__mro__:
        if name in getattr(klass, "__annotations__", {}):
            return klass.__name__
    return cls.__name__


def _fields(cls: type, section: str) -> list[dict]:
    rows = []
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        type_name = _type_name(field.type)
        lowered = type_name.lower()
        rows.append({
            "name": field.name,
            "type": type_name,
            "default": _default(field),
            "help": str(field.metadata.get("help", "")),
            "section": section,
            "group": _owner(cls, field.name),
            "accepts_mapping": "dict" in lowered or lowered == "any",
            "accepts_list": "list" in lowered or lowered == "any",
        })
    return rows


def main(out_dir: str) -> None:
    from llamafactory.data.template import TEMPLATES
    from llamafactory.extras import constants
    from llamafactory.hparams import (
        DataArguments,
        FinetuningArguments,
        GeneratingArguments,
        ModelArguments,
        TrainingArguments,
    )

    version = metadata.version("llamafactory")
    sections = {
        "model": ModelArguments,
        "data": DataArguments,
        "finetuning": FinetuningArguments,
        "training": TrainingArguments,
        "generating": GeneratingArguments,
    }
    parameters = []
    for section, cls in sections.items():
        parameters.extend(_fields(cls, section))
    supported = getattr(constants, "SUPPORTED_MODELS", {})
    const = {
        "llamafactory_version": version,
        "methods": list(getattr(constants, "METHODS", [])),
        "training_stages": dict(getattr(constants, "TRAINING_STAGES", {})),
        "templates": sorted(TEMPLATES.keys()),
        "supported_models": {str(k): str(v) for k, v in dict(supported).items()},
    }
    # issue 40: TRL's GRPOConfig (TRL is a LLaMA-Factory dependency), whose fields a GRPO train.yaml may set
    from trl import GRPOConfig

    grpo = {"llamafactory_version": version, "trl_version": metadata.version("trl"),
            "parameters": _fields(GRPOConfig, "grpo")}
    os.makedirs(out_dir, exist_ok=True)
    for name, payload in (("constants.json", const), ("grpo_parameters.json", grpo),
                          ("parameters.json", {"llamafactory_version": version, "parameters": parameters})):
        tmp = os.path.join(out_dir, f".{name}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, indent=1, default=str)
        os.replace(tmp, os.path.join(out_dir, name))
    print(f"llamafactory {version}: {len(parameters)} parameters, {len(const['templates'])} templates")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python catalogue_script.py OUT_DIR")
    main(sys.argv[1])
