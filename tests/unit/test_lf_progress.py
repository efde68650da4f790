"""Training progress from LLaMA-Factory's trainer_log.jsonl, followed while the file grows."""

from __future__ import annotations

import json
import time

from ftagent.tools.llamafactory.progress import TrainerLogFollower, eta_seconds, progress_detail


def test_eta_parsing():
    assert eta_seconds("0:01:05") == 65 and eta_seconds("1 day, 0:00:03") == 86403
    assert eta_seconds("") is None and eta_seconds(None) is None and eta_seconds("soon") is None


def test_follower_reports_new_points_throttled_and_the_last_one_on_stop(tmp_path):
    log = tmp_path / "trainer_log.jsonl"
    log.write_text(json.dumps({"current_steps": 999, "total_steps": 999}) + "\n")  # an earlier run: ignored
    seen: list[dict] = []
    with TrainerLogFollower(tmp_path, seen.append, poll_s=0.05, min_interval_s=0.3):
        with open(log, "a") as fh:
            for step in range(1, 11):
                fh.write(json.dumps({"current_steps": step * 10, "total_steps": 100, "loss": 3.0 / step,
                                     "lr": 1e-3, "remaining_time": "0:00:09"}) + "\n")
                fh.flush()
                time.sleep(0.05)
            fh.write('{"current_steps": 1')  # half-written line: not read yet
    steps = [p["current_steps"] for p in seen]
    assert 999 not in steps and steps[-1] == 100 and steps == sorted(steps)
    assert len(steps) < 10  # throttled
    assert progress_detail(seen[-1]) == {"loss": 0.3, "lr": 1e-3, "eta_s": 9.0}
