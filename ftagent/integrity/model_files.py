"""The candidate's model files (all but the weights) against the base's and the validated run's: tokenizer,
chat template and architecture. The decoding files have their own rule (:mod:`ftagent.integrity.decoding`).

A folder is read once into :class:`ModelFiles` (the base's at the session start, before any planner code
runs; the candidate's and the validated run's at the check); the checks compare those records. Files are
opened without following a link and must be regular files: one that is not is named in ``unreadable`` and
the check reading it flags it (the trainer writes regular files).

* :func:`tokenizer_check` — ``tokenizer.json`` byte-equal, the special tokens (``special_tokens_map.json``
  contents and ``tokenizer_config.json``'s ``added_tokens_decoder``) equal to the base's or to the validated
  debug run's (LLaMA-Factory replaces the EOS token for templates with ``replace_eos``, e.g. Qwen's
  ``<|im_end|>``, adds a pad token where the base had none and the template's stop words: LLaMA-Factory
  0.9.5 ``data/template.py`` ``Template.fix_special_tokens``).
* :func:`chat_template_check` — the chat template (``chat_template.jinja``, else ``tokenizer_config.json``'s
  ``chat_template``) equal to the base's or the validated run's (LLaMA-Factory writes its own rendering of
  the validated ``template``, so an honest output's template differs from the base's).
* :func:`architecture_check` — ``config.json``'s model type, shapes and custom code (``auto_map``: the
  evaluation loads with ``trust_remote_code=True``) equal the base's, except a vocabulary grown to the size
  the validated run grew it to (``resize_vocab``, ``add_tokens``, ``add_special_tokens``); a LoRA adapter's
  ``base_model_name_or_path`` is the declared base.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ftagent.engine.events import CheckVerdict
from ftagent.integrity.safetensors_io import WeightsError, open_regular

ARCH_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "vocab_size", "intermediate_size",
             "num_attention_heads", "num_key_value_heads", "auto_map")
JSON_FILES = ("config.json", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json",
              "adapter_config.json")
MAX_FILE_BYTES = 64 << 20  # a tokenizer.json of a large vocabulary is ~10 MB


class ModelFiles(BaseModel):
    """The files of one model folder the guard compares, as read once."""

    folder: str
    tokenizer_sha256: str | None = None  # tokenizer.json
    chat_template: str | None = None
    configs: dict[str, dict[str, Any]] = Field(default_factory=dict)  # file name -> its object (present files)
    unreadable: list[str] = Field(default_factory=list)  # present, but a link, not a regular file, or not JSON

    def file(self, name: str) -> dict[str, Any]:
        return self.configs.get(name) or {}

    @property
    def has_tokenizer(self) -> bool:
        return self.tokenizer_sha256 is not None or "tokenizer_config.json" in self.configs

    def special_tokens(self) -> dict[str, Any]:
        """Special tokens by role, as their text, plus the added tokens' table."""
        tokens = {k: token_text(v) for k, v in self.file("special_tokens_map.json").items()}
        added = self.file("tokenizer_config.json").get("added_tokens_decoder") or {}
        tokens["added_tokens_decoder"] = {k: token_text(v) for k, v in sorted(added.items())}
        return tokens


def token_text(value: Any) -> Any:
    """A special token as its text: the dict and the string form written by different versions of
    transformers are the same token (a list: each one's text)."""
    if isinstance(value, dict):
        return value.get("content")
    if isinstance(value, list):
        return [token_text(v) for v in value]
    return value


def _read(path: Path) -> bytes:
    with open_regular(path) as fh:
        data = fh.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise WeightsError(f"{path.name}: larger than {MAX_FILE_BYTES >> 20} MiB")
    return data


def read_model_files(folder: Path) -> ModelFiles:
    """``folder``'s tokenizer, template and JSON configs (see the module doc)."""
    folder = Path(folder)
    out = ModelFiles(folder=str(folder))
    for name in (*JSON_FILES, "tokenizer.json", "chat_template.jinja"):
        path = folder / name
        if not os.path.lexists(path):
            continue
        try:
            data = _read(path)
            if name == "tokenizer.json":
                out.tokenizer_sha256 = hashlib.sha256(data).hexdigest()
            elif name == "chat_template.jinja":
                out.chat_template = data.decode("utf-8", errors="replace")
            else:
                value = json.loads(data)
                if not isinstance(value, dict):
                    raise ValueError("not a JSON object")
                out.configs[name] = value
        except (OSError, ValueError, WeightsError) as exc:
            out.unreadable.append(f"{name} ({exc})")
    if out.chat_template is None:
        value = out.file("tokenizer_config.json").get("chat_template")
        out.chat_template = json.dumps(value, sort_keys=True) if isinstance(value, list) else value
    return out


def _unreadable(candidate: ModelFiles, names: Sequence[str]) -> list[str]:
    return [u for u in candidate.unreadable if u.split(" ", 1)[0] in names]


def _tokenizer_problems(reference: ModelFiles, candidate: ModelFiles) -> list[str]:
    problems = []
    if reference.tokenizer_sha256 is not None:
        if candidate.tokenizer_sha256 is None:
            problems.append("tokenizer.json missing")
        elif reference.tokenizer_sha256 != candidate.tokenizer_sha256:
            problems.append("tokenizer.json differs")
    if "special_tokens_map.json" in candidate.configs or "tokenizer_config.json" in candidate.configs:
        r, c = reference.special_tokens(), candidate.special_tokens()
        diff = sorted(k for k in set(r) | set(c) if r.get(k) != c.get(k))
        if diff:
            problems.append("special tokens differ: " + ", ".join(diff))
    return problems


def tokenizer_check(base: ModelFiles, candidate: ModelFiles, allowed: Sequence[ModelFiles] = ()) -> CheckVerdict:
    """``tokenizer.json`` and the special tokens equal to the base's, or to an ``allowed`` (validated) run's."""
    bad = _unreadable(candidate, ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"))
    if bad:
        return CheckVerdict(name="tokenizer", passed=False, detail="unreadable tokenizer files: " + "; ".join(bad))
    if not candidate.has_tokenizer:
        return CheckVerdict(name="tokenizer", passed=None, detail="no tokenizer files (the base's are used)")
    problems = _tokenizer_problems(base, candidate)
    if problems and any(not _tokenizer_problems(p, candidate) for p in allowed if "tokenizer_config.json" in p.configs):
        return CheckVerdict(name="tokenizer", passed=True, detail="equal to the validated training run's")
    return CheckVerdict(name="tokenizer", passed=not problems,
                        detail="; ".join(f"{p} (from the base's)" for p in problems)
                        or "tokenizer.json and special tokens equal the base's")


def chat_template_check(base: ModelFiles, candidate: ModelFiles, allowed: Sequence[ModelFiles] = ()) -> CheckVerdict:
    """The candidate's chat template equals the base's or an ``allowed`` (validated) run's."""
    bad = _unreadable(candidate, ("chat_template.jinja", "tokenizer_config.json"))
    if bad:
        return CheckVerdict(name="chat_template", passed=False, detail="unreadable template files: " + "; ".join(bad))
    mine = candidate.chat_template
    if mine is None:
        return CheckVerdict(name="chat_template", passed=None, detail="no chat template saved (the base's is used)")
    accepted = {t for t in (base.chat_template, *(p.chat_template for p in allowed)) if t is not None}
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


def _same_path(declared: str, folder: Path) -> bool:
    """Whether ``declared`` is ``folder`` itself (an existing path, links resolved): no name fallback, a start
    folder's name (``loop_0``) says nothing."""
    try:
        return Path(declared).exists() and os.path.realpath(declared) == os.path.realpath(folder)
    except OSError:
        return False


def _grown_vocab(base: ModelFiles, candidate: ModelFiles, allowed: Sequence[ModelFiles]) -> bool:
    """The candidate's vocabulary is larger than the base's and the size the validated run grew it to
    (LLaMA-Factory's ``resize_embedding_layer``: :mod:`ftagent.integrity.trained_run`)."""
    size, own = candidate.file("config.json").get("vocab_size"), base.file("config.json").get("vocab_size")
    return (isinstance(size, int) and isinstance(own, int) and size > own
            and any(p.file("config.json").get("vocab_size") == size for p in allowed))


def architecture_check(base: ModelFiles, candidate: ModelFiles, allowed: Sequence[ModelFiles] = (), *,
                       start: Path | None) -> CheckVerdict:
    """Same model type, shapes and custom code (``config.json``); an adapter names the declared base, or
    ``start``: the weights the system resolved for a stage that trains from an earlier loop's (issue 40: a
    GRPO LoRA on an SFT loop's weights; ``WORKSPACE_PATH/<session>/weights/loop_<n>``), None from the base.
    The vocabulary may have grown to the ``allowed`` (validated) run's size."""
    bad = _unreadable(candidate, ("config.json", "adapter_config.json"))
    if bad:
        return CheckVerdict(name="architecture", passed=False, detail="unreadable configs: " + "; ".join(bad))
    if "adapter_config.json" in candidate.configs:
        declared = str(candidate.file("adapter_config.json").get("base_model_name_or_path") or "")
        if start is not None and declared and _same_path(declared, start):
            return CheckVerdict(name="architecture", passed=True,
                                detail=f"adapter of {declared}, the start weights the system resolved for this loop")
        ok = _same_model(declared, Path(base.folder))
        return CheckVerdict(name="architecture", passed=ok,
                            detail=f"adapter of {declared or 'an unrecorded base'}"
                            + ("" if ok else f", not of the declared base {Path(base.folder).name}"
                               + (f" nor of this loop's start weights {start}" if start is not None else "")))
    b, c = base.file("config.json"), candidate.file("config.json")
    if not c:
        return CheckVerdict(name="architecture", passed=False, detail="no config.json in the candidate")
    grown = _grown_vocab(base, candidate, allowed)
    diff = [f"{k} {c.get(k)!r} (base {b.get(k)!r})" for k in ARCH_KEYS
            if b.get(k) != c.get(k) and not (k == "vocab_size" and grown)]
    return CheckVerdict(name="architecture", passed=not diff,
                        detail="; ".join(diff) or f"{c.get('model_type')} with the base's shapes" + (
                            f", vocabulary grown to {c.get('vocab_size')} as the validated run grew it" if grown else ""))
