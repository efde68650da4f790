"""The GRPO stage (issue 40): TRL's GRPOTrainer with the benchmark's own scorer as the reward.

Usage (the tool env's python, ``PYTHONPATH`` = ftagent's package root): ``python grpo_script.py TRAIN_YAML``
with the reward spec in ``FT_GRPO_REWARD`` (JSON: the benchmark's evaluator and answer post-processor,
resolved by the system; an environment variable, not a workspace file, so the data script cannot change it).

``TRAIN_YAML`` is the validated config (``ftagent.tools.trl.config``): TRL ``GRPOConfig`` fields, plus the
LLaMA-Factory-style model keys the system set or the planner chose (``model_name_or_path``: the start
weights; ``dataset_dir``/``dataset_file``: the Alpaca ``data.json``; ``finetuning_type`` lora|full and
``lora_rank``/``lora_alpha``/``lora_dropout``/``lora_target``; ``format_reward_weight``). Each row's
prompt is the user turn LLaMA-Factory trains (``instruction`` + "\\n" + ``input``), rendered with the
chat template of the start model's folder (evaluation prompts with the same one); its ``output`` is the
gold the reward compares each completion with (``oc_reward.AnswerScorer``: exactly the scoring of the
sampling step's evaluation). The optional format reward is 1 when the benchmark's post-processor finds an
answer at all, weighted by ``format_reward_weight`` (TRL ``reward_weights``).

Writes LLaMA-Factory's ``trainer_log.jsonl`` lines (``current_steps``, ``total_steps``, ``loss``, ``lr``,
``elapsed_time``, ``remaining_time``) plus ``reward``, ``reward_std``, ``kl``, ``completion_length``, so
ftagent's progress, early-stop and loss-table readers work unchanged, and ``trainer_state.json``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta

# run as a file from ftagent/tools/trl: drop the script folder so that `import trl` is the real package
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

MODEL_KEYS = ("model_name_or_path", "dataset_dir", "dataset_file", "finetuning_type", "lora_rank", "lora_alpha",
              "lora_dropout", "lora_target", "template", "cutoff_len", "format_reward_weight", "stage", "max_samples")
LOG_KEYS = {"reward": "reward", "reward_std": "reward_std", "kl": "kl", "completions/mean_length": "completion_length",
            "entropy": "entropy", "frac_reward_zero_std": "frac_reward_zero_std"}


def _prompt(row: dict) -> list[dict]:
    query = [t for t in (row.get("instruction"), row.get("input")) if t]
    return [{"role": "user", "content": "\n".join(query)}]  # llamafactory AlpacaDatasetConverter: prompt\nquery


def _text(completion) -> str:
    if isinstance(completion, list):  # conversational: [{"role": "assistant", "content": ...}]
        return "".join(str(m.get("content", "")) for m in completion if isinstance(m, dict))
    return str(completion)


def _log_callback(output_dir: str):
    from transformers import TrainerCallback

    class TrainerLogWriter(TrainerCallback):
        """LLaMA-Factory's ``trainer_log.jsonl`` lines (its LogCallback's keys) from TRL's logs."""

        def on_train_begin(self, args, state, control, **kwargs):
            self.start = time.time()
            open(os.path.join(output_dir, "trainer_log.jsonl"), "w").close()

        def on_log(self, args, state, control, logs=None, **kwargs):
            logs = logs or {}
            if "loss" not in logs and "reward" not in logs:
                return
            step, total = state.global_step, state.max_steps or 0
            elapsed = time.time() - self.start
            remaining = elapsed / step * (total - step) if step else 0.0
            row = {"current_steps": step, "total_steps": total, "loss": logs.get("loss"),
                   "lr": logs.get("learning_rate"), "epoch": logs.get("epoch"),
                   "percentage": round(100.0 * step / total, 2) if total else None,
                   "elapsed_time": str(timedelta(seconds=int(elapsed))),
                   "remaining_time": str(timedelta(seconds=int(remaining)))}
            row.update({ours: logs[theirs] for theirs, ours in LOG_KEYS.items() if theirs in logs})
            with open(os.path.join(output_dir, "trainer_log.jsonl"), "a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")

    return TrainerLogWriter()


def main(config_path: str) -> None:
    import yaml
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from ftagent.tools.opencompass.oc_reward import AnswerScorer

    cfg = yaml.safe_load(open(config_path, encoding="utf-8"))
    own = {k: cfg.pop(k) for k in MODEL_KEYS if k in cfg}
    scorer = AnswerScorer(json.loads(os.environ["FT_GRPO_REWARD"]))
    with open(os.path.join(own["dataset_dir"], own.get("dataset_file") or "data.json"), encoding="utf-8") as fh:
        rows = json.load(fh)
    if own.get("max_samples"):
        rows = rows[: int(own["max_samples"])]
    data = Dataset.from_list([{"prompt": _prompt(r), "gold": str(r["output"])} for r in rows])
    cfg.setdefault("max_prompt_length", own.get("cutoff_len"))

    def benchmark_reward(completions, gold, **kwargs):
        return scorer.score([_text(c) for c in completions], list(gold))

    def format_reward(completions, **kwargs):
        return [1.0 if scorer.extracted(_text(c)) else 0.0 for c in completions]

    rewards: list = [benchmark_reward]
    weight = float(own.get("format_reward_weight") or 0.0)
    if weight > 0:
        rewards.append(format_reward)
        cfg["reward_weights"] = [1.0, weight]
    args = GRPOConfig(**cfg)
    model = own["model_name_or_path"]
    tokenizer = AutoTokenizer.from_pretrained(model)
    peft_config = None
    if str(own.get("finetuning_type", "lora")) == "lora":
        from peft import LoraConfig

        target = own.get("lora_target") or "all"
        target = "all-linear" if target == "all" else [t.strip() for t in str(target).split(",") if t.strip()]
        rank = int(own.get("lora_rank") or 8)
        peft_config = LoraConfig(r=rank, lora_alpha=int(own.get("lora_alpha") or 2 * rank),
                                 lora_dropout=float(own.get("lora_dropout") or 0.0), target_modules=target,
                                 task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=model, reward_funcs=rewards, args=args, train_dataset=data,
                          processing_class=tokenizer, peft_config=peft_config,
                          callbacks=[_log_callback(args.output_dir)])
    result = trainer.train()
    trainer.save_model(args.output_dir)
    tokenizer.save_pretrained(args.output_dir)  # its chat template: evaluation prompts with it
    trainer.state.save_to_json(os.path.join(args.output_dir, "trainer_state.json"))
    with open(os.path.join(args.output_dir, "train_results.json"), "w", encoding="utf-8") as fh:
        json.dump(result.metrics, fh, indent=1)
    print(f"grpo: {trainer.state.global_step} steps, {json.dumps(result.metrics)}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python grpo_script.py TRAIN_YAML  (reward spec in FT_GRPO_REWARD)")
    main(sys.argv[1])
