"""Integrity checks on a candidate's model files against the declared base (issue 31 item 5).

Pure functions over folders on disk, no torch, no safetensors package (ftagent's own environment has
neither): a ``.safetensors`` file is an 8-byte little-endian header length, a JSON header
(``name -> {dtype, shape, data_offsets}``) and the raw little-endian tensor bytes
(https://github.com/huggingface/safetensors, README "Format"), read here with :mod:`struct` / :mod:`array`.

* :func:`tokenizer_check` — ``tokenizer.json`` byte-equal, the special tokens (``special_tokens_map.json``
  contents and ``tokenizer_config.json``'s ``added_tokens_decoder``) equal to the base's or to the validated
  debug run's.
* :func:`chat_template_check` — the chat template (``chat_template.jinja``, else ``tokenizer_config.json``'s
  ``chat_template``) equal to the base's or to one of the ``allowed`` folders' (the template LLaMA-Factory
  wrote for the validated debug run: LLaMA-Factory replaces the base's template with its own rendering
  of the validated ``template``, so an honest output's template differs from the base's).
* :func:`architecture_check` — ``config.json``'s model type and shapes equal (a LoRA adapter: its
  ``adapter_config.json``'s ``base_model_name_or_path`` is the declared base).
* :func:`weight_distance_check` — cosine similarity (and relative L2 distance ``‖c − b‖ / ‖b‖``, shown) of a
  few sampled tensors (the embeddings, the first and the last layer's attention query): a fine-tune stays
  correlated with its base, another checkpoint is not. Calibrated on ``builtin/tiny-qwen2`` (see
  :data:`MIN_WEIGHT_COSINE`).
"""

from __future__ import annotations

import json
import os
import re
import struct
from array import array
from collections.abc import Sequence
from pathlib import Path

from ftagent.core.integrity import IntegrityCheck, file_sha256

#: Below this cosine similarity on any sampled tensor the weights do not descend from the base.
#: Calibration (measured on builtin/tiny-qwen2, the CPU demo's full fine-tune: lr 1e-3, 300 steps, and
#: tests/unit/test_integrity_redteam.py): that aggressive toy fine-tune keeps cosine 0.42 on the embeddings
#: and 0.78-0.96 on the layers' weights (relative L2 distances up to 2.3: the distance alone cannot tell
#: it from another checkpoint), while an independently initialised checkpoint of the same architecture is
#: at cosine ~0 (independent draws: |cos| ~ 1/sqrt(elements), < 0.02 for the >= 4,096 elements sampled).
#: Fine-tunes of large models move weights far less (relative distance < 0.1, cosine > 0.99). 0.1 leaves
#: room on both sides. A checkpoint derived from the same base (its instruct version) is close by design
#: and is not caught by this check (docs/benchmarks.md, "Integrity guard").
MIN_WEIGHT_COSINE = 0.1
SAMPLE_ELEMENTS = 1 << 16  # at most this many elements read per tensor (64 evenly spaced runs)
_RUNS = 64
ARCH_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "vocab_size", "intermediate_size",
             "num_attention_heads", "num_key_value_heads")
_DTYPES = {"F32": 4, "F16": 2, "BF16": 2}


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _special_tokens(folder: Path) -> dict:
    """Special tokens by role, as their text (the dict and the string form written by different versions
    of transformers are the same token), plus the added tokens' table."""
    def text(value):
        if isinstance(value, dict):
            return value.get("content")
        if isinstance(value, list):
            return [text(v) for v in value]
        return value
    tokens = {k: text(v) for k, v in _json(folder / "special_tokens_map.json").items()}
    added = _json(folder / "tokenizer_config.json").get("added_tokens_decoder") or {}
    tokens["added_tokens_decoder"] = {k: text(v) for k, v in sorted(added.items())}
    return tokens


def _tokenizer_problems(reference: Path, candidate: Path) -> list[str]:
    problems = []
    r_tok, c_tok = reference / "tokenizer.json", candidate / "tokenizer.json"
    if r_tok.is_file():
        if not c_tok.is_file():
            problems.append("tokenizer.json missing")
        elif file_sha256(r_tok) != file_sha256(c_tok):
            problems.append("tokenizer.json differs")
    if (candidate / "special_tokens_map.json").is_file() or (candidate / "tokenizer_config.json").is_file():
        r, c = _special_tokens(reference), _special_tokens(candidate)
        diff = sorted(k for k in set(r) | set(c) if r.get(k) != c.get(k))
        if diff:
            problems.append("special tokens differ: " + ", ".join(diff))
    return problems


def tokenizer_check(base: Path, candidate: Path, allowed: Sequence[Path] = ()) -> IntegrityCheck:
    """``tokenizer.json`` and the special tokens equal to the base's, or to one of the ``allowed`` folders'
    (the validated debug run's: LLaMA-Factory replaces the EOS token for templates with ``replace_eos``,
    e.g. Qwen's ``<|im_end|>``, and saves the tokenizer so: LLaMA-Factory 0.9.5 ``data/template.py``
    ``Template.fix_special_tokens``, lines 173-200)."""
    base, candidate = Path(base), Path(candidate)
    if not (candidate / "tokenizer.json").is_file() and not (candidate / "tokenizer_config.json").is_file():
        return IntegrityCheck(name="tokenizer", passed=None, detail="no tokenizer files (the base's are used)")
    problems = _tokenizer_problems(base, candidate)
    if problems and any(not _tokenizer_problems(Path(p), candidate) for p in allowed
                        if (Path(p) / "tokenizer_config.json").is_file()):
        return IntegrityCheck(name="tokenizer", passed=True, detail="equal to the validated training run's")
    return IntegrityCheck(name="tokenizer", passed=not problems,
                          detail="; ".join(f"{p} (from the base's)" for p in problems)
                          or "tokenizer.json and special tokens equal the base's")


def chat_template(folder: Path) -> str | None:
    """The folder's chat template: ``chat_template.jinja`` (newer transformers), else the config's key."""
    jinja = Path(folder) / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8", errors="replace")
    value = _json(Path(folder) / "tokenizer_config.json").get("chat_template")
    return json.dumps(value, sort_keys=True) if isinstance(value, list) else value


def chat_template_check(base: Path, candidate: Path, allowed: Sequence[Path] = ()) -> IntegrityCheck:
    """The candidate's chat template equals the base's or one of the ``allowed`` folders' templates."""
    mine = chat_template(candidate)
    if mine is None:
        return IntegrityCheck(name="chat_template", passed=None, detail="no chat template saved (the base's is used)")
    accepted = {t for t in (chat_template(base), *(chat_template(p) for p in allowed)) if t is not None}
    ok = mine in accepted
    return IntegrityCheck(name="chat_template", passed=ok,
                          detail="equals the base's or the validated run's" if ok else
                          "differs from the base's and from the validated training run's template")


def _same_model(declared: str, base: Path) -> bool:
    """Whether an adapter's ``base_model_name_or_path`` names ``base`` (the same folder, or its name)."""
    if not declared:
        return True  # not recorded: nothing contradicts it
    try:
        if Path(declared).exists():
            return os.path.realpath(declared) == os.path.realpath(base)
    except OSError:
        pass
    return declared.rstrip("/").split("/")[-1] == Path(base).name


def architecture_check(base: Path, candidate: Path) -> IntegrityCheck:
    """Same model type and shapes (``config.json``); an adapter names the declared base."""
    base, candidate = Path(base), Path(candidate)
    adapter = _json(candidate / "adapter_config.json")
    if adapter:
        declared = str(adapter.get("base_model_name_or_path") or "")
        ok = _same_model(declared, base)
        return IntegrityCheck(name="architecture", passed=ok,
                              detail=f"adapter of {declared or 'an unrecorded base'}"
                                     + ("" if ok else f", not of the declared base {base.name}"))
    b, c = _json(base / "config.json"), _json(candidate / "config.json")
    if not c:
        return IntegrityCheck(name="architecture", passed=False, detail="no config.json in the candidate")
    diff = [f"{k} {c.get(k)!r} (base {b.get(k)!r})" for k in ARCH_KEYS if b.get(k) != c.get(k)]
    return IntegrityCheck(name="architecture", passed=not diff,
                          detail="; ".join(diff) or f"{c.get('model_type')} with the base's shapes")


# -- safetensors, read without the package -----------------------------------------------------------
def _header(path: Path) -> tuple[dict, int]:
    with open(path, "rb") as fh:
        (size,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(size))
    header.pop("__metadata__", None)
    return header, 8 + size


def tensor_index(folder: Path) -> dict[str, tuple[Path, dict, int]]:
    """``name -> (file, header entry, data start)`` over the folder's safetensors files (sharded or not)."""
    folder = Path(folder)
    files = sorted(folder.glob("*.safetensors"))
    out: dict[str, tuple[Path, dict, int]] = {}
    for path in files:
        try:
            header, start = _header(path)
        except (OSError, ValueError, struct.error):
            continue
        for name, entry in header.items():
            out[name] = (path, entry, start)
    return out


def _decode(raw: bytes, dtype: str) -> list[float]:
    if dtype == "F32":
        values = array("f")
        values.frombytes(raw)
    elif dtype == "BF16":  # the high half of an IEEE float32
        halves = array("H")
        halves.frombytes(raw)
        values = array("f")
        values.frombytes(array("I", (h << 16 for h in halves)).tobytes())
    else:  # F16
        return list(struct.unpack(f"<{len(raw) // 2}e", raw))
    if values.itemsize and struct.pack("=I", 1) != struct.pack("<I", 1):  # pragma: no cover - big-endian host
        values.byteswap()
    return list(values)


def sample_tensor(entry: tuple[Path, dict, int], elements: int = SAMPLE_ELEMENTS) -> list[float] | None:
    """Up to ``elements`` values of one tensor, as :data:`_RUNS` evenly spaced runs (the same positions for
    two tensors of one shape); None for a dtype other than F32/F16/BF16."""
    path, meta, start = entry
    width = _DTYPES.get(meta.get("dtype", ""))
    if width is None:
        return None
    lo, hi = meta["data_offsets"]
    count = (hi - lo) // width
    run = max(1, min(count, elements) // _RUNS)
    step = max(run, count // _RUNS)
    out: list[float] = []
    with open(path, "rb") as fh:
        for first in range(0, count, step):
            n = min(run, count - first)
            fh.seek(start + lo + first * width)
            out.extend(_decode(fh.read(n * width), meta["dtype"]))
            if len(out) >= elements:
                break
    return out


def relative_distance(candidate: list[float], base: list[float]) -> float:
    """``‖c − b‖ / ‖b‖`` (inf when the base is all zeros and the candidate is not)."""
    num = sum((c - b) ** 2 for c, b in zip(candidate, base, strict=True)) ** 0.5
    den = sum(b * b for b in base) ** 0.5
    return num / den if den else (0.0 if num == 0 else float("inf"))


def _layer(name: str) -> int | None:
    found = re.search(r"\.layers\.(\d+)\.", name)
    return int(found.group(1)) if found else None


def sampled_names(names: list[str]) -> list[str]:
    """The tensors compared: the embeddings and the first and last layer's 2-D weights (q_proj first)."""
    picked = [n for n in names if "embed_tokens" in n][:1]
    layers = sorted({i for n in names if (i := _layer(n)) is not None})
    for layer in (layers[:1] + layers[-1:]) if layers else []:
        inside = sorted(n for n in names if _layer(n) == layer and n.endswith(".weight"))
        q = [n for n in inside if "q_proj" in n]
        picked += (q or inside)[:1]
    return list(dict.fromkeys(picked)) or sorted(names)[:3]


def cosine(candidate: list[float], base: list[float]) -> float:
    """Cosine similarity of two equally long vectors (0 when either is all zeros)."""
    dot = sum(c * b for c, b in zip(candidate, base, strict=True))
    norm = (sum(c * c for c in candidate) * sum(b * b for b in base)) ** 0.5
    return dot / norm if norm else 0.0


def weight_distance_check(base: Path, candidate: Path, *, min_cosine: float = MIN_WEIGHT_COSINE) -> IntegrityCheck:
    """Every sampled tensor's cosine similarity to the base's is at least ``min_cosine``."""
    base, candidate = Path(base), Path(candidate)
    if (candidate / "adapter_config.json").is_file():
        return IntegrityCheck(name="weights", passed=None,
                              detail="LoRA adapter: checked by its declared base (architecture)")
    b_idx, c_idx = tensor_index(base), tensor_index(candidate)
    if not c_idx:
        return IntegrityCheck(name="weights", passed=False, detail="no safetensors weights in the candidate")
    common = [n for n in c_idx if n in b_idx and c_idx[n][1].get("shape") == b_idx[n][1].get("shape")]
    if not common:
        return IntegrityCheck(name="weights", passed=False, detail="no tensor shared with the base (name and shape)")
    measured: dict[str, tuple[float, float]] = {}
    for name in sampled_names(sorted(common)):
        cand, ref = sample_tensor(c_idx[name]), sample_tensor(b_idx[name])
        if cand is None or ref is None or len(cand) != len(ref) or not any(ref):
            continue
        measured[name] = (cosine(cand, ref), relative_distance(cand, ref))
    if not measured:
        return IntegrityCheck(name="weights", passed=None, detail="no comparable tensor (dtype)")
    worst = min(measured, key=lambda n: measured[n][0])
    cos, dist = measured[worst]
    ok = cos >= min_cosine
    return IntegrityCheck(name="weights", passed=ok,
                          detail=f"min cosine to the base {cos:.3f} (relative L2 distance {dist:.3g}; {worst}; "
                                 f"{len(measured)} tensors sampled; limit {min_cosine:g})")
