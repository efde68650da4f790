"""The ``decoding`` check: the files that steer how the candidate generates equal the base's or the validated
run's, except the keys the evaluation sets itself, and the verdict says which.

What the evaluation reads (OpenCompass 0.5.4, ``opencompass/models/huggingface_above_v4_33.py``
``HuggingFacewithChatTemplate``, the HF backend's ``TrainedFormatChatModel``; ``vllm_with_tf_above_v4_33.py``
``VLLMwithChatTemplate``; transformers 4.57 ``generation/utils.py``):

* ``generation_config.json`` of the model folder is the default of every generation parameter
  ``model.generate`` is not given (``GenerationMixin._prepare_generation_config``): beams, repetition
  penalties, banned or biased tokens, minimum lengths, forced tokens, and ``eos_token_id`` (where generation
  stops; OpenCompass also decodes each id into a stop word, ``_get_potential_stop_words``, and vLLM adds them
  to its stop tokens). Without the file transformers takes them from ``config.json``
  (``GenerationConfig.from_model_config``). For a LoRA adapter the model loaded is the base, so the base's
  file applies;
* ``tokenizer_config.json``: how prompts are tokenized and answers decoded (``eos_token``, ``pad_token``,
  ``add_bos_token``, ``split_special_tokens``, ``clean_up_tokenization_spaces``, custom code in ``auto_map``
  ...). ``chat_template`` and ``added_tokens_decoder`` are the ``chat_template`` and ``tokenizer`` checks';
  ``special_tokens_map.json`` is the ``tokenizer`` check's.

Set by the evaluation on every backend, so not compared (:data:`OVERRIDDEN`): ``max_new_tokens`` /
``max_length`` (``max_new_tokens=max_out_len``; vLLM ``max_tokens``), ``do_sample`` (``_load_model`` sets
``generation_config.do_sample = False``; sampling passes it; vLLM drops it), ``temperature``/``top_p``/
``top_k`` (read only when sampling, and then passed by the rendered config), ``pad_token_id``
(``generate`` passes the tokenizer's), ``padding_side``/``truncation_side`` (``_load_tokenizer`` passes
``padding_side='left', truncation_side='left'``; vLLM neither pads nor truncates), ``model_max_length``
(prompts are truncated at ``max_length=max_seq_len``; vLLM gets ``max_model_len``). LLaMA-Factory changes
some of these honestly (``padding_side='right'`` at load, ``model_max_length`` raised to ``cutoff_len``:
``model/loader.py``, ``model/patcher.py`` ``patch_tokenizer``) and others that stay compared
(``split_special_tokens``, the template's EOS and pad tokens, ``do_sample`` fixed when a temperature is set:
``patch_model``); the validated debug run writes the same, so an honest output equals it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ftagent.engine.events import CheckVerdict
from ftagent.integrity.model_files import ModelFiles, token_text

OVERRIDDEN = {
    "generation_config.json": ("max_new_tokens", "max_length", "do_sample", "temperature", "top_p", "top_k",
                               "pad_token_id"),
    "tokenizer_config.json": ("padding_side", "truncation_side", "model_max_length"),
}
#: not behaviour: the version that wrote the file, where it was read from
IGNORED = ("transformers_version", "_from_model_config", "name_or_path", "tokenizer_file")
#: compared by another check
ELSEWHERE = ("chat_template", "added_tokens_decoder")
#: config.json keys transformers turns into a generation config when generation_config.json is absent
FROM_MODEL_CONFIG = ("bos_token_id", "eos_token_id", "decoder_start_token_id", "forced_bos_token_id",
                     "forced_eos_token_id", "num_beams", "repetition_penalty", "no_repeat_ngram_size",
                     "length_penalty", "min_length", "bad_words_ids", "suppress_tokens", "begin_suppress_tokens")
#: a key absent from the file reads as this default (transformers ``PreTrainedTokenizerBase.__init__``)
DEFAULTS = {"split_special_tokens": False}


def _ids(value: Any) -> Any:
    """``eos_token_id`` as a sorted list of ids (an int and a one-item list stop alike)."""
    if isinstance(value, int):
        return [value]
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return sorted(set(value))
    return value


def _is_token(key: str) -> bool:
    """A special-token key, written as a string or as an AddedToken dict by different transformers versions."""
    return key.endswith("_token") or key == "additional_special_tokens"


def decoding_view(files: ModelFiles, *, adapter: bool, base: ModelFiles) -> dict[str, dict[str, Any]]:
    """The decoding-relevant keys of a folder, normalised: ``{file: {key: value}}``."""
    skip_gen = set(OVERRIDDEN["generation_config.json"]) | set(IGNORED)
    source = base if adapter else files  # an adapter runs on the base model: the base's generation config
    if "generation_config.json" in source.configs:
        gen = dict(source.configs["generation_config.json"])
    else:
        gen = {k: v for k, v in source.file("config.json").items() if k in FROM_MODEL_CONFIG}
    generation = {k: (_ids(v) if k == "eos_token_id" else v) for k, v in gen.items() if k not in skip_gen}
    skip_tok = set(OVERRIDDEN["tokenizer_config.json"]) | set(IGNORED) | set(ELSEWHERE)
    tok = files.file("tokenizer_config.json") if "tokenizer_config.json" in files.configs else \
        base.file("tokenizer_config.json")
    tokenizer = {**DEFAULTS, **{k: token_text(v) if _is_token(k) else v for k, v in tok.items() if k not in skip_tok}}
    return {"generation_config.json": generation, "tokenizer_config.json": tokenizer}


def _differences(mine: dict[str, dict[str, Any]], ref: dict[str, dict[str, Any]]) -> list[str]:
    out = []
    for file, keys in mine.items():
        other = ref.get(file, {})
        out += [f"{file} {k}={keys.get(k)!r} (reference {other.get(k)!r})"
                for k in sorted(set(keys) | set(other)) if keys.get(k) != other.get(k)]
    return out


def _overridden_note(candidate: ModelFiles) -> str:
    keys = [k for file, names in OVERRIDDEN.items() for k in names if k in candidate.file(file)]
    return f"; set by the evaluation, not compared: {', '.join(keys)}" if keys else ""


def decoding_check(base: ModelFiles, candidate: ModelFiles, allowed: Sequence[ModelFiles] = (), *,
                   adapter: bool = False) -> CheckVerdict:
    """The candidate's decoding view equals the base's or an ``allowed`` (validated) run's (module doc)."""
    bad = [u for u in candidate.unreadable if u.split(" ", 1)[0] in ("generation_config.json", "tokenizer_config.json",
                                                                     "config.json")]
    if bad:
        return CheckVerdict(name="decoding", passed=False, detail="unreadable decoding files: " + "; ".join(bad))
    mine = decoding_view(candidate, adapter=adapter, base=base)
    note = _overridden_note(candidate)
    if not _differences(mine, decoding_view(base, adapter=adapter, base=base)):
        return CheckVerdict(name="decoding", passed=True,
                            detail="generation config and tokenizer settings equal the base's" + note)
    if any(not _differences(mine, decoding_view(p, adapter=adapter, base=base)) for p in allowed):
        return CheckVerdict(name="decoding", passed=True,
                            detail="generation config and tokenizer settings equal the validated training run's" + note)
    refs = [decoding_view(p, adapter=adapter, base=base) for p in allowed] or [decoding_view(base, adapter=adapter,
                                                                                             base=base)]
    closest = min((_differences(mine, r) for r in refs), key=len)
    who = "the base's and from the validated run's (closest shown)" if allowed else "the base's"
    return CheckVerdict(name="decoding", passed=False,
                        detail=f"differs from {who}: " + "; ".join(closest[:4])
                        + (f" and {len(closest) - 4} more" if len(closest) > 4 else ""))
