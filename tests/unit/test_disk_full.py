"""A full disk stops the session with what to free (ftagent.core.disk)."""

from __future__ import annotations

import pytest

from ftagent.core.disk import check_disk_full, is_disk_full
from ftagent.core.errors import EnvironmentFailure


@pytest.mark.parametrize("line", [
    "OSError: [Errno 28] No space left on device: '/ws/output/model.safetensors'",
    "safetensors_rust.SafetensorError: Error while serializing: IoError(Os { code: 28, kind: StorageFull, "
    "message: \"No space left on device\" })",
    "OSError: [Errno 122] Disk quota exceeded",
])
def test_full_disk_lines_are_recognised(line, tmp_path) -> None:
    assert is_disk_full(f"step 3\n{line}\n")
    with pytest.raises(EnvironmentFailure, match=r"evaluation stopped: the disk is full \(.* GiB free"):
        check_disk_full(line, "evaluation", [tmp_path / "not-yet" / "made"])


def test_other_failures_pass_through() -> None:
    check_disk_full("ValueError: lr_scheduler_type bogus", "training", ["/"])
    assert not is_disk_full("") and not is_disk_full("the space left for improvement")
