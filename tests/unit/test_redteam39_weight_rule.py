"""Red team of issue 39, finding B6 and two false flags (branch ``redteam``, c08c4f7): the ``weights`` rule is the
bound the optimizer implies (:mod:`ftagent.integrity.movement`), not a cosine floor tuned to the cheats seen.

* **B6, mostly another checkpoint.** Each tensor ``W_other + c * W_base``, ``c`` chosen for cosine 0.12 to the
  base, is 99 % another model by energy and passed the 0.1 floor. It moves nearly every value by the weights'
  own scale; the run that claims to have made it (100 steps at 1e-4: no value moves more than 0.016) cannot.
* **False flag: a grown vocabulary.** ``resize_vocab`` / ``add_special_tokens`` append embedding rows; the
  validated run grew the same way. Only the base's rows are compared, and the validated run's size accepted.
* The rule's parts on real files: the trainer's record, LoRA factors against where peft starts them, LoRA+, DoRA,
  a merged model, a chained loop, and validation refusing optimizers the rule cannot bound.

The bound itself against torch's real AdamW and transformers' real schedulers:
tests/integration/test_optimizer_bound.py; on real LLaMA-Factory runs: tests/integration/test_training.py.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
import yaml

from ftagent.core.errors import ErrorType
from ftagent.core.settings import load_settings
from ftagent.core.trace import Experiment
from ftagent.core.types import CodeResult, Hypothesis, ScenarioInfo
from ftagent.integrity.movement import adam_factor, refusal, run_budget, unbounded
from ftagent.tools.llamafactory.catalogue import read_catalogue
from ftagent.tools.llamafactory.validator import LlamaFactoryValidator
from tests.helpers.model_files import (
    DEMO_RUN,
    GuardedBase,
    candidate,
    finetuned,
    guarded_base,
    lora_factors,
    write_adapter,
    write_model,
    write_trainer_state,
)
from tests.unit.test_integrity_redteam import CONFIG, SHAPES, World, _flags, _weights, _write_safetensors

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llamafactory"
ATTN = [f"model.layers.{i}.self_attn.{p}_proj" for i in (0, 1) for p in "qkvo"]


def _norm(values: list[float]) -> float:
    return math.sqrt(sum(v * v for v in values))


def _mostly_other(base: dict[str, list[float]], other: dict[str, list[float]], cosine: float) -> dict[str, list[float]]:
    """``other + c * base`` per tensor, ``c`` giving the wanted cosine to the base (other ⟂ base)."""
    out = {}
    for name, values in base.items():
        if name.endswith("norm.weight"):  # both are ones
            out[name] = list(other[name])
            continue
        c = cosine * _norm(other[name]) / _norm(values) / math.sqrt(1 - cosine * cosine)
        out[name] = [o + c * b for o, b in zip(other[name], values, strict=True)]
    return out


# -- B6 and the false flag (the red team's tests) --------------------------------------------------------------
def test_a_model_that_is_99_percent_another_checkpoint_is_flagged(tmp_path):
    """Rule: no value moves farther from the base than the run's optimizer can move it (docs/trust.md)."""
    world = World(tmp_path)
    weights = _mostly_other(world.base_weights, _weights(seed=7), cosine=0.12)
    flags = _flags(world, world.loop(weights=weights))
    assert "weights" in flags, f"another checkpoint plus 1 % of the base (by energy) passed: flags {flags}"
    assert "moved farther from where training started than the run's optimizer can move them" in flags["weights"]
    assert "below cosine" not in flags["weights"]  # the cosine floor alone still passes it


def test_a_grown_vocabulary_is_not_flagged(tmp_path):
    """LLaMA-Factory's add_special_tokens / resize_vocab: the base's rows kept, new rows appended."""
    world = World(tmp_path)
    exp = world.loop()
    out = Path(exp.artefacts["model"])
    rng = random.Random(3)
    weights = {k: [v + rng.gauss(0, 0.001) for v in vals] for k, vals in world.base_weights.items()}
    rows, width = SHAPES["model.embed_tokens.weight"]
    weights["model.embed_tokens.weight"] += [rng.gauss(0, 0.02) for _ in range(64 * width)]
    shapes = {**SHAPES, "model.embed_tokens.weight": (rows + 64, width)}
    _write_safetensors(out / "model.safetensors", weights, shapes)
    (out / "config.json").write_text(json.dumps({**CONFIG, "vocab_size": rows + 64}))
    (Path(exp.artefacts["workspace"]) / "debug" / "output" / "config.json").write_text(
        json.dumps({**CONFIG, "vocab_size": rows + 64}))  # the validated run grew it the same way
    assert _flags(world, exp) == {}
    # grown to a size the validated run never had: both checks flag it
    (out / "config.json").write_text(json.dumps({**CONFIG, "vocab_size": rows + 128}))
    weights["model.embed_tokens.weight"] += [0.0] * (64 * width)
    _write_safetensors(out / "model.safetensors", weights, {**SHAPES, "model.embed_tokens.weight": (rows + 128, width)})
    assert set(_flags(world, exp)) == {"weights", "architecture"}


def test_a_grown_vocabulary_keeps_the_base_rows_to_the_bound(tmp_path):
    """The base's rows of a grown embedding are held to the run's bound like any value."""
    world = World(tmp_path)
    exp = world.loop()
    out = Path(exp.artefacts["model"])
    rows, width = SHAPES["model.embed_tokens.weight"]
    weights = {k: list(v) for k, v in world.base_weights.items()}
    weights["model.embed_tokens.weight"] = _weights(seed=7)["model.embed_tokens.weight"] + [0.0] * (64 * width)
    _write_safetensors(out / "model.safetensors", weights, {**SHAPES, "model.embed_tokens.weight": (rows + 64, width)})
    for folder in (out, Path(exp.artefacts["workspace"]) / "debug" / "output"):
        (folder / "config.json").write_text(json.dumps({**CONFIG, "vocab_size": rows + 64}))
    flags = _flags(world, exp)
    assert set(flags) == {"weights"} and "model.embed_tokens.weight" in flags["weights"], flags


# -- the bound ---------------------------------------------------------------------------------------------------
def test_adams_bound_is_attained_and_never_exceeded():
    """C(t) is the exact worst case of |m_hat / sqrt(v_hat)|: gradients shrinking by b1/b2 per step reach it,
    random ones (any scale, any sign) never exceed it (the update as torch's _single_tensor_adamw computes it)."""
    b1, b2 = 0.9, 0.999
    steps = np.arange(1, 401)
    bound = adam_factor(steps, b1, b2)
    assert bound[0] == pytest.approx(1.0) and bound[99] == pytest.approx(2.2434, abs=1e-4)
    assert np.all(np.diff(bound) > 0) and adam_factor(np.array([10**6]), b1, b2)[0] == pytest.approx(7.2703, abs=1e-4)
    for t in (1, 7, 50, 400):  # the worst case at step t
        m = v = 0.0
        for i in range(1, t + 1):
            g = (b1 / b2) ** (t - i)
            m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        ratio = (m / (1 - b1 ** t)) / math.sqrt(v / (1 - b2 ** t))
        assert ratio == pytest.approx(bound[t - 1], rel=1e-9)
    rng = np.random.default_rng(0)
    for _ in range(200):
        grads = rng.standard_normal(400) * np.exp(3 * rng.standard_normal(400))
        m = v = 0.0
        for t, g in enumerate(grads, 1):
            m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
            assert abs(m / (1 - b1 ** t)) / math.sqrt(v / (1 - b2 ** t)) <= bound[t - 1] * (1 + 1e-9)


def test_the_budget_follows_the_runs_schedule():
    cosine = {"learning_rate": 1e-3, "lr_scheduler_type": "cosine", "warmup_steps": 10}
    budget = run_budget(cosine, {"global_step": 100, "max_steps": 100})
    lam = [t / 10 if t < 10 else 0.5 * (1 + math.cos(math.pi * (t - 10) / 90)) for t in range(100)]
    expected = sum(lr * c for lr, c in zip(lam, adam_factor(np.arange(1, 101), 0.9, 0.999), strict=True))
    assert budget.step_sum == pytest.approx(expected) and budget.schedule == "cosine, exact"
    early = run_budget(cosine, {"global_step": 40, "max_steps": 100})  # stopped early: fewer steps, same horizon
    assert early.step_sum == pytest.approx(sum(lr * c for lr, c in zip(lam[:40], adam_factor(np.arange(1, 41), 0.9,
                                                                                               0.999), strict=True)))
    unknown = run_budget({**cosine, "lr_scheduler_type": "inverse_sqrt"}, {"global_step": 100, "max_steps": 100})
    assert unknown.step_sum == pytest.approx(float(np.sum(adam_factor(np.arange(1, 101), 0.9, 0.999))))
    # the rate logged at step s is the one step s used, lambda(s-1): what LLaMA-Factory's real run logs agrees
    agrees = [{"step": s, "learning_rate": 1e-3 * lam[s - 1]} for s in (1, 10, 50, 100)]
    assert run_budget(cosine, {"global_step": 100, "max_steps": 100, "log_history": agrees}).schedule == "cosine, exact"
    logged = {"global_step": 100, "max_steps": 100, "log_history": [{"step": 50, "learning_rate": 1e-3}]}
    assert run_budget(cosine, logged).schedule == "cosine, each step at the peak"  # logged above the computed
    with pytest.raises(ValueError, match="above the validated"):
        run_budget(cosine, {**logged, "log_history": [{"step": 50, "learning_rate": 1e-2}]})
    with pytest.raises(ValueError, match="the validated config allows 50"):
        run_budget({**cosine, "max_steps": 50}, {"global_step": 100, "max_steps": 100})


@pytest.mark.parametrize(("config", "key"), [
    ({"optim": "adafactor"}, "optim: adafactor"), ({"optim": "sgd"}, "optim: sgd"),
    ({"optim": "adamw_bnb_8bit"}, "optim: adamw_bnb_8bit"), ({"use_galore": True}, "use_galore"),
    ({"use_badam": True}, "use_badam"), ({"pissa_init": True}, "pissa_init"),
    ({"finetuning_type": "oft"}, "finetuning_type: oft"), ({"adam_beta1": 0.99, "adam_beta2": 0.95}, "adam_beta1"),
    # schedules whose factor rises above 1 (the bound takes every such scheduler's factor as at most 1)
    ({"lr_scheduler_type": "polynomial", "lr_scheduler_kwargs": {"power": -2.0}}, "power -2"),
    ({"lr_scheduler_type": "polynomial", "lr_scheduler_kwargs": {"lr_end": -1.0}}, "lr_end -1"),
    ({"lr_scheduler_type": "warmup_stable_decay", "lr_scheduler_kwargs": {"num_decay_steps": 5,
                                                                          "min_lr_ratio": 50}}, "min_lr_ratio 50"),
    ({"lr_scheduler_type": "cosine_warmup_with_min_lr", "lr_scheduler_kwargs": '{"min_lr": 0.5}'},
     "min_lr / learning_rate"),
    ({"lr_scheduler_type": "cosine_warmup_with_min_lr", "lr_scheduler_kwargs": {"min_lr_rate": 0.1,
                                                                                "warmup_lr_rate": 3}}, "warmup_lr_rate 3"),
    ({"lr_scheduler_type": "inverse_sqrt", "lr_scheduler_kwargs": {"timescale": -100}}, "timescale -100"),
])
def test_validation_refuses_an_optimizer_the_guard_cannot_bound(tmp_path, config, key):
    assert unbounded({"optim": "adamw_torch", "finetuning_type": "lora"}) == []
    for kind, kwargs in (("polynomial", {"power": 2.0, "lr_end": 0}), ("cosine_with_restarts", {"num_cycles": 7}),
                         ("warmup_stable_decay", {"num_decay_steps": 5, "min_lr_ratio": 0.1}),
                         ("cosine_warmup_with_min_lr", {"min_lr": 1e-5}), ("inverse_sqrt", {"timescale": 10}),
                         ("cosine_with_min_lr", {"min_lr_rate": 3.0})):  # the last computed exactly, any rate
        assert unbounded({"learning_rate": 1e-4, "lr_scheduler_type": kind, "lr_scheduler_kwargs": kwargs}) == []
    assert key in " ".join(unbounded(config))
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "data.json").write_text(json.dumps([{"instruction": "What is 2 + 3?", "input": "", "output": "5"}] * 4))
    (ws / "train.yaml").write_text(yaml.safe_dump({"finetuning_type": "lora", "learning_rate": 1e-4, **config}))

    class _NoRunner:
        name = "none"

        def run(self, *args, **kwargs):  # pragma: no cover - reached only when the refusal is missing
            raise AssertionError("refused before the micro-batch")

    scen = ScenarioInfo(benchmark="demo", base_model="builtin/tiny-qwen2", base_model_path="/models/tiny",
                        file_path=str(tmp_path), workspace_root=str(tmp_path))
    report = LlamaFactoryValidator(scen, load_settings(file_path=str(tmp_path)), runner=_NoRunner(),
                                   catalogue=read_catalogue(FIXTURES)).validate(CodeResult(workspace=str(ws)), None)
    assert not report.passed and report.failure.error_type is ErrorType.CONFIG, report.failure
    assert key in report.failure.message and "cannot bound" in report.failure.message
    assert refusal(config) is not None and "adamw_torch" in refusal(config)[1]


# -- the rule on candidates ---------------------------------------------------------------------------------------
@pytest.fixture
def world(tmp_path: Path) -> GuardedBase:
    return guarded_base(tmp_path)


def _weights_verdict(guard, exp: Experiment, parent: Experiment | None = None):
    return next(c for c in guard.check(exp, parent=parent).checks if c.name == "weights")


def test_a_model_without_the_trainers_record_is_flagged(world):
    root, base_w, _, guard = world
    cand = write_model(root / "cand", finetuned(base_w, 0.01, 3))
    exp = candidate(cand)
    (cand / "trainer_state.json").unlink()
    verdict = _weights_verdict(guard, exp)
    assert verdict.passed is False and "no readable trainer_state.json" in verdict.detail, verdict.detail
    (cand / "trainer_state.json").symlink_to(root / "elsewhere.json")
    (root / "elsewhere.json").write_text(json.dumps({"global_step": 10**6, "max_steps": 10**6}))
    assert _weights_verdict(guard, exp).passed is False  # a link is not the trainer's record


def test_the_honest_margin_is_reported_and_a_value_past_the_bound_is_flagged(world):
    root, base_w, _, guard = world
    run = {"learning_rate": 1e-4, "lr_scheduler_type": "constant", "max_steps": 100}  # bound 0.016
    tuned = finetuned(base_w, 0.05, 3)  # noise 0.001: the largest change ~0.005
    verdict = _weights_verdict(guard, candidate(write_model(root / "ok", tuned), run=run))
    assert verdict.passed, verdict.detail
    assert "largest movement 0." in verdict.detail and "0.016" in verdict.detail, verdict.detail
    tuned["model.norm.weight"][5] += 0.02  # one value of one tensor, past what 100 steps at 1e-4 can do
    verdict = _weights_verdict(guard, candidate(write_model(root / "one", tuned), run=run))
    assert verdict.passed is False and "1 of 26 tensors moved farther" in verdict.detail, verdict.detail
    assert "model.norm.weight" in verdict.detail


def test_lora_factors_are_held_to_where_peft_starts_them(world):
    root, _, base, guard = world
    run = {"finetuning_type": "lora", "learning_rate": 1e-4, "lr_scheduler_type": "constant", "max_steps": 100}
    factors = lora_factors(ATTN, rank=8, seed=5, scale=0.002)
    for module in ATTN:  # A as kaiming_uniform_ starts it (within 1/sqrt(128))
        factors[f"base_model.model.{module}.lora_A.weight"] = np.random.default_rng(1).uniform(
            -1 / math.sqrt(128), 1 / math.sqrt(128), (8, 128)).astype(np.float32)
    config = {"r": 8, "lora_alpha": 16, "base_model_name_or_path": str(base)}
    honest = _weights_verdict(guard, candidate(write_adapter(root / "ok", factors, config), run=run))
    assert honest.passed, honest.detail
    factors[f"base_model.model.{ATTN[0]}.lora_B.weight"][0, 0] = 0.05  # B starts at zero: 0.016 at most
    verdict = _weights_verdict(guard, candidate(write_adapter(root / "b", factors, config), run=run))
    assert verdict.passed is False and f"{ATTN[0]}.lora_B" in verdict.detail, verdict.detail
    # LoRA+ trains B at 16x the learning rate: the same B is within reach
    plus = _weights_verdict(guard, candidate(write_adapter(root / "plus", factors, config),
                                             run={**run, "loraplus_lr_ratio": 16}))
    assert plus.passed, plus.detail


def test_dora_magnitudes_start_at_the_weights_row_norms(world):
    root, base_w, base, guard = world
    module = ATTN[0]
    factors = lora_factors([module], rank=4, seed=5, scale=0.001)
    norms = np.linalg.norm(base_w[f"{module}.weight"], axis=1)
    # peft 0.18 saves it without ".weight" (utils/save_and_load.py get_peft_model_state_dict, DoRA)
    factors[f"base_model.model.{module}.lora_magnitude_vector"] = (norms + 0.001).astype(np.float32)
    config = {"r": 4, "lora_alpha": 8, "use_dora": True, "base_model_name_or_path": str(base)}
    run = {"finetuning_type": "lora", "use_dora": True, "learning_rate": 1e-4, "lr_scheduler_type": "constant",
           "max_steps": 100}
    assert _weights_verdict(guard, candidate(write_adapter(root / "ok", factors, config), run=run)).passed
    factors[f"base_model.model.{module}.lora_magnitude_vector"] = (norms * 3).astype(np.float32)
    verdict = _weights_verdict(guard, candidate(write_adapter(root / "far", factors, config), run=run))
    assert verdict.passed is False and "lora_magnitude_vector" in verdict.detail, verdict.detail


def test_a_merged_model_may_differ_from_its_start_only_by_the_adapter(world):
    root, base_w, base, guard = world
    run = {"finetuning_type": "lora", "learning_rate": 1e-3, "lr_scheduler_type": "constant", "max_steps": 100}
    factors = lora_factors(ATTN, rank=4, seed=5, scale=0.01)
    adapter = write_adapter(root / "out", factors, {"r": 4, "lora_alpha": 8, "base_model_name_or_path": str(base)})
    merged = {k: v.copy() for k, v in base_w.items()}
    for module in ATTN:
        b, a = factors[f"base_model.model.{module}.lora_B.weight"], factors[f"base_model.model.{module}.lora_A.weight"]
        merged[f"{module}.weight"] = (merged[f"{module}.weight"] + 2.0 * b @ a).astype(np.float32)
    write_model(adapter / "oc" / "merged_model", merged)
    exp = candidate(adapter, run=run)
    verdict = _weights_verdict(guard, exp)
    assert verdict.passed and "the merged model the evaluation served" in verdict.detail, verdict.detail
    merged["model.layers.0.mlp.up_proj.weight"] = merged["model.layers.0.mlp.up_proj.weight"] + 0.001  # not adapted
    write_model(adapter / "oc" / "merged_model", merged)
    verdict = _weights_verdict(guard, exp)
    assert verdict.passed is False and "model.layers.0.mlp.up_proj.weight" in verdict.detail, verdict.detail


def test_a_chained_loop_is_bounded_against_its_start_and_inherits_its_flag(world):
    """Issue 40's stages: a DPO loop trains the SFT loop's weights; its movement is measured from those."""
    root, base_w, _, guard = world
    parent_w = finetuned(base_w, 2.0, 3)  # the SFT loop moved every value far (0.77 allowed)
    start = write_model(root / "session" / "weights" / "loop_0", parent_w)
    parent = candidate(write_model(root / "sft", parent_w))
    assert _weights_verdict(guard, parent).passed
    run = {"learning_rate": 1e-5, "lr_scheduler_type": "constant", "max_steps": 50, "model_name_or_path": str(start)}
    # the workflow records the loop's StartModel as artefacts["start_weights"] (issue 40)
    child = candidate(write_model(root / "dpo", finetuned(parent_w, 0.001, 4)), run=run, start_weights=str(start))
    child.loop, child.hypothesis = 1, Hypothesis(hypothesis="dpo", stage="dpo", weights_from=0)
    verdict = _weights_verdict(guard, child, parent)
    assert verdict.passed, verdict.detail  # 0.00002 noise from the start, far beyond 50 steps at 1e-5 from the base
    parent.integrity_flags = ["weights: full model: 26 of 26 tensors moved farther ..."]
    verdict = _weights_verdict(guard, child, parent)
    assert verdict.passed is False and "started from weights flagged" in verdict.detail, verdict.detail
    assert _weights_verdict(guard, child).passed is False  # the parent's verdict not given: not assumed clean


def test_the_demo_run_record_covers_the_aggressive_fine_tune(world):
    """The honest variations of test_integrity_weights.py run with DEMO_RUN's record (bound 0.77)."""
    root, base_w, _, guard = world
    assert run_budget(DEMO_RUN, {"global_step": 300, "max_steps": 300}).bound().absolute == pytest.approx(0.7726,
                                                                                                          abs=1e-3)
    cand = write_model(root / "cand", finetuned(base_w, 2.0, 3))
    write_trainer_state(cand, 300)
    assert _weights_verdict(guard, candidate(cand)).passed


def test_the_workflow_gives_the_guard_the_loop_a_stage_started_from():
    from ftagent.core.trace import Trace
    from ftagent.integrity.guard import start_loop

    trace = Trace()
    sft = Experiment(loop=0, val_score=1.0)
    trace.record(sft)
    dpo = Experiment(loop=1, hypothesis=Hypothesis(hypothesis="dpo", stage="dpo", weights_from=0))
    assert start_loop(dpo, trace) is sft
    assert start_loop(Experiment(loop=2, hypothesis=Hypothesis(hypothesis="sft")), trace) is None
