"""LoRA adapter detection and the merge-first decision for vLLM serving."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")


def is_lora_adapter(path: Path | str) -> bool:
    """True when ``path`` holds a PEFT adapter (config or weights)."""
    return any((Path(path) / f).exists() for f in ADAPTER_FILES)


def adapter_config(path: Path | str) -> dict[str, Any]:
    """The adapter's ``adapter_config.json`` ({} when absent)."""
    cfg = Path(path) / "adapter_config.json"
    return json.loads(cfg.read_text(encoding="utf-8")) if cfg.exists() else {}


def merge_reasons(path: Path | str, *, backend: str, max_lora_rank: int = 64) -> list[str]:
    """Why the adapter must be merged before serving ([] = serve it as an adapter).

    HF (CPU) loads any adapter through ``peft_path``. vLLM cannot serve ``modules_to_save``
    (vllm issue #9280), a DoRA adapter (``use_dora``: ``PEFTHelper._validate_features`` in
    ``vllm/lora/peft_helper.py`` refuses it with "vLLM does not yet support DoRA."; PEFT's
    ``merge_and_unload`` folds the magnitude vector into the weights) nor a rank above ``max_lora_rank``.
    """
    if backend != "vllm" or not is_lora_adapter(path):
        return []
    cfg = adapter_config(path)
    reasons = []
    if cfg.get("modules_to_save"):
        reasons.append(f"modules_to_save={cfg['modules_to_save']} is not servable by vLLM")
    if cfg.get("use_dora"):
        reasons.append("DoRA (use_dora: true) is not servable by vLLM")
    rank = int(cfg.get("r") or 0)
    if rank > max_lora_rank:
        reasons.append(f"LoRA rank {rank} > max_lora_rank {max_lora_rank}")
    return reasons


MERGE_SCRIPT = '''\
import sys
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer
base, adapter, out = sys.argv[1:4]
model = AutoModelForCausalLM.from_pretrained(base, torch_dtype="auto")
model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
model.save_pretrained(out)
try:
    tok = AutoTokenizer.from_pretrained(adapter)
except Exception:
    tok = AutoTokenizer.from_pretrained(base)
tok.save_pretrained(out)
'''


def merge_command(base: Path, adapter: Path, out: Path) -> list[str]:
    """argv (tool env python) that merges ``adapter`` into ``base`` and writes ``out`` (once per model)."""
    return ["python", "-c", MERGE_SCRIPT, str(base), str(adapter), str(out)]
