"""Greedy generation for the device check, one backend per process (standalone: no ftagent imports).

    python device_gen.py {hf,vllm} MODEL PROMPTS.json OUT.json [--batch 64] [--max-new 12] [--check]

PROMPTS.json is a list of ``{"question": ..., "answer": ...}``; each question is wrapped by the
model's chat template. OUT.json gets items/s over the generation alone (model load excluded), the
load time, exact-match accuracy (``\\boxed{answer}`` in the output) and the versions used.
``--check`` only imports the backend and loads the tokenizer (the dry run).
"""

from __future__ import annotations

import argparse
import json
import time


def _prompts(tok, rows: list[dict]) -> list[str]:
    return [tok.apply_chat_template([{"role": "user", "content": r["question"]}], tokenize=False,
                                    add_generation_prompt=True) for r in rows]


def _score(rows: list[dict], outputs: list[str]) -> float:
    hits = sum(f"\\boxed{{{r['answer']}}}" in out for r, out in zip(rows, outputs, strict=True))
    return round(hits / max(len(rows), 1), 4)


def run_hf(model: str, rows: list[dict], batch: int, max_new: int) -> dict:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: the check's own CPU smoke test
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    start = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(model, padding_side="left")
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    net = AutoModelForCausalLM.from_pretrained(model, torch_dtype=dtype).to(device).eval()
    sync()
    load_s = time.perf_counter() - start
    prompts, outputs = _prompts(tok, rows), []
    start = time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(prompts), batch):
            enc = tok(prompts[i:i + batch], return_tensors="pt", padding=True, add_special_tokens=False).to(device)
            gen = net.generate(**enc, max_new_tokens=max_new, do_sample=False, pad_token_id=tok.pad_token_id)
            outputs += tok.batch_decode(gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=False)
    sync()
    gen_s = time.perf_counter() - start
    return {"backend": "hf", "items": len(rows), "load_s": round(load_s, 2), "gen_s": round(gen_s, 3),
            "items_per_s": round(len(rows) / gen_s, 1), "accuracy": _score(rows, outputs), "batch": batch, "device": device,
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__}}


def run_vllm(model: str, rows: list[dict], batch: int, max_new: int) -> dict:
    import vllm
    from vllm import LLM, SamplingParams

    start = time.perf_counter()
    llm = LLM(model=model, dtype="bfloat16", gpu_memory_utilization=0.3, max_model_len=512, seed=0)
    tok = llm.get_tokenizer()
    load_s = time.perf_counter() - start
    prompts = _prompts(tok, rows)
    start = time.perf_counter()
    results = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=max_new))
    gen_s = time.perf_counter() - start
    outputs = [r.outputs[0].text for r in results]
    return {"backend": "vllm", "items": len(rows), "load_s": round(load_s, 2), "gen_s": round(gen_s, 3),
            "items_per_s": round(len(rows) / gen_s, 1), "accuracy": _score(rows, outputs),
            "versions": {"vllm": vllm.__version__}}


def check(backend: str, model: str) -> dict:
    """Import the backend and load the tokenizer; no GPU work."""
    import importlib

    mod = importlib.import_module("vllm" if backend == "vllm" else "transformers")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    return {"backend": backend, "check": True, "version": getattr(mod, "__version__", "?"), "vocab": len(tok)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("backend", choices=["hf", "vllm"])
    ap.add_argument("model")
    ap.add_argument("prompts")
    ap.add_argument("out")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--max-new", type=int, default=12)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    if args.check:
        result = check(args.backend, args.model)
    else:
        rows = json.load(open(args.prompts, encoding="utf-8"))
        run = run_vllm if args.backend == "vllm" else run_hf
        result = run(args.model, rows, args.batch, args.max_new)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
