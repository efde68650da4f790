"""A corrupt newest snapshot names the previous good one (issue #22.5); nothing is skipped silently."""

from __future__ import annotations

import pytest

from ftagent.core.errors import UserInputError
from ftagent.engine.session import Session, list_snapshots


def test_a_truncated_newest_snapshot_names_the_previous_good_one(tmp_path) -> None:
    session = Session.create(tmp_path / "log", config={"run": {"benchmark": "demo_add"}})
    session.save(0, 1, "propose")
    session.save(0, 2, "code")
    session.save(0, 3, "validate")
    first, good, newest = list_snapshots(session.dir)
    newest.write_text(newest.read_text()[:40])  # a crash or a full disk mid-write outside write_atomic
    with pytest.raises(UserInputError) as info:
        Session.load(session.dir)
    message = str(info.value)
    assert f"snapshot {newest} is corrupted" in message and f"--path {good}" in message
    resumed, snapshot = Session.load(good)  # the named one loads
    assert snapshot == good and resumed.dir == session.dir
    assert newest.exists()  # nothing deleted or overwritten


def test_no_good_snapshot_at_all_is_the_plain_error(tmp_path) -> None:
    session = Session.create(tmp_path / "log")
    session.save(0, 1, "propose")
    (only,) = list_snapshots(session.dir)
    only.write_text("{")
    with pytest.raises(UserInputError, match="is corrupted") as info:
        Session.load(session.dir)
    assert "previous good snapshot" not in str(info.value)
