"""The movement bound (ftagent.integrity.movement) against the real optimizer and schedulers, in the tool env.

transformers' own ``Trainer.get_optimizer_cls_and_kwargs`` builds the optimizer a LLaMA-Factory run gets for the
``optim`` value (torch's AdamW, fused or not, or Adagrad), transformers' ``get_scheduler`` the schedule, and the
gradients are the worst case of the module doc: every value's gradient grows by ``b2 / b1`` per step, which makes
``|m_hat / sqrt(v_hat)|`` equal ``C(t)`` at every step. The bound must hold for every value, and without weight
decay it must be attained (it is the exact worst case, not a loose one). A few hundred steps on 256 values: ~10 s.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ftagent.integrity.movement import run_budget

pytestmark = pytest.mark.integration

SCRIPT = r'''
import json, sys
import torch
from transformers import Trainer, TrainingArguments, get_scheduler

cases = json.loads(sys.argv[1])
out = []
for case in cases:
    torch.manual_seed(0)
    start = torch.randn(256) * 0.02
    p = torch.nn.Parameter(start.clone())
    args = TrainingArguments(output_dir="/tmp/unused", optim=case["optim"], learning_rate=case["learning_rate"],
                             weight_decay=case.get("weight_decay", 0.0), adam_beta1=case.get("adam_beta1", 0.9),
                             adam_beta2=case.get("adam_beta2", 0.999), report_to=[], use_cpu=True)
    cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(args)
    opt = cls([{"params": [p], "weight_decay": args.weight_decay}], **kwargs)
    steps = case["steps"]
    sched = get_scheduler(case["lr_scheduler_type"], opt, num_warmup_steps=case.get("warmup_steps", 0),
                          num_training_steps=steps)
    growth = args.adam_beta2 / args.adam_beta1
    sign = torch.sign(torch.randn(256))
    for t in range(steps):
        p.grad = sign * 1e-6 * growth ** t  # the worst case: C(t) reached at every step
        opt.step()
        sched.step()
    out.append({"moved": (p.detach() - start).abs().tolist(), "start": start.abs().tolist(),
                "optimizer": type(opt).__name__, "fused": bool(opt.defaults.get("fused"))})
print(json.dumps(out))
'''

CASES = [
    {"optim": "adamw_torch_fused", "learning_rate": 1e-3, "lr_scheduler_type": "cosine", "warmup_steps": 10,
     "steps": 300},
    {"optim": "adamw_torch", "learning_rate": 1e-3, "lr_scheduler_type": "linear", "steps": 120},
    {"optim": "adamw_torch", "learning_rate": 2e-3, "lr_scheduler_type": "constant_with_warmup", "warmup_steps": 5,
     "steps": 60, "adam_beta1": 0.8, "adam_beta2": 0.95},
    {"optim": "adamw_torch", "learning_rate": 1e-3, "lr_scheduler_type": "cosine", "steps": 200,
     "weight_decay": 0.1},
    {"optim": "adagrad", "learning_rate": 1e-2, "lr_scheduler_type": "linear", "steps": 100},
]


def test_the_bound_holds_and_is_attained_by_the_real_optimizers(tools_python: Path) -> None:
    result = subprocess.run([str(tools_python), "-c", SCRIPT, json.dumps(CASES)], capture_output=True, text=True,
                            timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = json.loads(result.stdout.strip().splitlines()[-1])
    for case, run in zip(CASES, runs, strict=True):
        config = {k: v for k, v in case.items() if k != "steps"}
        budget = run_budget(config, {"global_step": case["steps"], "max_steps": case["steps"]})
        bound = budget.bound()
        allowed = [bound.absolute + bound.relative * s for s in run["start"]]
        ratios = [m / a for m, a in zip(run["moved"], allowed, strict=True)]
        print(case["optim"], case["lr_scheduler_type"], run["optimizer"], f"fused={run['fused']}",
              f"bound {bound.absolute:.4g}", f"largest move / bound {max(ratios):.6f}")
        assert max(ratios) <= 1.0 + 1e-5, (case, max(ratios))
        if case["optim"].startswith("adamw") and not case.get("weight_decay"):
            assert min(ratios) >= 0.995, (case, min(ratios))  # attained: the exact worst case
    assert runs[0]["fused"] is True  # transformers' default optimizer on torch >= 2.8 is the fused AdamW
