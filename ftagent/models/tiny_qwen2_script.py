"""Build the built-in ``tiny-qwen2`` base model fully offline (standalone: no ftagent imports).

Run by the tool environment's python, so the files are saved with the transformers major that both
training (LLaMA-Factory) and evaluation (OpenCompass) load:

    python tiny_qwen2_script.py OUT_DIR [--seed 2] [--hidden 128] [--layers 2] [--heads 4]
                                        [--kv-heads 2] [--inter 512] [--vocab 512]

The tokenizer is a 512-token byte-level BPE trained on a generated arithmetic/English corpus, with
every digit its own token and a ChatML chat template. The model is a randomly initialised
``Qwen2ForCausalLM`` (tied embeddings). Output is deterministic for a given ``--seed``. The last line
printed is a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import random

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
WORDS = (
    "the a an of to and in is it you that he was for on are with as I his they be at one have this "
    "from or had by word but what some we can out other were all there when up use your how said "
    "each she which do their time if will way about many then them write would like so these her "
    "long make thing see him two has look more day could go come did number sound no most people "
    "answer question add sum plus minus times equals result compute value user assistant system "
    "You are a helpful assistant. Solve Put final in boxed"
).split()


def corpus(n: int = 4000, seed: int = 0):
    """Yield training text for the tokenizer: chat-formatted sums, English-ish lines, punctuation."""
    rng = random.Random(seed)
    for _ in range(n):
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        yield (f"<|im_start|>user\nWhat is {a} + {b}?<|im_end|>\n"
               f"<|im_start|>assistant\n\\boxed{{{a + b}}}<|im_end|>\n")
        yield " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 20))) + "."
        yield "### Instruction:\nHuman: Assistant: System: \n\n### Response:\n{}[]()+-*/=<>.,:;!?'\"`~@#$%^&_|\\"


def build_tokenizer(vocab_size: int):
    """Train the byte-level BPE and wrap it as a ``PreTrainedTokenizerFast`` with ChatML."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), min_frequency=2,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        unk_token=None, bos_token=None, additional_special_tokens=["<|im_start|>", "<|im_end|>"],
        model_max_length=512, padding_side="right", clean_up_tokenization_spaces=False,
        model_input_names=["input_ids", "attention_mask"],
    )
    fast.chat_template = CHATML
    return fast


def build_model(tok, args):
    """A randomly initialised Qwen2 causal LM sized by ``args`` (seeded by the caller)."""
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=len(tok), hidden_size=args.hidden, intermediate_size=args.inter or 4 * args.hidden,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        max_position_embeddings=512, tie_word_embeddings=True, rope_theta=10000.0,
        bos_token_id=None, eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"), torch_dtype="float32",
    )
    model = Qwen2ForCausalLM(cfg)
    model.generation_config = GenerationConfig(
        eos_token_id=cfg.eos_token_id, pad_token_id=cfg.pad_token_id, do_sample=False, max_new_tokens=16,
    )
    return model


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", dest="kv_heads", type=int, default=2)
    ap.add_argument("--inter", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=512)
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    import torch

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    tok = build_tokenizer(args.vocab)
    model = build_model(tok, args)
    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    tok.save_pretrained(args.out)
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"out": os.path.abspath(args.out), "vocab": len(tok), "params": params,
                      "seed": args.seed, "transformers": __import__("transformers").__version__}))


if __name__ == "__main__":
    main()
