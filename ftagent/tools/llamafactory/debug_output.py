"""Disk hygiene for the validate step's micro-batch output (``validate/loop_<n>/micro/run/output``).

LLaMA-Factory saves the model at the end of every training run, whatever ``save_strategy`` says
(``llamafactory/train/sft/workflow.py`` 0.9.5, lines 120-122: ``if training_args.do_train: ...
trainer.save_model()``; the pt/dpo/kto/rm workflows do the same), so each micro-batch leaves a full
copy of the weights: 15 GB for a 7B model in bf16, more in fp32 or with ZeRO ``global_step*``
shards, in every loop's workspace. Nothing reads those weights: the validator and the forecast read
the loss history (``trainer_state.json``, ``trainer_log.jsonl``), nothing else. :func:`drop_weights`
removes the weights and checkpoints once the micro-batch has been read and keeps every small file.
"""

from __future__ import annotations

import shutil
from pathlib import Path

# model weights, optimizer states and their shard indexes (an index without its shards would make the
# folder look like a loadable model)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".msgpack", ".h5",
                   ".safetensors.index.json", ".bin.index.json")
# HF Trainer's save_steps folders and DeepSpeed's ZeRO checkpoint folders
CHECKPOINT_DIRS = ("checkpoint-*", "global_step*")


def is_weight_file(name: str) -> bool:
    """True for a file name of model weights, optimizer state or a weight shard index."""
    return name.endswith(WEIGHT_SUFFIXES)


def _size(path: Path) -> int:
    if path.is_symlink() or not path.is_dir():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def drop_weights(output_dir: Path) -> int:
    """Remove weights and checkpoint folders under ``output_dir``; return the bytes freed.

    Kept: ``trainer_state.json``, ``trainer_log.jsonl``, ``*_results.json``, configs, tokenizer files,
    logs and TensorBoard events. Symlinks are removed, never followed.
    """
    root = Path(output_dir)
    if not root.is_dir() or root.is_symlink():
        return 0
    freed = 0
    for pattern in CHECKPOINT_DIRS:
        for folder in root.glob(pattern):
            if folder.is_dir() and not folder.is_symlink():
                freed += _size(folder)
                shutil.rmtree(folder, ignore_errors=True)
    for path in sorted(root.rglob("*")):
        if is_weight_file(path.name) and (path.is_symlink() or path.is_file()):
            freed += _size(path)
            path.unlink(missing_ok=True)
    return freed
