"""Do a model folder's weights fit its ``config.json``? Run in the tool env by :mod:`.weights` (issue 43).

``python weights_script.py MODEL_DIR [ADAPTER_DIR]`` prints one JSON line and exits 0 (checked) or 1 (it
could not be checked: the error in ``error``). Nothing is loaded: the config's class is instantiated on
PyTorch's ``meta`` device (shapes, no memory) and the checkpoint's tensor names and shapes come from the
safetensors headers (``safe_open(...).get_slice(name).get_shape()``; ``.bin`` files through
``torch.load(map_location="meta")``).

The comparison is transformers' own, as ``PreTrainedModel.from_pretrained`` does it when OpenCompass's
HuggingFace model loads the folder (``opencompass/models/huggingface_above_v4_33.py: _load_model``:
``AutoModelForCausalLM.from_pretrained``, ``AutoModel`` on ``ValueError``): transformers 4.57
``modeling_utils.PreTrainedModel._load_pretrained_model`` — the base-model prefix rule
(``loading_base_model_from_task_state_dict`` / ``loading_task_model_from_base_state_dict``), the key renaming
(``_get_key_renaming_mapping``; VLMs' ``_checkpoint_conversion_mapping`` as ``from_pretrained`` sets it),
``_find_missing_and_unexpected_keys`` (tied weights, non-persistent buffers) and
``_adjust_missing_and_unexpected_keys`` (the class's ``_keys_to_ignore_on_load_*``); a shape mismatch is
what ``load_state_dict`` refuses (``_find_mismatched_keys``' rule, compared here directly).

A LoRA adapter (``ADAPTER_DIR``: ``adapter_model.safetensors`` / ``.bin``): every LoRA tensor must land on a
module of the base model with the shape PEFT gives it (``lora_A``: ``[r, in_features]``, ``lora_B``:
``[out_features, r]``; embeddings: ``lora_embedding_A`` ``[r, num_embeddings]``, ``lora_embedding_B``
``[embedding_dim, r]``), and a ``modules_to_save`` tensor the base's shape: PEFT's
``set_peft_model_state_dict`` loads with ``strict=False``, so a key that lands nowhere is dropped silently and
the base model is scored in its place.
"""

import json
import re
import sys
from pathlib import Path

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_model.bin")


def _shards(folder):
    for index in INDEX_FILES:
        if (folder / index).is_file():
            weight_map = json.loads((folder / index).read_text(encoding="utf-8")).get("weight_map") or {}
            return sorted({folder / name for name in weight_map.values()})
    return [folder / name for name in WEIGHT_FILES if (folder / name).is_file()]


def _tensor_shapes(files):
    """name -> shape over the files (safetensors: the header only; .bin: storage on the meta device)."""
    import torch
    from safetensors import safe_open

    shapes = {}
    for path in files:
        if path.suffix == ".safetensors":
            with safe_open(str(path), framework="pt") as fh:
                for name in fh.keys():
                    shapes[name] = list(fh.get_slice(name).get_shape())
        else:
            state = torch.load(str(path), map_location="meta", weights_only=True, mmap=True)
            shapes.update({name: list(t.shape) for name, t in state.items()})
    return shapes


def _meta_model(folder):
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(folder))
    with torch.device("meta"):
        try:
            return AutoModelForCausalLM.from_config(config)
        except ValueError:  # as OpenCompass falls back
            return AutoModel.from_config(config)


def check_model(folder):
    """transformers' missing / unexpected / mismatched keys of the folder's checkpoint for its config."""
    from transformers import modeling_utils

    model = _meta_model(folder)
    shapes = _tensor_shapes(_shards(folder))
    original = list(shapes)
    prefix = model.base_model_prefix
    has_prefix_module = any(k.startswith(prefix) for k in original) if prefix else False
    expects_prefix_module = hasattr(model, prefix) if prefix else False
    task_from_base = not has_prefix_module and expects_prefix_module
    base_from_task = has_prefix_module and not expects_prefix_module
    key_mapping = None
    if any(name in c.__name__.lower() for c in type(model).__mro__[:-1] for name in modeling_utils.VLMS):
        key_mapping = getattr(model, "_checkpoint_conversion_mapping", None)
    mapping = model._get_key_renaming_mapping(original, key_mapping, base_from_task, task_from_base)
    missing, unexpected = modeling_utils._find_missing_and_unexpected_keys(
        model, original, list(mapping.values()), base_from_task, None)
    missing, unexpected = model._adjust_missing_and_unexpected_keys(missing, unexpected, task_from_base)
    expected = {k: list(v.shape) for k, v in model.state_dict().items()}
    mismatched = [[old, shapes[old], expected[new]] for old, new in mapping.items()
                  if new in expected and shapes[old] != expected[new]]
    return {"architecture": type(model).__name__, "checkpoint_tensors": len(original),
            "model_tensors": len(expected), "missing": sorted(missing), "unexpected": sorted(unexpected),
            "mismatched": mismatched}, model


_LORA = re.compile(r"^base_model\.model\.(?P<module>.+)\.(?P<kind>lora_A|lora_B|lora_embedding_A|lora_embedding_B)"
                   r"(?:\.[^.]+)?(?:\.weight)?$")


def check_adapter(adapter, model):
    """Every adapter tensor lands on a base module with PEFT's shape (see the module docstring)."""
    files = [adapter / name for name in ADAPTER_FILES if (adapter / name).is_file()]
    shapes = _tensor_shapes(files)
    modules = dict(model.named_modules())
    params = {k: list(v.shape) for k, v in model.state_dict().items()}
    unexpected, mismatched = [], []
    for name, shape in shapes.items():
        lora = _LORA.match(name)
        if lora is None:  # modules_to_save: "base_model.model.<module>.weight" (a full copy of a base tensor)
            target = name.removeprefix("base_model.model.").replace(".modules_to_save.default.", ".")
            if target not in params:
                unexpected.append(name)
            elif params[target] != shape:
                mismatched.append([name, shape, params[target]])
            continue
        module = modules.get(lora["module"])
        if module is None:
            unexpected.append(name)
            continue
        kind, rank = lora["kind"], shape[0] if lora["kind"].endswith("A") else shape[-1]
        if kind in ("lora_A", "lora_B") and hasattr(module, "in_features"):
            want = [rank, module.in_features] if kind == "lora_A" else [module.out_features, rank]
        elif kind.startswith("lora_embedding") and hasattr(module, "num_embeddings"):
            want = [rank, module.num_embeddings] if kind.endswith("A") else [module.embedding_dim, rank]
        else:
            unexpected.append(name)  # a LoRA tensor on a module PEFT cannot adapt that way
            continue
        if list(shape) != want:
            mismatched.append([name, shape, want])
    return {"adapter_tensors": len(shapes), "adapter_unexpected": sorted(unexpected),
            "adapter_mismatched": mismatched}


def main(argv):
    if len(argv) not in (1, 2):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        out, model = check_model(Path(argv[0]))
        if len(argv) == 2:
            out.update(check_adapter(Path(argv[1]), model))
    except Exception as exc:  # noqa: BLE001 - reported to ftagent as "could not be checked"
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:2000]}), flush=True)
        return 1
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
