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


FACTORS = r'''
import json, sys
import torch
from transformers import get_scheduler

out = []
for case in json.loads(sys.argv[1]):
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=case["learning_rate"])
    sched = get_scheduler(case["lr_scheduler_type"], opt, num_warmup_steps=case["warmup_steps"],
                          num_training_steps=case["steps"], scheduler_specific_kwargs=case["kwargs"])
    rates = []
    for step in range(case["steps"]):
        rates.append(opt.param_groups[0]["lr"])  # the rate this step uses
        opt.step()
        if step < case["steps"] - 1:  # (polynomial with power < 0 divides by zero at the horizon)
            sched.step()
    out.append(max(abs(r) for r in rates) / case["learning_rate"])
print(json.dumps(out))
'''

# (lr_scheduler_type, lr_scheduler_kwargs): the bound takes these schedulers' factors as at most 1
SCHEDULES = [
    ("polynomial", {}), ("polynomial", {"power": 2.0, "lr_end": 0.0}), ("polynomial", {"power": -2.0}),
    ("polynomial", {"lr_end": -0.05}),
    ("cosine_with_restarts", {"num_cycles": 7}), ("inverse_sqrt", {}), ("inverse_sqrt", {"timescale": 3}),
    ("warmup_stable_decay", {"num_decay_steps": 20, "min_lr_ratio": 0.1}),
    ("warmup_stable_decay", {"num_decay_steps": 20, "min_lr_ratio": 20.0}),
    ("cosine_warmup_with_min_lr", {"min_lr": 1e-4}), ("cosine_warmup_with_min_lr", {"min_lr": 0.5}),
    ("cosine_warmup_with_min_lr", {"min_lr_rate": 0.1, "warmup_lr_rate": 4.0}),
]


def test_validation_accepts_exactly_the_schedules_whose_real_factor_stays_at_most_one(tools_python: Path) -> None:
    """transformers' own schedulers: a scheduler the bound does not compute is accepted (no CONFIG refusal) only
    where its real factor never rose above 1 in the run (issue 39, red team B6 through a session)."""
    from ftagent.integrity.movement import schedule_above_peak

    cases = [{"lr_scheduler_type": kind, "kwargs": kwargs, "learning_rate": 1e-2, "warmup_steps": 5, "steps": 60}
             for kind, kwargs in SCHEDULES]
    result = subprocess.run([str(tools_python), "-c", FACTORS, json.dumps(cases)], capture_output=True, text=True,
                            timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    peaks = json.loads(result.stdout.strip().splitlines()[-1])
    for case, peak in zip(cases, peaks, strict=True):
        refused = schedule_above_peak({"learning_rate": case["learning_rate"], "warmup_steps": 5,
                                       "lr_scheduler_type": case["lr_scheduler_type"],
                                       "lr_scheduler_kwargs": case["kwargs"]})
        print(case["lr_scheduler_type"], case["kwargs"], f"largest |factor| {peak:.4g}", "refused" if refused else "")
        assert bool(refused) == (peak > 1 + 1e-9), (case, peak, refused)
