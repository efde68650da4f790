"""How many tokens the base model's chat template adds around one training sample (offline).

The template's wrapper (role markers, special tokens, default system prompt) counts against
``cutoff_len`` like the sample itself. :func:`template_overhead` renders the tokenizer's own chat
template (``chat_template.jinja`` or ``tokenizer_config.json``) for one user turn and one assistant
turn, counts the tokens with the model's ``tokenizer.json`` and subtracts the two texts; it also says
whether the template's special tokens (``<|im_start|>`` ...) are single tokens of the vocabulary.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import BaseModel

_SPECIAL = re.compile(r"<\|[^|<>\s]{1,40}\|>|<(?:/?s|think|/think)>")
_USER, _ANSWER = "What is 12 + 34?", "46"


class TemplateOverhead(BaseModel):
    """The wrapper of one templated single-turn sample."""

    tokens: int  # tokens the template adds around one user + one assistant turn
    special_tokens: list[str] = []  # the template's special-token strings
    atomic: bool = True  # every special token is one token of the vocabulary

    def line(self) -> str:
        """``the chat template adds 9 tokens around one single-turn sample; ...``."""
        text = f"the chat template adds {self.tokens} tokens around one single-turn sample (user + assistant turn)"
        if self.special_tokens:
            names = ", ".join(f"`{t}`" for t in self.special_tokens[:6])
            text += (f"; its special tokens {names} are single tokens" if self.atomic
                     else f"; its special tokens {names} are NOT all single tokens (they split into pieces)")
        return text + ". Choose cutoff_len ≥ the longest sample's tokens + this overhead."


def _chat_template(model_dir: Path) -> str:
    jinja = model_dir / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    try:
        cfg = json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    template = cfg.get("chat_template") if isinstance(cfg, dict) else None
    if isinstance(template, list):  # named templates: the default one
        template = next((t.get("template") for t in template if isinstance(t, dict) and t.get("name") == "default"),
                        None)
    return template if isinstance(template, str) else ""


def template_overhead(model_dir: str | Path | None) -> TemplateOverhead | None:
    """The wrapper cost of the model's chat template; None when the tokenizer or template is missing."""
    if not model_dir:
        return None
    root = Path(model_dir)
    template = _chat_template(root) if root.is_dir() else ""
    if not template or not (root / "tokenizer.json").is_file():
        return None
    try:
        from jinja2.sandbox import ImmutableSandboxedEnvironment
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(root / "tokenizer.json"))
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = lambda message: (_ for _ in ()).throw(ValueError(message))
        text = env.from_string(template).render(
            messages=[{"role": "user", "content": _USER}, {"role": "assistant", "content": _ANSWER}],
            add_generation_prompt=False, bos_token="", eos_token="", enable_thinking=False)
    except Exception:  # noqa: BLE001 - a template this sandbox cannot render: the prompt says less
        return None

    def count(s: str) -> int:
        return len(tok.encode(s, add_special_tokens=False).ids)

    specials = list(dict.fromkeys(_SPECIAL.findall(text)))
    atomic = all(tok.token_to_id(s) is not None and count(s) == 1 for s in specials)
    return TemplateOverhead(tokens=max(count(text) - count(_USER) - count(_ANSWER), 0), special_tokens=specials,
                            atomic=atomic)


def example_tokens(model_dir: str | Path | None, prompt: str, answer: str) -> str:
    """``19 tokens, the reference answer 6`` with the model's ``tokenizer.json`` (relay round r1: the planner
    chose cutoff_len without knowing how long the benchmark's own prompt is); '' without a tokenizer."""
    path = Path(model_dir) / "tokenizer.json" if model_dir else None
    if not prompt or path is None or not path.is_file():
        return ""
    try:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(path))
    except Exception:  # noqa: BLE001 - a tokenizer this `tokenizers` cannot read: the prompt says less
        return ""
    prompt_n, answer_n = (len(tok.encode(t, add_special_tokens=False).ids) for t in (prompt, answer))
    return (f"the model's tokenizer counts {prompt_n:,} tokens in this prompt and {answer_n:,} in the reference "
            "answer, before the chat template's tokens")
