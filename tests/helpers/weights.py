"""Weight files for tests' stand-in model folders: real safetensors files (header and data), tiny.

Every evaluation and every ``--base-model`` folder is checked for whole weight files
(:mod:`ftagent.models.checkpoint`, issue 43): a stand-in ``model.safetensors`` must be a real one. ``tag``
becomes the tensor's bytes, so two tags give two different files (and cache digests).
"""

from __future__ import annotations

from pathlib import Path


def safetensors_bytes(tag: bytes = b"\0") -> bytes:
    """A safetensors file holding one uint8 tensor ``w`` with the bytes of ``tag``."""
    import numpy as np
    from safetensors.numpy import save

    return save({"w": np.frombuffer(tag or b"\0", dtype=np.uint8).copy()}, metadata={"format": "pt"})


def write_weights(path: Path, tag: bytes = b"\0") -> Path:
    """Write :func:`safetensors_bytes` to ``path`` (its folder created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(safetensors_bytes(tag))
    return path


def answer_weights_check(cmd, log_file) -> object | None:
    """For a stand-in runner: the tool env's answer to ftagent's weights check
    (``ftagent/tools/opencompass/weights_script.py``) for a model whose weights fit its config — the verdict
    line it prints; None for any other command. Stand-in models are not real architectures, so a stand-in
    runner that models OpenCompass answers this one command as the tool env does for a fitting model."""
    import json

    from ftagent.runners.base import RunResult

    if len(cmd) < 2 or not str(cmd[1]).endswith("weights_script.py"):
        return None
    verdict = {"architecture": "StandIn", "checkpoint_tensors": 1, "model_tensors": 1, "missing": [],
               "unexpected": [], "mismatched": []}
    if log_file is not None:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        Path(log_file).write_text(json.dumps(verdict) + "\n", encoding="utf-8")
    return RunResult(exit_code=0, duration_s=0.0, log_file=str(log_file) if log_file else None)
