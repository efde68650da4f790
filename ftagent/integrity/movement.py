"""How far one training run can move a weight: the bound the optimizer implies (issue 39, red team B6).

**Rule.** No value of the trained weights differs from the value the run started from by more than the run's
optimizer can move it in the steps it took. A cosine floor cannot say this: a tensor ``W_other + c * W_base``
with ``c`` chosen for cosine 0.12 is 99 % another checkpoint by energy and passes a 0.1 floor; it moves
nearly every value by the scale of the weights, which a run moves them by only if its learning rates add
up to that scale.

**Mechanism: Adam's step is bounded, whatever the gradients.** torch 2.x ``torch.optim.AdamW`` (``_single_tensor_adamw``,
and the fused and foreach kernels, same algorithm) takes, at its step ``t`` with learning rate ``lr_t``::

    p <- p * (1 - lr_t * wd)                                  (decoupled weight decay)
    p <- p - lr_t * m_hat / (sqrt(v_hat) + eps)               m_hat = m / (1 - b1^t), v_hat = v / (1 - b2^t)

with ``m = (1-b1) sum_k b1^k g_(t-k)``, ``v = (1-b2) sum_k b2^k g_(t-k)^2`` over the gradients so far. By
Cauchy-Schwarz, ``|m| <= (1-b1) sqrt(sum_k b1^2k / b2^k) sqrt(v / (1-b2))``, so for every element and every
gradient sequence ``|m_hat / sqrt(v_hat)| <= C(t)``::

    C(t) = (1-b1) / (1-b1^t) * sqrt((1-b2^t) / (1-b2)) * sqrt(sum_(k<t) (b1^2/b2)^k)

and ``eps`` only shrinks the step. ``C(1) = 1``; ``C`` grows with ``t`` to ``(1-b1) / sqrt((1-b2)(1-b1^2/b2))``
-- for the defaults (0.9, 0.999) 1.61 at step 50, 2.24 at 100, 5.78 at 1,000 and 7.27 from ~10,000 on. The
bound is attained at every step by gradients that grow by ``b2/b1`` per step (the history Cauchy-Schwarz needs
is the same at each step), so the sum below is the exact worst case of a run, not an estimate
(tests/integration/test_optimizer_bound.py: torch's AdamW reaches 0.998-0.9996 of it).
Kingma & Ba 2015 (section 2.1) give ``(1-b1)/sqrt(1-b2)`` = 3.16 as the worst case; that is the case of a single
non-zero gradient, and longer sequences exceed it, so this module uses ``C(t)``. The bound needs ``b1^2 < b2``
(otherwise ``C`` grows without limit): such betas are refused. Over a run, the deviation ``d`` of an element from
its start value ``p0`` obeys ``|d_t| <= |d_(t-1)| + lr_t wd |p0| + lr_t C(t)``, so::

    |p_T - p0| <= sum_t lr_t C(t)  +  wd * sum_t lr_t * |p0|

plus rounding: float32 master weights (LLaMA-Factory upcasts trainable parameters to float32 unless
``pure_bf16``: ``model/adapter.py`` ``init_adapter``) round each step's result by at most 2^-24 of the value,
and the step's own float32 arithmetic errs by a few ulps (:data:`F32_STEP_SLACK` allows 8 per step);
with ``pure_bf16`` each step's result is rounded to BF16, which at most doubles a step (the nearest BF16 value
to ``p + delta`` is no farther from ``p`` than ``2|delta|``), and the optimizer's own BF16 arithmetic is given a
further 2^-4 of the step (an allowance, not a proof). The storage dtype's rounding is the comparison's
(:mod:`ftagent.integrity.tensor_compare`).

``lr_t`` is the run's own schedule: the validated ``learning_rate`` times the scheduler's factor for the step
(transformers 4.57 ``optimization.py``: the optimizer's step ``t`` uses ``lambda(t-1)``; ``linear``, ``cosine``,
``constant``, ``constant_with_warmup`` and ``cosine_with_min_lr`` are computed exactly, with the warm-up of
``TrainingArguments.get_warmup_steps``; every other scheduler of transformers keeps ``lambda <= 1``, which is
used). The steps are the trainer's own record, ``trainer_state.json`` (``global_step``; ``max_steps``, the
scheduler's horizon), which LLaMA-Factory's workflows and ftagent's GRPO script write next to the weights
(``trainer.save_state``); the learning rates it logged must not exceed the computed ones.

**Other optimizers.** Adagrad (``optim: adagrad``, ``torch.optim.Adagrad``): ``|g_t| / sqrt(sum_(i<=t) g_i^2) <= 1``,
so ``C = 1``, and its weight decay is an L2 term inside the gradient (no separate share). Every other choice has
no such bound or one this module does not derive: Adafactor (an update clipped only in RMS), SGD (the
gradient's own size), 8- and 4-bit states (a quantised ``v`` can be 0), GaLore and APOLLO (projected updates),
Adam-mini (one ``v`` per block), Muon (orthogonalised updates), BAdam (half-precision block updates), the
schedule-free and other optimizers of transformers' ``OptimizerNames``; LLaMA-Factory's PiSSA starts an adapter
from the base's principal components instead of zero, and OFT is not a sum ``W + B A``. :func:`unbounded`
names them; validation refuses them (CONFIG), and the guard flags a run that used one.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from ftagent.integrity.safetensors_io import WeightsError, open_regular

TRAINER_STATE = "trainer_state.json"
MAX_STATE_BYTES = 64 << 20  # log_history of a long run logged every step is a few MB
#: transformers 4.57 ``TrainingArguments.optim`` default with torch >= 2.8 (``training_args.py`` ``default_optim``)
DEFAULT_OPTIM = "adamw_torch_fused"
#: optimizer name -> how each step is bounded ("adam": C(t) from the betas; "unit": |step| <= lr)
BOUNDED_OPTIMIZERS = {"adamw_torch": "adam", "adamw_torch_fused": "adam", "adagrad": "unit"}
#: LLaMA-Factory 0.9.5 switches that replace the optimizer or the adapter's start (``train/trainer_utils.py``
#: ``create_custom_optimizer``; ``model/adapter.py`` for PiSSA)
UNBOUNDED_SWITCHES = {
    "use_galore": "GaLore projects each update through a low-rank basis",
    "use_apollo": "APOLLO scales updates by projected statistics",
    "use_badam": "BAdam updates blocks in half precision",
    "use_adam_mini": "Adam-mini shares one second moment per block",
    "use_muon": "Muon orthogonalises each update",
    "pissa_init": "PiSSA starts the adapter from the base's principal components, not from zero",
}
#: float32 rounding per step, relative: the result's half ulp (2^-24) and the update's own arithmetic (bias
#: corrections, sqrt, division, a few ulps each): 8 ulps per step in all
F32_STEP_SLACK = 2.0 ** -21
PURE_BF16_FACTOR = 2.0 * (1 + 2.0 ** -4)
DEFAULT_BETAS = (0.9, 0.999)  # TrainingArguments.adam_beta1 / adam_beta2
EXACT_SCHEDULES = ("linear", "cosine", "constant", "constant_with_warmup", "cosine_with_min_lr")


def _on(config: dict[str, Any], key: str) -> bool:
    value = config.get(key)
    return value is True or str(value).strip().lower() in ("true", "1", "yes")


def _float(config: dict[str, Any], key: str, default: float) -> float:
    value = config.get(key)
    try:
        return default if value is None or value == "" else float(value)
    except (TypeError, ValueError):
        return math.nan


def betas(config: dict[str, Any]) -> tuple[float, float]:
    return _float(config, "adam_beta1", DEFAULT_BETAS[0]), _float(config, "adam_beta2", DEFAULT_BETAS[1])


def optimizer_of(config: dict[str, Any]) -> str:
    return str(config.get("optim") or DEFAULT_OPTIM).strip().lower()


def unbounded(config: dict[str, Any]) -> list[str]:
    """Why the steps of a run with ``config`` cannot be bounded (empty when they can): each reason names the key.
    Validation refuses such a config; the guard flags a model trained with one."""
    reasons = []
    optim = optimizer_of(config)
    if optim not in BOUNDED_OPTIMIZERS:
        reasons.append(f"optim: {optim} (the integrity guard bounds how far training moves each weight only for "
                       f"{', '.join(BOUNDED_OPTIMIZERS)})")
    elif BOUNDED_OPTIMIZERS[optim] == "adam":
        b1, b2 = betas(config)
        if not (0 <= b1 < 1 and 0 <= b2 < 1 and b1 * b1 < b2):
            reasons.append(f"adam_beta1 {b1:g} / adam_beta2 {b2:g} (Adam's step is bounded only when "
                           "0 <= beta1 < sqrt(beta2) < 1)")
    reasons += schedule_above_peak(config)
    reasons += [f"{key}: {why}" for key, why in UNBOUNDED_SWITCHES.items() if _on(config, key)]
    if str(config.get("finetuning_type") or "").strip().lower() == "oft":
        reasons.append("finetuning_type: oft (an orthogonal rotation of the weights, not a bounded sum W + B A)")
    return reasons


def _kwarg(kwargs: dict[str, Any], key: str, default: float) -> float:
    value = kwargs.get(key, default)
    try:
        return default if value is None else float(value)
    except (TypeError, ValueError):
        return math.nan


def schedule_above_peak(config: dict[str, Any]) -> list[str]:
    """Why a scheduler outside :data:`EXACT_SCHEDULES` could set a step's rate above the peak (empty when it
    cannot): the bound takes such a scheduler's factor as at most 1, which transformers 4.57's lambdas
    (``optimization.py``) keep only with these ``lr_scheduler_kwargs``: ``polynomial`` (``pct_remaining**power``)
    with ``power >= 0`` and ``lr_end >= 0``; ``cosine_warmup_with_min_lr`` with ``min_lr_rate`` (or
    ``min_lr / learning_rate``) and ``warmup_lr_rate`` in [0, 1]; ``warmup_stable_decay`` with ``min_lr_ratio`` in
    [0, 1] (its factor after the decay is ``min_lr_ratio`` itself); ``inverse_sqrt`` with ``timescale > 0``.
    ``cosine_with_restarts`` and ``reduce_lr_on_plateau`` stay at or below 1 for any value (torch refuses a
    plateau factor >= 1). A run whose factor rose above 1 without logging it would move farther than the
    bound, so validation refuses such kwargs (red team B6 through a session, issue 39)."""
    kind = str(config.get("lr_scheduler_type") or "linear").strip().lower()
    kwargs, lr = _kwargs(config), _float(config, "learning_rate", 5e-5)
    unit = {"cosine_warmup_with_min_lr": ("min_lr_rate", "warmup_lr_rate"),
            "warmup_stable_decay": ("min_lr_ratio",)}.get(kind, ())
    values = {key: _kwarg(kwargs, key, 0.0) for key in unit if key in kwargs}
    if kind == "cosine_warmup_with_min_lr" and "min_lr" in kwargs:
        values["min_lr / learning_rate"] = _kwarg(kwargs, "min_lr", 0.0) / lr if lr > 0 else math.nan
    bad = [f"{key} {value:g}" for key, value in values.items() if not 0 <= value <= 1]
    if kind == "polynomial":
        bad += [f"{key} {value:g}" for key, value in (("power", _kwarg(kwargs, "power", 1.0)),
                                                      ("lr_end", _kwarg(kwargs, "lr_end", 1e-7))) if not value >= 0]
    if kind == "inverse_sqrt" and kwargs.get("timescale") is not None and not _kwarg(kwargs, "timescale", 1) > 0:
        bad.append(f"timescale {kwargs.get('timescale')}")
    if not bad:
        return []
    return [f"lr_scheduler_type: {kind} with lr_scheduler_kwargs {', '.join(bad)} (a step's learning rate could "
            "rise above learning_rate, which the integrity guard's bound takes as every step's most)"]


def adam_factor(steps: np.ndarray, b1: float, b2: float) -> np.ndarray:
    """``C(t)`` of the module doc for each optimizer step ``t`` (1-based), as float64."""
    t = steps.astype(np.float64)
    g = b1 * b1 / b2
    geometric = (-np.expm1(t * math.log(g)) / (1 - g)) if g > 0 else np.ones_like(t)
    first = (1 - b1) / -np.expm1(t * math.log(b1)) if b1 > 0 else np.ones_like(t)
    second = np.sqrt(-np.expm1(t * math.log(b2)) / (1 - b2)) if b2 > 0 else np.ones_like(t)
    return np.asarray(first * second * np.sqrt(geometric), dtype=np.float64)


def warmup_steps(config: dict[str, Any], horizon: int) -> int:
    """transformers 4.57 ``TrainingArguments.get_warmup_steps``: ``warmup_steps`` when > 0, else the ratio's."""
    steps = int(_float(config, "warmup_steps", 0.0) or 0)
    return steps if steps > 0 else math.ceil(horizon * (_float(config, "warmup_ratio", 0.0) or 0.0))


def _kwargs(config: dict[str, Any]) -> dict[str, Any]:
    value = config.get("lr_scheduler_kwargs") or {}
    if isinstance(value, str):  # TrainingArguments json.loads a string that starts with "{"
        try:
            value = json.loads(value)
        except ValueError:
            value = {}
    return value if isinstance(value, dict) else {}


def schedule(config: dict[str, Any], horizon: int, current: np.ndarray) -> tuple[np.ndarray, bool]:
    """(the scheduler's factor ``lambda(current)``, whether exact): transformers 4.57 ``optimization.py``'s
    lambdas for :data:`EXACT_SCHEDULES`, else 1 (every other scheduler's factor is at most 1)."""
    kind = str(config.get("lr_scheduler_type") or "linear").strip().lower()
    if kind not in EXACT_SCHEDULES:
        return np.ones_like(current, dtype=np.float64), False
    if kind == "constant":
        return np.ones_like(current, dtype=np.float64), True
    warm = warmup_steps(config, horizon)
    step = current.astype(np.float64)
    ramp = step / max(1.0, float(warm))
    progress = (step - warm) / max(1.0, float(horizon - warm))
    kwargs = _kwargs(config)
    if kind == "constant_with_warmup":
        after = np.ones_like(step)
    elif kind == "linear":
        after = np.maximum(0.0, (horizon - step) / max(1.0, float(horizon - warm)))
    else:
        cycles = float(kwargs.get("num_cycles", 0.5))
        after = 0.5 * (1.0 + np.cos(math.pi * cycles * 2.0 * progress))
        if kind == "cosine_with_min_lr":
            base_lr = _float(config, "learning_rate", 0.0)
            rate = float(kwargs.get("min_lr_rate", (float(kwargs.get("min_lr", 0.0)) / base_lr) if base_lr else 0.0))
            after = after * (1 - rate) + rate
        after = np.maximum(0.0, after)
    return np.where(step < warm, ramp, after), True


class ElementBound(BaseModel):
    """How far a value that started at ``s`` can end from it: ``absolute + relative * |s|`` (before the storage
    dtype's rounding, which the comparison adds)."""

    absolute: float
    relative: float = 0.0

    def plus(self, other: ElementBound) -> ElementBound:
        return ElementBound(absolute=self.absolute + other.absolute, relative=self.relative + other.relative)


class RunBudget(BaseModel):
    """One run's bound (see the module doc): per unit of learning rate, what each step can add."""

    optimizer: str
    steps: int  # optimizer steps taken (trainer_state.json global_step)
    horizon: int  # the scheduler's num_training_steps (trainer_state.json max_steps)
    learning_rate: float
    step_sum: float  # sum over steps of lambda(t-1) * C(t) (* the pure_bf16 factor)
    lr_sum: float  # sum over steps of lambda(t-1)
    weight_decay: float  # decoupled (Adam); 0 for Adagrad, whose decay is inside the gradient
    multipliers: dict[str, float] = Field(default_factory=dict)  # tensor kind -> lr multiplier (LoRA+)
    schedule: str = ""  # how lambda was obtained, for the verdict's detail

    def bound(self, kind: str = "full") -> ElementBound:
        """The deviation bound of a tensor of ``kind`` (``full``, ``lora_A``, ``lora_B``, ``lora_embedding_A``,
        ``lora_embedding_B``, ``magnitude``, ``copy``, ``copy_1d``) from its start value."""
        lr = self.learning_rate * self.multipliers.get(kind, 1.0)
        slack = self.steps * F32_STEP_SLACK
        absolute = lr * self.step_sum
        return ElementBound(absolute=absolute * (1 + slack), relative=lr * self.lr_sum * self.weight_decay + slack)

    def words(self) -> str:
        return (f"{self.optimizer}, {self.steps} steps at learning rate <= {self.learning_rate:g} ({self.schedule}): "
                f"no value moves more than {self.bound().absolute:.3g} + {self.bound().relative:.3g}*|start|")


def lora_multipliers(config: dict[str, Any]) -> dict[str, float]:
    """LoRA+'s learning rates per tensor kind (LLaMA-Factory 0.9.5 ``trainer_utils._create_loraplus_optimizer``:
    ``lora_B`` and every 1-D parameter at ``lr * loraplus_lr_ratio``, ``lora_embedding_B`` at
    ``loraplus_lr_embedding``, the rest at ``lr``)."""
    ratio = config.get("loraplus_lr_ratio")
    if ratio is None or ratio == "":
        return {}
    lr = _float(config, "learning_rate", 0.0)
    embedding = _float(config, "loraplus_lr_embedding", 1e-6)
    fast = max(1.0, float(ratio))
    return {"lora_B": fast, "magnitude": fast, "copy_1d": fast,
            "lora_embedding_B": max(1.0, embedding / lr) if lr > 0 else 1.0}


def read_state(folder: Path) -> dict[str, Any]:
    """``trainer_state.json`` of a model folder, read without following a link.

    Raises:
        WeightsError: missing, a link or special file, too large, or not a JSON object.
    """
    try:
        with open_regular(Path(folder) / TRAINER_STATE) as fh:
            data = fh.read(MAX_STATE_BYTES + 1)
    except WeightsError as exc:
        raise WeightsError(f"no readable {TRAINER_STATE} (the trainer's record of its steps): {exc}") from exc
    if len(data) > MAX_STATE_BYTES:
        raise WeightsError(f"{TRAINER_STATE} is larger than {MAX_STATE_BYTES >> 20} MiB")
    try:
        state = json.loads(data)
    except ValueError as exc:
        raise WeightsError(f"{TRAINER_STATE} is not JSON") from exc
    if not isinstance(state, dict):
        raise WeightsError(f"{TRAINER_STATE} is not a JSON object")
    return state


def _logged_above(state: dict[str, Any], lr: float, factors: np.ndarray) -> float:
    """The largest logged learning rate over the computed one at its step (0 when none exceeds it). The rate
    logged at step ``s`` is the one step ``s`` used, ``lambda(s-1)`` (transformers 4.57 ``Trainer._inner_training_loop``
    takes ``_get_learning_rate()`` before ``lr_scheduler.step()``)."""
    worst = 0.0
    for row in state.get("log_history") or []:
        if not isinstance(row, dict) or not isinstance(row.get("learning_rate"), (int, float)):
            continue
        step = row.get("step")
        if isinstance(step, int) and 1 <= step <= len(factors):
            expected = lr * float(factors[step - 1])
            if row["learning_rate"] > expected * (1 + 1e-4) + 1e-12:
                worst = max(worst, float(row["learning_rate"]))
    return worst


def run_budget(config: dict[str, Any], state: dict[str, Any]) -> RunBudget:
    """The bound of a run trained with the validated ``config`` for the steps ``state`` (its trainer_state.json)
    records.

    Raises:
        WeightsError: the optimizer has no bound (:func:`unbounded`), or the record contradicts the config.
    """
    reasons = unbounded(config)
    if reasons:
        raise WeightsError("the run's steps cannot be bounded: " + "; ".join(reasons))
    steps, horizon = state.get("global_step"), state.get("max_steps")
    if not isinstance(steps, int) or steps < 0:
        raise WeightsError(f"{TRAINER_STATE} has no global_step")
    horizon = horizon if isinstance(horizon, int) and horizon > 0 else steps
    cap = int(_float(config, "max_steps", -1) or -1)
    if cap > 0 and steps > cap:
        raise WeightsError(f"{TRAINER_STATE} records {steps} steps, the validated config allows {cap}")
    lr = _float(config, "learning_rate", 5e-5)  # TrainingArguments.learning_rate default
    if not (lr >= 0 and math.isfinite(lr)):
        raise WeightsError(f"learning_rate {config.get('learning_rate')!r} is not a learning rate")
    optim = optimizer_of(config)
    factors, exact = schedule(config, horizon, np.arange(max(steps, horizon) + 1))
    above = _logged_above(state, lr, factors)
    if above > lr * (1 + 1e-4):
        raise WeightsError(f"{TRAINER_STATE} logs learning rate {above:g}, above the validated {lr:g}")
    if above:  # the schedule ran otherwise than computed: every step at the peak (a bound for any schedule)
        factors, exact = np.ones_like(factors), False
    used = factors[:steps]  # step t (1-based) uses lambda(t-1)
    per_step = adam_factor(np.arange(1, steps + 1), *betas(config)) if BOUNDED_OPTIMIZERS[optim] == "adam" \
        else np.ones(steps)
    step_sum = float(np.sum(used * per_step)) * (PURE_BF16_FACTOR if _on(config, "pure_bf16") else 1.0)
    decay = _float(config, "weight_decay", 0.0) if BOUNDED_OPTIMIZERS[optim] == "adam" else 0.0
    kind = str(config.get("lr_scheduler_type") or "linear")
    return RunBudget(optimizer=optim, steps=steps, horizon=horizon, learning_rate=lr, step_sum=step_sum,
                     lr_sum=float(np.sum(used)), weight_decay=max(0.0, decay), multipliers=lora_multipliers(config),
                     schedule=f"{kind}, {'exact' if exact else 'each step at the peak'}")


def refusal(config: dict[str, Any]) -> tuple[str, str] | None:
    """The CONFIG failure's (message, suggestion) for a config whose steps cannot be bounded (None when they can):
    validation refuses it before anything trains, so the guard never meets a model it cannot bound."""
    reasons = unbounded(config)
    if not reasons:
        return None
    return ("train.yaml trains with an optimizer whose steps the integrity guard cannot bound, so its model could "
            "never become the best: " + "; ".join(reasons),
            f"Use optim: {' or '.join(BOUNDED_OPTIMIZERS)} (the default is {DEFAULT_OPTIM}) with adam_beta1 < "
            "sqrt(adam_beta2), and drop " + ", ".join(k for k in UNBOUNDED_SWITCHES if _on(config, k))
            + (" and finetuning_type: oft" if "finetuning_type: oft" in " ".join(reasons) else "")
            + ("; keep lr_scheduler_kwargs so no step's rate exceeds learning_rate" if schedule_above_peak(config)
               else "") + ".")


def optimizer_rule() -> str:
    """The rule in the planner's words (the config prompt): which ``optim`` values and switches validation
    accepts, rendered from :data:`BOUNDED_OPTIMIZERS` and :data:`UNBOUNDED_SWITCHES`."""
    names = [f"`{DEFAULT_OPTIM}` (the default)"] + [f"`{n}`" for n in BOUNDED_OPTIMIZERS if n != DEFAULT_OPTIM]
    refused = ", ".join(f"`{k}`" for k in UNBOUNDED_SWITCHES)
    return (f"`optim` is {', '.join(names[:-1])} or {names[-1]}, with `adam_beta1` below the square root of "
            f"`adam_beta2`; {refused} and `finetuning_type: oft` are refused: the integrity guard bounds how far "
            "training moves each weight only for these")
