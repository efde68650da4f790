"""What the LLM judge's evaluation process needs besides its config: tiktoken's files, the proxies, and
a ``max_seq_len`` that holds the longest answer it is asked to grade (issue 30).

**tiktoken.** OpenCompass's ``OpenAI``/``OpenAISDK`` model (the judge, ``opencompass/models/openai_api.py``
0.5.4, ``_init_tokenizer``) counts prompt tokens with ``tiktoken.encoding_for_model(tokenizer_path)``
for an OpenAI model name, else an HF tokenizer of that name (a Hub lookup), else gpt-4's encoding.
tiktoken fetches the encoding's BPE file from ``openaipublic.blob.core.windows.net`` and keeps it in
``TIKTOKEN_CACHE_DIR``, by default a folder under the temp dir (``tiktoken/load.py``,
``read_file_cached``): inside the sandbox or a container that is a fresh folder each run, so every run
downloaded it, and without network the judge could not start. So:

* the judge is given ``tokenizer_path='gpt-4'`` (cl100k_base, one known file whatever the judge model
  is called; the count only bounds the prompt, see below);
* the run gets ``TIKTOKEN_CACHE_DIR`` = :func:`ftagent.core.paths.tiktoken_cache_dir`, mounted
  read-only, which :func:`prefill_tiktoken_cache` fills on the host: from the copies LiteLLM ships
  (``litellm/litellm_core_utils/tokenizers/``; the same bytes, tiktoken checks their sha256), else by a
  download on the host (through its proxy);
* the host's ``HTTP(S)_PROXY``/``ALL_PROXY``/``NO_PROXY`` are passed to the run, for a judge called
  directly (without the session's loopback gateway).

**max_seq_len.** OpenAI's default is 16384 with truncation ``mode='none'``, under which a prompt longer
than ``max_seq_len`` raises ``ValueError`` and one that leaves no room lowers the judge's reply length
to ``max_seq_len - input_len - 100`` or raises (``_preprocess_messages``). The judge prompt holds the
candidate's whole answer, up to the answer cap (38,912 tokens for a Qwen3 thinking model), so
:func:`judge_max_seq_len` = cap + :data:`JUDGE_PROMPT_TOKENS` (instructions, question, gold answer) +
the judge's reply + OpenCompass's margin of 100, never below the default; and the config sets
``mode='mid'``: a longer prompt loses the middle of the answer's reasoning, keeping the instructions,
question and gold answer at the front and the final answer at the end, instead of failing the run.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import urllib.request
from pathlib import Path

from ftagent.core.paths import tiktoken_cache_dir
from ftagent.runners.base import Mount

JUDGE_TOKENIZER = "gpt-4"  # tiktoken's model name for cl100k_base
JUDGE_MAX_OUT_LEN = 1024  # the judge's reply (one letter asked; room for a preamble)
JUDGE_PROMPT_TOKENS = 8192  # JUDGE_PROMPT's instructions + the question + the gold answer
OC_DEFAULT_MAX_SEQ_LEN = 16384  # OpenAI's default max_seq_len in opencompass/models/openai_api.py
OC_MARGIN = 100  # _preprocess_messages keeps max_seq_len - input_len - 100 for the reply
# encoding -> (URL tiktoken fetches, sha256 it expects): tiktoken_ext/openai_public.py (tiktoken 0.14)
TIKTOKEN_FILES: dict[str, tuple[str, str]] = {
    "cl100k_base": ("https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
                    "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"),
    "o200k_base": ("https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
                   "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"),
}
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


def judge_max_seq_len(answer_cap: int) -> int:
    """The judge's ``max_seq_len`` for answers of at most ``answer_cap`` tokens."""
    return max(OC_DEFAULT_MAX_SEQ_LEN, int(answer_cap) + JUDGE_PROMPT_TOKENS + JUDGE_MAX_OUT_LEN + OC_MARGIN)


def cache_name(url: str) -> str:
    """The file name tiktoken gives ``url`` in its cache (sha1 of the URL, ``read_file_cached``)."""
    return hashlib.sha1(url.encode()).hexdigest()


def _sha256_ok(path: Path, expected: str) -> bool:
    return path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == expected


def _litellm_copy(name: str) -> Path | None:
    spec = importlib.util.find_spec("litellm")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "litellm_core_utils" / "tokenizers" / name
    return path if path.is_file() else None


def prefill_tiktoken_cache(cache_dir: Path, *, download: bool = True, timeout: float = 60.0) -> list[str]:
    """Put tiktoken's BPE files in ``cache_dir`` under tiktoken's own names; the encodings missing after.

    LiteLLM's bundled copies first (no network); else, with ``download``, a download on this host (its
    proxy variables apply). A file is kept only when its sha256 is the one tiktoken expects."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    missing: list[str] = []
    for encoding, (url, sha256) in TIKTOKEN_FILES.items():
        target = cache_dir / cache_name(url)
        if _sha256_ok(target, sha256):
            continue
        tmp = target.with_suffix(".part")
        source = _litellm_copy(target.name)
        try:
            if source is not None:
                shutil.copyfile(source, tmp)
            elif download:
                with urllib.request.urlopen(url, timeout=timeout) as resp, tmp.open("wb") as fh:  # noqa: S310
                    shutil.copyfileobj(resp, fh)
        except OSError:
            pass
        if _sha256_ok(tmp, sha256):
            tmp.replace(target)
        else:
            tmp.unlink(missing_ok=True)
            missing.append(encoding)
    return missing


def proxy_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The host's proxy variables (either case), to pass to the process that calls the judge."""
    environ = dict(os.environ) if environ is None else environ
    return {k: v for k, v in environ.items() if k.upper() in PROXY_VARS and v}


def judge_run_env(file_path: Path | str, *, download: bool = True) -> tuple[dict[str, str], list[Mount]]:
    """``(env, mounts)`` an evaluation run with an LLM judge needs: the filled tiktoken cache (mounted
    read-only) as ``TIKTOKEN_CACHE_DIR``, and the host's proxy variables."""
    cache = tiktoken_cache_dir(file_path).resolve()
    prefill_tiktoken_cache(cache, download=download)
    return {**proxy_env(), "TIKTOKEN_CACHE_DIR": str(cache)}, [Mount(source=cache, read_only=True)]
