"""Issue 32 item 5: the forecast's probe cache is keyed by the load it was measured under and expires; the
age of a cached measurement is shown; a session that does not fit says what would; ``ftagent plan`` says
what it is doing while it measures."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from ftagent.core.forecast_arithmetic import EvalProbe, TrainPlan, TrainProbe, build_forecast, what_would_fit
from ftagent.finetune import probe_cache as pc
from ftagent.finetune import probes
from ftagent.views.forecast_text import forecast_lines
from ftagent.views.heartbeat import Heartbeat
from tests.helpers.resolved_run import resolved_run

TRAIN = TrainProbe(key="t", s_per_step=0.2, startup_s=10.0, validate_s=30.0, revalidate_s=15.0, steps=10)
EVAL = EvalProbe(key="e", fixed_s=12.0, s_per_item=0.01, items=200)


def _forecast(train: TrainProbe = TRAIN, **kw):
    plan = TrainPlan(method="full", rows=1000, max_steps=100, effective_batch=32, cutoff_len=64)
    return build_forecast(planner="heuristic", loop_n=3, plan=plan, train=train, evaluation=EVAL, growth=2.0, **kw)


def test_a_session_that_does_not_fit_says_how_many_loops_or_what_timeout_would() -> None:
    f = _forecast(timeout_s=120.0)  # baseline 14 s, loops 74 + 79 + 119 s: 286 s in all
    assert f.fits_timeout is False
    assert what_would_fit(f) == "--loop-n 1 would fit in 2 min, or --timeout 5 min for 3 loops"
    assert "what would fit: --loop-n 1 would fit in 2 min" in "\n".join(forecast_lines(f))
    tight = _forecast(timeout_s=60.0)
    assert what_would_fit(tight) == "not even one loop fits in 1 min: --timeout 2 min for 1 loop, 5 min for 3"
    assert what_would_fit(_forecast(timeout_s=10_000.0)) is None and what_would_fit(_forecast()) is None


def test_the_age_and_load_of_a_cached_measurement_are_shown() -> None:
    old = TRAIN.model_copy(update={"measured_at": time.time() - 3 * 3600, "load": "2 cpus, busy"})
    text = "\n".join(forecast_lines(_forecast(old)))
    assert "training speed (cached, measured 3 h ago under 2 cpus, busy, 10 steps)" in text
    now = TRAIN.model_copy(update={"measured_at": time.time(), "load": "2 cpus, idle"})
    assert "training speed (measured now under 2 cpus, idle" in "\n".join(forecast_lines(_forecast(now)))


def _scenario():
    return SimpleNamespace(base_model="builtin/tiny-qwen2", benchmark="demo_add",
                           hardware=SimpleNamespace(gpus=[], gpu_count=0))


def test_the_cache_key_holds_the_cpus_and_the_load_band(monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = {"finetuning_type": "lora", "cutoff_len": 64}
    monkeypatch.setattr(pc.os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    keys = {}
    for load in (0.2, 1.5, 3.0, 9.0):  # per CPU: 0.1 idle, 0.75 busy, 1.5 loaded, 4.5 overloaded
        monkeypatch.setattr(pc.os, "getloadavg", lambda load=load: (load, load, load))
        pc.machine_load.cache_clear()
        keys[pc.machine_load()] = (pc.train_key(_scenario(), recipe), pc.eval_key(_scenario()))
    pc.machine_load.cache_clear()
    assert list(keys) == ["2 cpus, idle", "2 cpus, busy", "2 cpus, loaded", "2 cpus, overloaded"]
    assert len({k for pair in keys.values() for k in pair}) == 8  # no band reuses another's probe


def test_a_cached_probe_expires_after_a_day(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pc.store(tmp_path, "train:x", {**TRAIN.model_dump(), "measured_at": time.time() - 3600})
    pc.store(tmp_path, "train:old", {**TRAIN.model_dump(), "measured_at": time.time() - pc.PROBE_MAX_AGE_S - 1})
    pc.store(tmp_path, "train:undated", TRAIN.model_dump())  # measured_at 0: an older ftagent's entry
    assert pc.cached_probe(tmp_path, "train:x") is not None
    assert pc.cached_probe(tmp_path, "train:old") is None and pc.cached_probe(tmp_path, "train:undated") is None
    assert set(json.loads((tmp_path / "forecast" / "probes.json").read_text())) == {
        "train:x", "train:old", "train:undated"}


def test_measure_training_measures_again_when_the_cache_is_stale(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """An expired probe is not returned: the probe runs (here it fails at once: no components)."""
    monkeypatch.setattr(probes, "first_recipe", lambda _s: {"finetuning_type": "lora"})
    settings = SimpleNamespace(ft=SimpleNamespace(file_path=str(tmp_path)))
    key = pc.train_key(_scenario(), {"finetuning_type": "lora"})
    pc.store(tmp_path, key, {**TRAIN.model_dump(), "measured_at": time.time() - 2 * pc.PROBE_MAX_AGE_S})
    import ftagent.finetune.components as components_module

    def no_components(*_a, **_k):
        raise RuntimeError("probe ran")

    monkeypatch.setattr(components_module, "build_components", no_components)
    with pytest.raises(RuntimeError, match="probe ran"):
        probes.measure_training(_scenario(), settings, runner=None, run=resolved_run(), limit=probes.no_deadline)
    pc.store(tmp_path, key, {**TRAIN.model_dump(), "measured_at": time.time() - 60})
    probe, spent = probes.measure_training(_scenario(), settings, runner=None, run=resolved_run(), limit=probes.no_deadline)
    assert spent == 0.0 and probe.s_per_step == TRAIN.s_per_step  # fresh: reused


def test_the_heartbeat_says_each_stage_and_then_beats() -> None:
    lines: list[str] = []
    with Heartbeat(lines.append, every=0.05) as beat:
        beat.stage("measuring the training speed")
        time.sleep(0.3)
    assert lines[0] == "measuring the training speed ..."
    assert len(lines) >= 3 and all(ln.startswith("  still measuring the training speed: ") for ln in lines[1:])


def test_plan_prints_progress_on_stderr_while_it_measures(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI wires plan_finetune's stages into the heartbeat (stderr); the forecast stays on stdout."""
    from typer.testing import CliRunner

    import ftagent.finetune.plan as plan
    import ftagent.views.heartbeat as hb
    from ftagent.cli.main import app

    def fake_plan(options, progress=None):
        progress("evaluating the base model")
        time.sleep(0.3)
        return _forecast(timeout_s=120.0)

    monkeypatch.setattr(plan, "plan_finetune", fake_plan)
    monkeypatch.setattr(hb, "HEARTBEAT_S", 0.05)
    monkeypatch.setattr(hb.Heartbeat.__init__, "__defaults__", (0.05,))
    res = CliRunner().invoke(app, ["plan", "--benchmark", "demo_add", "--base-model", "builtin/tiny-qwen2"])
    assert res.exit_code == 0, res.output
    assert "evaluating the base model ..." in res.stderr and "still evaluating the base model" in res.stderr
    assert "what would fit" in res.stdout and "still" not in res.stdout


def test_the_probe_keeps_to_the_session_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 42 item 6: the forecast's training probe ran its data step and micro-batch with their own
    timeouts (1,200 s and 1,800 s) whatever was left of --timeout (d350dfe: _ProbeContext.limit returned
    them unchanged); now each step gets at most what is left, and nothing runs once it is used up."""
    import ftagent.finetune.components as components_module
    from ftagent.core.errors import EnvironmentFailure
    from ftagent.core.types import CodeResult, ValidationReport
    from ftagent.finetune.app import deadline_limit
    from ftagent.tools.llamafactory.config import load_lf_defaults
    from ftagent.tools.llamafactory.validator import LlamaFactoryValidator

    seen: dict[str, float] = {}

    class Coder:
        def code(self, _h, _t, work, _prev, ctx):
            seen["code"] = ctx.limit(1200.0)
            return CodeResult(workspace=str(work))

    class Data:
        def prepare(self, _code, _h, _t, ctx, debug):
            seen["data"] = ctx.limit(1200.0)

        def scan_config(self, _config_path):
            return None

    class Validator(LlamaFactoryValidator):
        def __init__(self) -> None:  # the probe reads only its micro-batch defaults
            self.defaults = load_lf_defaults()

        def validate(self, code, ctx):
            seen["micro_batch"] = ctx.limit(1800.0)
            return ValidationReport(passed=False)

    monkeypatch.setattr(probes, "first_recipe", lambda _s: {"finetuning_type": "lora"})
    monkeypatch.setattr(components_module, "build_components", lambda *_a, **_k: SimpleNamespace(
        coder=Coder(), data=Data(), validator=Validator()))
    settings = SimpleNamespace(ft=SimpleNamespace(file_path=str(tmp_path)))
    started = time.time() - 3540  # a one-hour --timeout with one minute left
    with pytest.raises(RuntimeError):
        probes.measure_training(_scenario(), settings, runner=None, run=resolved_run(), use_cache=False,
                            limit=deadline_limit(3600.0, started, "before the forecast's training probe"))
    assert 0 < seen["data"] <= 60 and 0 < seen["micro_batch"] <= 60
    over = deadline_limit(3600.0, time.time() - 3601, "before the forecast's training probe")
    with pytest.raises(EnvironmentFailure, match="used up before the forecast's training probe"):
        over(1.0)
