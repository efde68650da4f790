"""Render one conversation as LLaMA-Factory trains it and as evaluation will prompt (tool env's python).

Usage: python template_probe_script.py MODEL_DIR OUT_JSON TEMPLATE [DATA_ARGS_JSON]

Training: LLaMA-Factory's ``get_template_and_fix_tokenizer`` with ``template=TEMPLATE`` (plus the
planner's other template keys in DATA_ARGS_JSON: ``default_system``, ``enable_thinking`` ...), then
``encode_multiturn`` of one user turn and one answer, as its supervised processor does (no system
column: the template's default system). Evaluation: the chat template the tokenizer holds *after*
that call, which is the one LLaMA-Factory saves with the trained model and OpenCompass then applies
(the model's own unless the template has ``replace_jinja_template`` or the model has none).

Writes OUT_JSON: both prompts and answers as text, whether they agree, and the names of the
templates whose training prompt equals the model's own chat template (what the planner could use).
No ftagent imports: this file is executed inside the tool environment.
"""

from __future__ import annotations

import copy
import json
import os
import sys

# This file lives in ftagent's own ``tools/llamafactory`` folder: drop the script folder from the
# import path so that ``import llamafactory`` finds the real package.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

USER = "What is 12 + 30?"
ANSWER = "The answer is 42."
MESSAGES = [{"role": "user", "content": USER}, {"role": "assistant", "content": ANSWER}]


def _decode(tokenizer, ids) -> str:
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def _training(template, tokenizer) -> tuple[str, str]:
    pairs = template.encode_multiturn(tokenizer, copy.deepcopy(MESSAGES), None, None)
    prompt_ids, answer_ids = pairs[0]
    return _decode(tokenizer, prompt_ids), _decode(tokenizer, answer_ids)


def _evaluation(tokenizer) -> tuple[str, str]:
    prompt = tokenizer.apply_chat_template(MESSAGES[:1], add_generation_prompt=True, tokenize=False)
    full = tokenizer.apply_chat_template(MESSAGES, tokenize=False)
    return prompt, full[len(prompt):] if full.startswith(prompt) else full


def _matching(tokenizer, own_prompt: str) -> list[str]:
    """Templates whose training prompt is the model's own chat template's prompt (before any fix)."""
    from llamafactory.data.template import TEMPLATES

    names = []
    for name, template in TEMPLATES.items():
        try:
            prompt, _ = _training(copy.deepcopy(template), tokenizer)
        except Exception:  # noqa: BLE001 - a template that cannot encode with this tokenizer is no match
            continue
        if prompt == own_prompt:
            names.append(name)
    return names


def main(model_dir: str, out_json: str, template_name: str, data_args_json: str = "{}") -> None:
    from llamafactory.data.template import TEMPLATES, get_template_and_fix_tokenizer
    from llamafactory.hparams import DataArguments
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=True)
    out: dict = {"template": template_name, "exists": template_name in TEMPLATES,
                 "base_has_chat_template": isinstance(tokenizer.chat_template, str)}
    own_prompt = own_answer = None
    if out["base_has_chat_template"]:
        own_prompt, own_answer = _evaluation(tokenizer)
        out["matching"] = _matching(tokenizer, own_prompt)
    if out["exists"]:
        extra = {k: v for k, v in json.loads(data_args_json).items() if k in DataArguments.__dataclass_fields__}
        template = get_template_and_fix_tokenizer(tokenizer, DataArguments(**{**extra, "template": template_name}))
        out["replaces_chat_template"] = bool(template.replace_jinja_template) or not out["base_has_chat_template"]
        out["training_prompt"], out["training_answer"] = _training(template, tokenizer)
        out["evaluation_prompt"], out["evaluation_answer"] = _evaluation(tokenizer)
        out["own_prompt"], out["own_answer"] = own_prompt, own_answer
    with open(out_json, "w", encoding="utf-8") as fh:
        json.dump(out, fh, ensure_ascii=False, indent=2)


if __name__ == "__main__":
    main(*sys.argv[1:])
