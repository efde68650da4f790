"""The device check's steps as tests (GPU only; tests/gpu/conftest.py skips them without one).

The check env is ``DEVICE_CHECK_ENV`` (what run_device_check.sh builds from the wheels), else the tool
env (``FT_TOOLS_ENV`` / ``FT_FILE_PATH/envs/tools``). Each step is one test over a shared work folder.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import device_check as dc  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def prepared(check_env: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    import psutil

    from ftagent.core.hardware import detect_gpus
    from ftagent.core.types import ScenarioInfo
    from ftagent.models.builtin import build_builtin
    from ftagent.tools.llamafactory.memory import estimate_for_hardware

    os.environ.setdefault("FT_SANDBOX", "none")
    work = tmp_path_factory.mktemp("device_check")
    model = build_builtin(dc.MODEL, work / "models" / dc.MODEL, dc._py(check_env))
    data, _ = dc.make_data(work)
    _, longest = dc.tokens_per_sample(check_env, model, data)
    hardware = detect_gpus()
    memory = estimate_for_hardware(model, hardware, cpu_ram_gb=psutil.virtual_memory().total / 1e9)
    scenario = ScenarioInfo(benchmark="demo_add", base_model=f"builtin/{dc.MODEL}", base_model_path=str(model),
                            file_path=str(work / "ft"), workspace_root=str(work), hardware=hardware,
                            memory=memory.model_dump(mode="json"))
    return {"work": work, "model": model, "data": data, "memory": memory, "scenario": scenario, "runs": {},
            "longest": longest}


def test_preflight_sees_cuda(check_env: Path) -> None:
    found = dc.preflight(check_env, dry=False)
    assert found["cuda"] and found["device"]


def test_model_is_about_50m(prepared: dict) -> None:
    from ftagent.tools.llamafactory.memory import model_spec

    assert 45e6 < model_spec(prepared["model"]).params < 60e6


@pytest.mark.parametrize("method", dc.METHODS)
def test_training_ftagent_vs_hand(check_env: Path, prepared: dict, method: str) -> None:
    ours = dc.run_ftagent(prepared["work"], check_env, prepared["model"], method, prepared["scenario"], dry=False)
    hand = dc.run_by_hand(prepared["work"], check_env, ours["config"], method, dry=False, scenario=prepared["scenario"])
    prepared["runs"][method] = ours
    assert ours["final_loss"] is not None and math.isfinite(ours["final_loss"])
    assert ours["train_runtime_s"] and hand["train_runtime_s"]
    # the same YAML trains at the same speed through ftagent and by hand (within 2x either way)
    assert 0.5 < hand["train_runtime_s"] / ours["train_runtime_s"] < 2.0
    est = prepared["memory"].get("full_gc" if method == "full" else "lora")
    est_gb = est.static_gb_per_gpu + est.per_token_mb * dc.BATCH * prepared["longest"] / 1e3  # padded length
    assert 0 < hand["max_allocated_gb"] <= hand["max_reserved_gb"]
    assert hand["nvml_peak_gb"] >= hand["max_reserved_gb"] * 0.9  # NVML sees what the allocator reserved
    # a rule of thumb, not a fit: within a factor of 4 of the measured allocator peak
    assert est_gb / 4 < hand["max_allocated_gb"] < est_gb * 4, (est_gb, hand)


def test_hf_generation(check_env: Path, prepared: dict) -> None:
    model = Path(prepared["runs"]["full"]["output_dir"]) if "full" in prepared["runs"] else prepared["model"]
    found = dc.generate(dc._py(check_env), "hf", model, prepared["work"], dry=False)
    assert found["items"] == 512 and found["items_per_s"] > 0


def test_vllm_generation(check_env: Path, prepared: dict) -> None:
    python, tried = dc.find_vllm_python(check_env)
    if python is None:
        pytest.skip(f"no python imports vllm (tried {', '.join(tried)})")
    model = Path(prepared["runs"]["full"]["output_dir"]) if "full" in prepared["runs"] else prepared["model"]
    found = dc.generate(python, "vllm", model, prepared["work"], dry=False)
    hf = dc.generate(dc._py(check_env), "hf", model, prepared["work"], dry=False)
    assert found["items"] == 512 and found["items_per_s"] > 0
    assert abs(found["accuracy"] - hf["accuracy"]) <= 0.1  # greedy decoding: the same answers, mostly
