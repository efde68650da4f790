"""docs/gpu.md's launch-plan matrix is what the planner emits today (regenerate and compare)."""

from __future__ import annotations

from tests.helpers import launch_matrix


def test_docs_matrix_is_up_to_date() -> None:
    assert launch_matrix.committed() == launch_matrix.render(), (
        "docs/gpu.md is stale: run `python -m tests.helpers.launch_matrix --write`")
    assert launch_matrix.committed(start=launch_matrix.OFF_START, end=launch_matrix.OFF_END) == \
        launch_matrix.render_offload(), "docs/gpu.md is stale: run `python -m tests.helpers.launch_matrix --write`"


def test_matrix_covers_the_models_profiles_and_ram_sizes() -> None:
    """Issue 42 item 3: V100 and T4 columns (no bf16: fp16 training, float16/float32 serving); two RAM sizes."""
    table = launch_matrix.render().splitlines()
    assert len(table) - 2 >= 10 and {"1xV100", "1xT4"} <= set(launch_matrix.PROFILES)
    assert len(launch_matrix.RAM_SIZES) == 2


def test_ram_changes_nothing_unless_offload_is_allowed() -> None:
    for name, cfg in launch_matrix.models():
        for spec in launch_matrix.PROFILES:
            small, large = (launch_matrix.cell(launch_matrix.plan_of(name, cfg, spec, ram_gb=r, asked=False))
                            for r in launch_matrix.RAM_SIZES)
            assert small == large, (name, spec)
