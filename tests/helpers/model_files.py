"""Model folders written byte by byte for the integrity guard's tests: safetensors files (single, sharded with
an index, or a PEFT adapter) with builtin/tiny-qwen2's tensor names and shapes, and its tokenizer files.

The layout is the real one (``model.embed_tokens.weight`` [512, 128], two layers of q/k/v/o projections with
their zero-initialised biases, the MLP, the norms: 26 tensors, 558k values; ``tie_word_embeddings``), the
values seeded normals (norms: ones; biases: zeros in the base), so an honest fine-tune is the base plus
noise and another checkpoint is another seed.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

HIDDEN, VOCAB, INTER, KV = 128, 512, 512, 64
Tensors = dict[str, np.ndarray]


def qwen2_shapes(layers: int = 2) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (VOCAB, HIDDEN), "model.norm.weight": (HIDDEN,)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (HIDDEN,), p + "post_attention_layernorm.weight": (HIDDEN,),
            p + "mlp.down_proj.weight": (HIDDEN, INTER), p + "mlp.gate_proj.weight": (INTER, HIDDEN),
            p + "mlp.up_proj.weight": (INTER, HIDDEN),
            p + "self_attn.q_proj.weight": (HIDDEN, HIDDEN), p + "self_attn.q_proj.bias": (HIDDEN,),
            p + "self_attn.k_proj.weight": (KV, HIDDEN), p + "self_attn.k_proj.bias": (KV,),
            p + "self_attn.v_proj.weight": (KV, HIDDEN), p + "self_attn.v_proj.bias": (KV,),
            p + "self_attn.o_proj.weight": (HIDDEN, HIDDEN)})
    return shapes


def base_weights(seed: int) -> Tensors:
    rng = np.random.default_rng(seed)
    out: Tensors = {}
    for name, shape in qwen2_shapes().items():
        if name.endswith("norm.weight"):
            out[name] = np.ones(shape, np.float32)
        elif name.endswith(".bias"):
            out[name] = np.zeros(shape, np.float32)
        else:
            out[name] = rng.normal(0, 0.02, shape).astype(np.float32)
    return out


def finetuned(base: Tensors, relative: float, seed: int) -> Tensors:
    """The base plus noise of ``relative`` times the weights' scale (biases move off zero)."""
    rng = np.random.default_rng(seed)
    return {k: (v + rng.normal(0, 0.02 * relative, v.shape)).astype(np.float32) for k, v in base.items()}


def write_safetensors(path: Path, tensors: Tensors, dtype: str = "F32") -> Path:
    header: dict[str, dict] = {"__metadata__": {"format": "pt"}}
    blobs, offset = [], 0
    for name, value in tensors.items():
        raw = np.ascontiguousarray(value, dtype=np.float32)
        data = (raw.view(np.uint32) >> 16).astype("<u2").tobytes() if dtype == "BF16" else raw.astype("<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(value.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))
    return path


def write_sharded(folder: Path, tensors: Tensors, shards: int = 2) -> Path:
    """``model-0000i-of-0000n.safetensors`` and ``model.safetensors.index.json``, as save_pretrained writes."""
    names = list(tensors)
    weight_map = {}
    for i in range(shards):
        part = names[i::shards]
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(folder / file, {n: tensors[n] for n in part})
        weight_map.update({n: file for n in part})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder


TOKENIZER_CONFIG = {
    "added_tokens_decoder": {str(i): {"content": t, "special": True} for i, t in
                             enumerate(("<|endoftext|>", "<|im_start|>", "<|im_end|>"))},
    "additional_special_tokens": ["<|im_start|>", "<|im_end|>"], "bos_token": None,
    "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>", "model_max_length": 512,
    "pad_token": "<|endoftext|>", "padding_side": "right", "tokenizer_class": "PreTrainedTokenizerFast",
}
TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
CONFIG = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": HIDDEN,
          "num_hidden_layers": 2, "vocab_size": VOCAB, "intermediate_size": INTER, "num_attention_heads": 4,
          "num_key_value_heads": 2, "tie_word_embeddings": True, "eos_token_id": 2, "pad_token_id": 0}


def write_model(folder: Path, tensors: Tensors | None, *, sharded: bool = False, dtype: str = "F32",
                tokenizer_config: dict | None = None, generation: dict | None = None) -> Path:
    """A model folder: config, generation config, tokenizer files, chat template and the weights."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(CONFIG))
    (folder / "generation_config.json").write_text(json.dumps(
        generation or {"eos_token_id": 2, "max_new_tokens": 16, "pad_token_id": 0, "transformers_version": "4.57.6"}))
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0, "b": 1}}}))
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config or TOKENIZER_CONFIG))
    (folder / "special_tokens_map.json").write_text(json.dumps(
        {"additional_special_tokens": ["<|im_start|>", "<|im_end|>"], "eos_token": "<|im_end|>",
         "pad_token": "<|endoftext|>"}))
    (folder / "chat_template.jinja").write_text(TEMPLATE)
    if tensors is not None:
        if sharded:
            write_sharded(folder, tensors)
        else:
            write_safetensors(folder / "model.safetensors", tensors, dtype)
    return folder


def write_adapter(folder: Path, factors: Tensors, config: dict) -> Path:
    """A PEFT adapter folder (``adapter_config.json`` + ``adapter_model.safetensors``)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4, "lora_alpha": 8, **config}))
    write_safetensors(folder / "adapter_model.safetensors", factors)
    return folder


def lora_factors(modules: list[str], rank: int, seed: int, scale: float = 0.02) -> Tensors:
    """LoRA A/B of the named base modules (``model.layers.0.self_attn.q_proj``), peft's key names."""
    rng = np.random.default_rng(seed)
    shapes = qwen2_shapes()
    out: Tensors = {}
    for module in modules:
        rows, cols = shapes[f"{module}.weight"]
        out[f"base_model.model.{module}.lora_A.weight"] = rng.normal(0, scale, (rank, cols)).astype(np.float32)
        out[f"base_model.model.{module}.lora_B.weight"] = rng.normal(0, scale, (rows, rank)).astype(np.float32)
    return out


def guard_for(root: Path, base: Path, baseline_configs: dict[str, str] | None = None):
    """The session's integrity guard over ``base`` (benchmark folder and references under ``root``), started."""
    from ftagent.core.types import ModelInfo, ScenarioInfo
    from ftagent.integrity.guard import IntegrityGuard

    scenario = ScenarioInfo(benchmark="redteam_bench", base_model="base", base_model_path=str(base),
                            model_info=ModelInfo(name="base", path=str(base)), file_path=str(root / "files"),
                            workspace_root=str(root / "ws"))
    (root / "files" / "benchmarks" / "redteam_bench").mkdir(parents=True, exist_ok=True)
    guard = IntegrityGuard(scenario, input_columns=["question"], answer_field="answer",
                           references_file=root / "session" / "integrity_references.json",
                           baseline_configs=baseline_configs or {})
    guard.record_start()
    return guard



class GuardedBase(NamedTuple):
    """What a guard test starts from: its folder, the base's tensors and files, and the guard over them, started."""

    root: Path
    weights: Tensors
    base: Path
    guard: Any  # ftagent.integrity.guard.IntegrityGuard (imported late, as in guard_for)


def guarded_base(root: Path, seed: int = 2, **model_files: Any) -> GuardedBase:
    """``base_weights(seed)`` written to ``root/base`` (``model_files``: :func:`write_model`'s keywords, e.g. a
    ``tokenizer_config``) and the session's guard over that base, its references recorded."""
    weights = base_weights(seed)
    base = write_model(root / "base", weights, **model_files)
    return GuardedBase(root, weights, base, guard_for(root, base))

#: the CPU demo's aggressive full fine-tune (learning rate 1e-3 for 300 steps): its bound (0.77 per value) covers
#: the honest variations here, fine-tunes up to twice the weights' scale (ftagent.integrity.movement)
DEMO_RUN = {"finetuning_type": "full", "learning_rate": 1.0e-3, "lr_scheduler_type": "constant", "max_steps": 300}


def write_trainer_state(folder: Path, steps: int, log: list[dict] | None = None) -> Path:
    """``trainer_state.json`` as transformers' ``Trainer.save_state`` writes it (the fields the guard reads)."""
    path = Path(folder) / "trainer_state.json"
    path.write_text(json.dumps({"global_step": steps, "max_steps": steps, "epoch": 1.0, "log_history": log or []}))
    return path


def candidate(folder: Path, *, run: dict | None = None, **artefacts: str):
    """The experiment of a finished loop whose model is ``folder`` (validated output beside it, if given),
    trained with ``run`` (default :data:`DEMO_RUN`; its trainer_state.json is written unless one is there)."""
    from ftagent.core.trace import Experiment

    config = dict(run or DEMO_RUN)
    if not (Path(folder) / "trainer_state.json").exists():
        write_trainer_state(folder, int(config.get("max_steps", 300)))
    return Experiment(loop=0, artefacts={"model": str(folder), "output_dir": str(folder), **artefacts}, val_score=1.0,
                      config=config)


def trained(folder: Path, run: dict | None = None):
    """The :class:`~ftagent.integrity.trained_run.TrainedRun` of ``folder`` trained with ``run`` from the base
    (for the checks called directly)."""
    from ftagent.integrity.trained_run import trained_run

    config = dict(run or DEMO_RUN)
    if not (Path(folder) / "trainer_state.json").exists():
        write_trainer_state(folder, int(config.get("max_steps", 300)))
    return trained_run(config, Path(folder), base=Path("/nonexistent-base"), start=None, validated=[])
