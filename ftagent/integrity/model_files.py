"""The candidate's model files against the declared base's (and the validated debug run's): tokenizer, chat
template and architecture. Pure functions over folders on disk.

* :func:`tokenizer_check` — ``tokenizer.json`` byte-equal, the special tokens (``special_tokens_map.json``
  contents and ``tokenizer_config.json``'s ``added_tokens_decoder``) equal to the base's or to the validated
  debug run's.
* :func:`chat_template_check` — the chat template (``chat_template.jinja``, else ``tokenizer_config.json``'s
  ``chat_template``) equal to the base's or to one of the ``allowed`` folders' (the template LLaMA-Factory
  wrote for the validated debug run: LLaMA-Factory replaces the base's template with its own rendering
  of the validated ``template``, so an honest output's template differs from the base's).
* :func:`architecture_check` — ``config.json``'s model type and shapes equal (a LoRA adapter: its
  ``adapter_config.json``'s ``base_model_name_or_path`` is the declared base).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ftagent.engine.events import CheckVerdict
from ftagent.integrity.hashing import file_sha256

ARCH_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "vocab_size", "intermediate_size",
             "num_attention_heads", "num_key_value_heads")


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def token_text(value: Any) -> Any:
    """A special token as its text: the dict and the string form written by different versions of
    transformers are the same token (a list: each one's text)."""
    if isinstance(value, dict):
        return value.get("content")
    if isinstance(value, list):
        return [token_text(v) for v in value]
    return value


def _special_tokens(folder: Path) -> dict[str, Any]:
    """Special tokens by role, as their text, plus the added tokens' table."""
    text = token_text
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


def tokenizer_check(base: Path, candidate: Path, allowed: Sequence[Path] = ()) -> CheckVerdict:
    """``tokenizer.json`` and the special tokens equal to the base's, or to one of the ``allowed`` folders'
    (the validated debug run's: LLaMA-Factory replaces the EOS token for templates with ``replace_eos``,
    e.g. Qwen's ``<|im_end|>``, and saves the tokenizer so: LLaMA-Factory 0.9.5 ``data/template.py``
    ``Template.fix_special_tokens``, lines 173-200)."""
    base, candidate = Path(base), Path(candidate)
    if not (candidate / "tokenizer.json").is_file() and not (candidate / "tokenizer_config.json").is_file():
        return CheckVerdict(name="tokenizer", passed=None, detail="no tokenizer files (the base's are used)")
    problems = _tokenizer_problems(base, candidate)
    if problems and any(not _tokenizer_problems(Path(p), candidate) for p in allowed
                        if (Path(p) / "tokenizer_config.json").is_file()):
        return CheckVerdict(name="tokenizer", passed=True, detail="equal to the validated training run's")
    return CheckVerdict(name="tokenizer", passed=not problems,
                        detail="; ".join(f"{p} (from the base's)" for p in problems)
                          or "tokenizer.json and special tokens equal the base's")


def chat_template(folder: Path) -> str | None:
    """The folder's chat template: ``chat_template.jinja`` (newer transformers), else the config's key."""
    jinja = Path(folder) / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8", errors="replace")
    value = _json(Path(folder) / "tokenizer_config.json").get("chat_template")
    return json.dumps(value, sort_keys=True) if isinstance(value, list) else value


def chat_template_check(base: Path, candidate: Path, allowed: Sequence[Path] = ()) -> CheckVerdict:
    """The candidate's chat template equals the base's or one of the ``allowed`` folders' templates."""
    mine = chat_template(candidate)
    if mine is None:
        return CheckVerdict(name="chat_template", passed=None, detail="no chat template saved (the base's is used)")
    accepted = {t for t in (chat_template(base), *(chat_template(p) for p in allowed)) if t is not None}
    ok = mine in accepted
    return CheckVerdict(name="chat_template", passed=ok,
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


def architecture_check(base: Path, candidate: Path) -> CheckVerdict:
    """Same model type and shapes (``config.json``); an adapter names the declared base."""
    base, candidate = Path(base), Path(candidate)
    adapter = _json(candidate / "adapter_config.json")
    if adapter:
        declared = str(adapter.get("base_model_name_or_path") or "")
        ok = _same_model(declared, base)
        return CheckVerdict(name="architecture", passed=ok,
                            detail=f"adapter of {declared or 'an unrecorded base'}"
                                     + ("" if ok else f", not of the declared base {base.name}"))
    b, c = _json(base / "config.json"), _json(candidate / "config.json")
    if not c:
        return CheckVerdict(name="architecture", passed=False, detail="no config.json in the candidate")
    diff = [f"{k} {c.get(k)!r} (base {b.get(k)!r})" for k in ARCH_KEYS if b.get(k) != c.get(k)]
    return CheckVerdict(name="architecture", passed=not diff,
                        detail="; ".join(diff) or f"{c.get('model_type')} with the base's shapes")

