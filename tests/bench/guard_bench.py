"""The integrity guard's cost (issue 39 item 3: every tensor is compared, streamed).

* **per loop of the demo** (the ``demo`` section, :mod:`tests.bench.demo_bench`): the ``integrity`` event's
  ``duration_s`` over the loop's training runs' time; target <= 0.05;
* **here**: a synthetic sharded BF16 checkpoint with Qwen2.5-7B's layer shapes (hidden 3584, MLP 18944, 4 KV
  heads; ``--quick``: 1 layer, 0.47 GB; else 2 layers, 0.93 GB, in two shards with an index) and a fine-tune
  of it (the base plus noise): the fingerprint of the base (once per session, before loop 0), the full-model
  check of the candidate (once per loop: both read side by side; the cosine and the movement bound in one
  pass), and a rank-16 LoRA adapter's check (the cosine bound needs no base read; the factors are held to the
  movement bound). MB/s is of the candidate's bytes; the files were just written, so the page
  cache is warm (a cold read is bounded by the disk instead). The 7B figure is arithmetic: Qwen2.5-7B's
  7.62e9 parameters in BF16 (15.2 GB) over the measured rate.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from tests.bench.common import BenchResults

SECTION = "guard"
HIDDEN, INTER, KV = 3584, 18944, 512
QWEN7B_BYTES = 7.62e9 * 2  # Qwen2.5-7B: 7.62e9 parameters, BF16
#: the run the candidate claims (a 7B full fine-tune's usual schedule): a movement bound of 0.16 per value
RUN = {"finetuning_type": "full", "learning_rate": 2e-5, "lr_scheduler_type": "cosine", "warmup_ratio": 0.03}
RUN_STEPS = 3000
LAYER = {"self_attn.q_proj.weight": (HIDDEN, HIDDEN), "self_attn.k_proj.weight": (KV, HIDDEN),
         "self_attn.v_proj.weight": (KV, HIDDEN), "self_attn.o_proj.weight": (HIDDEN, HIDDEN),
         "mlp.gate_proj.weight": (INTER, HIDDEN), "mlp.up_proj.weight": (INTER, HIDDEN),
         "mlp.down_proj.weight": (HIDDEN, INTER), "input_layernorm.weight": (HIDDEN,)}


def _bf16(values: np.ndarray) -> bytes:
    return (values.astype(np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()


def _write(path: Path, tensors: dict[str, bytes], shapes: dict[str, tuple[int, ...]]) -> None:
    header: dict[str, object] = {}
    offset = 0
    for name, raw in tensors.items():
        header[name] = {"dtype": "BF16", "shape": list(shapes[name]), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as fh:
        fh.write(len(head).to_bytes(8, "little") + head)
        for raw in tensors.values():
            fh.write(raw)


def write_checkpoints(folder: Path, layers: int) -> tuple[Path, Path, int]:
    """(base, candidate, bytes of one checkpoint): each layer in its own shard, with an index."""
    rng = np.random.default_rng(0)
    base, cand = folder / "base", folder / "cand"
    total = 0
    for out in (base, cand):
        out.mkdir(parents=True, exist_ok=True)
    weight_map = {}
    for layer in range(layers):
        shard = f"model-{layer + 1:05d}-of-{layers:05d}.safetensors"
        names = {f"model.layers.{layer}.{k}": v for k, v in LAYER.items()}
        b_raw, c_raw = {}, {}
        for name, shape in names.items():
            w = np.ones(shape, np.float32) if len(shape) == 1 else rng.standard_normal(shape, np.float32) * 0.02
            b_raw[name] = _bf16(w)
            c_raw[name] = _bf16(w + rng.standard_normal(shape, np.float32) * 0.002)
            weight_map[name] = shard
            total += len(b_raw[name])
        _write(base / shard, b_raw, names)
        _write(cand / shard, c_raw, names)
    for out in (base, cand):
        (out / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return base, cand, total


def write_adapter(folder: Path, layers: int, rank: int = 16) -> Path:
    rng = np.random.default_rng(1)
    tensors, shapes = {}, {}
    for layer in range(layers):
        for key, shape in LAYER.items():
            if len(shape) != 2:
                continue
            module = f"base_model.model.model.layers.{layer}.{key[:-len('.weight')]}"
            for part, dims in (("lora_A", (rank, shape[1])), ("lora_B", (shape[0], rank))):
                tensors[f"{module}.{part}.weight"] = _bf16(rng.standard_normal(dims, np.float32) * 0.01)
                shapes[f"{module}.{part}.weight"] = dims
    folder.mkdir(parents=True, exist_ok=True)
    _write(folder / "adapter_model.safetensors", tensors, shapes)
    (folder / "adapter_config.json").write_text(json.dumps({"r": rank, "lora_alpha": 2 * rank}))
    return folder


def run(res: BenchResults, work: Path, quick: bool) -> None:
    """Write the checkpoints, time the fingerprint and the checks, record MB/s and the 7B arithmetic."""
    from ftagent.integrity.tensor_compare import WORKERS
    from ftagent.integrity.trained_run import trained_run
    from ftagent.integrity.weight_prints import fingerprint
    from ftagent.integrity.weights import weight_check

    layers = 1 if quick else 2
    base, cand, size = write_checkpoints(work / "guard", layers)
    start, cpu = time.monotonic(), time.process_time()
    prints = fingerprint(base)
    fp_s, fp_cpu = time.monotonic() - start, time.process_time() - cpu
    for folder in (cand, work / "guard" / "adapter"):  # the trainer's record: 3,000 steps at 2e-5, cosine
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": RUN_STEPS, "max_steps": RUN_STEPS}))
    run = trained_run(RUN, cand, base=base, start=None, validated=[])
    start, cpu = time.monotonic(), time.process_time()
    verdict = weight_check(prints, cand, run=run)
    check_s, check_cpu = time.monotonic() - start, time.process_time() - cpu
    assert verdict.passed, verdict.detail
    adapter = write_adapter(work / "guard" / "adapter", layers)
    start = time.monotonic()
    lora = weight_check(prints, adapter, run=trained_run({**RUN, "finetuning_type": "lora"}, adapter, base=base,
                                                          start=None, validated=[]))
    lora_s = time.monotonic() - start
    assert lora.passed, lora.detail
    mb = size / 1e6
    res.add(SECTION, "checkpoint size (BF16, sharded)", mb, "MB", f"{layers} Qwen2.5-7B-shaped layer(s), {len(prints.tensors)} tensors")
    res.add(SECTION, "fingerprint of the base (once per session)", fp_s, "s",
            f"{mb / fp_s:.0f} MB/s; {fp_cpu:.2f} CPU-s ({mb / fp_cpu:.0f} MB per CPU-s)")
    res.add(SECTION, "full-model check of a candidate (per loop)", check_s, "s",
            f"{mb / check_s:.0f} MB/s of candidate bytes (the base read alongside); {check_cpu:.2f} CPU-s "
            f"({mb / check_cpu:.0f} MB per CPU-s); {verdict.detail[:100]}")
    res.add(SECTION, "LoRA adapter check, rank 16 (per loop)", lora_s, "s", lora.detail[:120])
    res.add(SECTION, "7B full model (15.2 GB BF16): check per loop, by arithmetic", QWEN7B_BYTES / (size / check_s), "s",
            "measured MB/s; a loop that trains at least 20x this long keeps the guard at <= 0.05 of it")
    res.add(SECTION, "7B base fingerprint (once), by arithmetic", QWEN7B_BYTES / (size / fp_s), "s")
    res.add(SECTION, "7B full model check, CPU-seconds by arithmetic", QWEN7B_BYTES / (size / check_cpu), "CPU-s",
            f"spread over up to {WORKERS} cores (tensors in parallel)")
