"""Evaluation progress (issue 16) from OpenCompass's streamed log: phase, split, items done/total."""

from __future__ import annotations

import time
from pathlib import Path

from ftagent.tools.opencompass.progress import DatasetInfo, LogFollower, ProgressTracker

LOG = Path(__file__).resolve().parents[1] / "fixtures" / "opencompass" / "progress" / "two_splits_100.log"
DATASETS = [DatasetInfo(abbr="demo_add@validation", split="validation", generations=100),
            DatasetInfo(abbr="demo_add@test", split="test", generations=100)]


def _track(lines, datasets=DATASETS, batch=8):
    got = []
    tracker = ProgressTracker(datasets, batch, lambda *a: got.append(a))
    tracker.start()
    for line in lines:
        tracker.feed(line)
    return got


def test_real_log_gives_monotonic_item_counts_per_split():
    got = _track(LOG.read_text(encoding="utf-8").splitlines())
    assert got[0] == ("start", None, None)
    phases = [g[0] for g in got]
    assert phases.index("infer:validation") < phases.index("infer:test") < phases.index("eval:validation")
    for phase in ("infer:validation", "infer:test"):
        done = [g[1] for g in got if g[0] == phase]
        assert done[0] == 0 and done[-1] == 100 and done == sorted(done) and len(done) > 3
        assert all(g[2] == 100 for g in got if g[0] == phase)
    assert ("eval:validation", 100, 100) in got and ("eval:test", 100, 100) in got
    assert len(got) == len(set(got))  # only changes are reported


def test_grouped_datasets_count_per_split():
    datasets = [DatasetInfo(abbr=f"k-{i}@validation", split="validation", generations=10) for i in range(3)]
    lines = []
    for i in range(3):
        lines += [f"12/03 06:52:59 - OpenCompass - INFO - Start inferencing [ft-k/k-{i}@validation]",
                  "  0%|          | 0/2 [00:00<?, ?it/s]", " 50%|#    | 1/2 [00:00<00:00]", "100%|##| 2/2 [00:00<00:00]"]
    lines += ["Map: 100%|██████████| 10/10 [00:00<00:00]"]  # a datasets.map bar is not inference progress
    lines += ["12/03 - OpenCompass - INFO - Running 0-th replica of evaluation"] * 3
    got = _track(lines, datasets, batch=8)
    infer = [g[1] for g in got if g[0] == "infer:validation"]
    assert infer == [0, 8, 10, 18, 20, 28, 30]
    assert [g[1] for g in got if g[0] == "eval:validation"] == [0, 10, 20]


def test_follower_reads_only_new_lines(tmp_path):
    log = tmp_path / "oc.log"
    log.write_text("Start inferencing [m/demo_add@test]\n")  # an earlier run's lines are skipped
    got = []
    tracker = ProgressTracker(DATASETS, 8, lambda *a: got.append(a))
    with LogFollower(log, tracker, interval_s=0.05):
        with log.open("a") as fh:
            fh.write("12/03 - OpenCompass - INFO - Start inferencing [ft-demo_add/demo_add@validation]\n")
            fh.write(" 50%|#    | 7/13 [00:00<00:00]\n100%|##| 13/13 [00:0")  # a partial last line
            fh.flush()
            time.sleep(0.3)
    assert got == [("start", None, None), ("infer:validation", 0, 100), ("infer:validation", 56, 100)]


def test_callback_errors_never_stop_the_evaluation(tmp_path):
    log = tmp_path / "oc.log"

    def boom(*_):
        raise RuntimeError("display broke")
    tracker = ProgressTracker(DATASETS, 8, boom)
    with LogFollower(log, tracker, interval_s=0.05):  # start() reports through the failing callback
        log.write_text("Start inferencing [m/demo_add@validation]\n")
    assert tracker.current == 0  # the line was still read
