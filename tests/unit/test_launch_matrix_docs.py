"""docs/gpu.md's launch-plan matrix is what the planner emits today (regenerate and compare)."""

from __future__ import annotations

from tests.helpers import launch_matrix


def test_docs_matrix_is_up_to_date() -> None:
    assert launch_matrix.committed() == launch_matrix.render(), (
        "docs/gpu.md is stale: run `python -m tests.helpers.launch_matrix --write`")


def test_matrix_covers_ten_models_and_four_profiles() -> None:
    table = launch_matrix.render().splitlines()
    assert len(table) - 2 >= 10 and len(launch_matrix.PROFILES) >= 4
