"""Pure helpers of the benchmarks: ratios, formatting, the RSS sampler, the demo event analysis."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.bench.common import (
    BenchResults,
    RssSampler,
    format_ratio,
    ratio,
    run_command,
    summary_table,
    tree_rss,
)
from tests.bench.demo_bench import loop_timings, read_jsonl, record, summarize
from tests.bench.eval_bench import split_cost
from tests.bench.run_all import main, parse_args, selected


def test_ratio_handles_missing_and_zero() -> None:
    assert ratio(3.0, 2.0) == 1.5
    assert ratio(None, 2.0) is None and ratio(1.0, None) is None
    assert ratio(1.0, 0.0) is None and ratio(1.0, -1.0) is None


def test_add_ratio_verdict_and_formatting(capsys: pytest.CaptureFixture[str]) -> None:
    res = BenchResults()
    ok = res.add_ratio("train", "ftagent / by-hand", 10.3, 10.0, target_max=1.05)
    bad = res.add_ratio("train", "slow", 12.0, 10.0, target_max=1.05)
    none = res.add_ratio("train", "no denominator", 1.0, 0.0, target_max=1.05)
    assert ok.ok is True and bad.ok is False and none.ok is None
    assert ok.value == pytest.approx(1.03)
    out = capsys.readouterr().out.splitlines()
    assert "1.030" in out[0] and "OK" in out[0] and "(10.30 / 10.00)" in out[0]
    assert "MISSED" in out[1] and "n/a" in out[2]
    assert "target" not in format_ratio(res.add_ratio("x", "plain", 1, 4, echo=False))


def test_ratio_band_and_forecast_rows(capsys: pytest.CaptureFixture[str]) -> None:
    res = BenchResults()
    inside = res.add_ratio("demo", "total forecast / actual", 90.0, 100.0, target_min=0.7, target_max=1.3)
    low = res.add_ratio("demo", "loop 0 forecast / actual", 60.0, 100.0, target_min=0.7, target_max=1.3)
    high = res.add_ratio("demo", "loop 1 forecast / actual", 140.0, 100.0, target_min=0.7, target_max=1.3)
    assert (inside.ok, low.ok, high.ok) == (True, False, False)
    out = capsys.readouterr().out
    assert "target 0.7 - 1.3: OK" in out and out.count("MISSED") == 2
    assert "| demo | ratio total forecast / actual | 0.900 | target 0.7 - 1.3 (OK) |" in summary_table(res)
    report = {"best_val": 0.9, "forecast": [{"loop": 0, "forecast_s": 80.0, "actual_s": 100.0, "error_pct": -20.0},
                                            {"loop": None, "forecast_s": 80.0, "actual_s": 100.0, "error_pct": -20.0}]}
    summary = summarize([{"type": "session_start", "ts": 0.0}], report)
    record_res = BenchResults()
    record(record_res, summary)
    names = {r.name: r.value for r in record_res.ratios}
    assert names["loop 0 forecast / actual"] == pytest.approx(0.8) and "total forecast / actual" in names


def test_summary_table_and_json(tmp_path: Path) -> None:
    res = BenchResults()
    res.add("eval", "throughput", 2.5, "items/s", echo=False)
    res.add_ratio("eval", "hit / miss", 0.5, 50.0, target_max=0.1, echo=False)
    res.skipped["gpu"] = "no GPU"
    res.errors["demo"] = "boom"
    table = summary_table(res)
    assert "| eval | throughput | 2.50 | items/s |" in table
    assert "| eval | ratio hit / miss | 0.010 | target <= 0.1 (OK) |" in table
    assert "| gpu | skipped | – | no GPU |" in table and "ERROR" in table
    data = json.loads(res.write_json(tmp_path / "r.json").read_text())
    assert data["ratios"][0]["value"] == pytest.approx(0.01) and data["skipped"] == {"gpu": "no GPU"}


def test_rss_sampler_sees_a_child_allocating_memory() -> None:
    code = "x = bytearray(80 * 1024 * 1024); import time; time.sleep(1.5)"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        with RssSampler(proc.pid, interval=0.05) as sampler:
            proc.wait(timeout=30)
        assert sampler.samples >= 3
        assert sampler.peak_mib > 80  # the 80 MiB buffer plus the interpreter
    finally:
        proc.kill()
    assert tree_rss(proc.pid) == 0  # gone: no error, nothing counted


def test_rss_sampler_counts_grandchildren_without_root() -> None:
    inner = "import time; x = bytearray(60 * 1024 * 1024); time.sleep(2)"
    outer = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {inner!r}])"
    proc = subprocess.Popen([sys.executable, "-c", outer])
    try:
        sampler = RssSampler(proc.pid, include_root=False, interval=0.05).start()
        deadline = time.monotonic() + 20
        while sampler.peak_mib < 60 and time.monotonic() < deadline:
            time.sleep(0.1)
        sampler.stop()
        assert sampler.peak_mib > 60
    finally:
        proc.wait(timeout=30)


def test_run_command_times_and_captures(tmp_path: Path) -> None:
    t = run_command([sys.executable, "-c", "import time; print('hi'); time.sleep(0.3)"], cwd=tmp_path,
                    env={"PATH": "/usr/bin:/bin"}, log_file=tmp_path / "log.txt")
    assert t.exit_code == 0 and t.wall_s >= 0.3 and t.peak_rss_mib > 1
    assert (tmp_path / "log.txt").read_text().strip() == "hi"


def test_split_cost_fits_a_line() -> None:
    startup, per_item = split_cost(20, 30.0, 100, 70.0)
    assert per_item == pytest.approx(0.5) and startup == pytest.approx(20.0)
    with pytest.raises(ValueError):
        split_cost(10, 1.0, 10, 2.0)


def _ev(ts: float, type_: str, loop: int | None = None, **kw) -> dict:
    return {"ts": ts, "type": type_, "loop": loop, **kw}


EVENTS = [
    _ev(100.0, "session_start", session_id="s"),
    _ev(110.0, "benchmark_result", split="validation", score=0.0, baseline=True),
    _ev(111.0, "benchmark_result", split="test", score=0.0, baseline=True),
    _ev(120.0, "step_start", 0, step="propose"),
    _ev(125.0, "run", 0, purpose="train_micro_batch", duration_s=5.0),
    _ev(160.0, "run", 0, purpose="train", duration_s=30.0),
    _ev(170.0, "run", 0, purpose="eval", duration_s=9.0),
    _ev(170.5, "benchmark_result", 0, split="validation", score=0.0),
    _ev(171.0, "loop_end", 0, status="succeeded", duration_s=51.0),
    _ev(180.0, "step_start", 1, step="propose"),
    _ev(182.0, "run", 1, purpose="data_debug", duration_s=2.0),
    _ev(220.0, "run", 1, purpose="train", duration_s=36.0),
    _ev(230.0, "run", 1, purpose="eval", duration_s=8.0),
    _ev(231.0, "benchmark_result", 1, split="validation", score=95.0),
    _ev(232.0, "benchmark_result", 1, split="test", score=93.0),
    _ev(233.0, "run", 1, purpose="eval", duration_s=1.0),  # no loop_end: span is used
    _ev(240.0, "session_end", status="completed"),
]


def test_loop_timings_split_train_eval_and_all() -> None:
    l0, l1 = loop_timings(EVENTS)
    assert (l0.loop, l0.wall_s, l0.train_eval_s, l0.all_subprocess_s) == (0, 51.0, 44.0, 44.0)
    assert l1.wall_s == pytest.approx(53.0) and l1.status == "running"
    assert l1.train_eval_s == 45.0 and l1.all_subprocess_s == 47.0


def test_summarize_first_score_above_baseline_and_report() -> None:
    s = summarize(EVENTS, {"best_val": 95.0, "best_test": 93.0, "status": "completed"}, session="s")
    assert s.baseline_val == 0.0 and s.first_better_loop == 1
    assert s.first_better_s == pytest.approx(131.0)
    assert (s.final_val, s.final_test, s.status) == (95.0, 93.0, "completed")
    assert summarize([], None).first_better_s is None


def test_read_jsonl_skips_half_written_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps(EVENTS[0]) + "\n" + '{"ts": 1, "ty')
    assert read_jsonl(path) == [EVENTS[0]]
    assert read_jsonl(tmp_path / "missing.jsonl") == []


def test_run_all_demo_section_on_a_session(tmp_path: Path) -> None:
    session = tmp_path / "log" / "s1"
    session.mkdir(parents=True)
    (session / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in EVENTS))
    out = tmp_path / "r.json"
    assert main(["--only", "demo", "--session", str(session), "--work", str(tmp_path / "w"),
                 "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    names = {r["name"]: r for r in data["ratios"]}
    assert names["loop 0 wall / train+eval"]["value"] == pytest.approx(51.0 / 44.0)
    assert names["loop 0 wall / train+eval"]["ok"] is False
    assert data["machine"]["cpus"] >= 1 and len(data["machine"]["loadavg_1_5_15"]) == 3


def test_selected_sections() -> None:
    assert selected(parse_args([])) == ["train", "eval", "demo", "guard", "stages", "trials"]  # issue 40: DPO, GRPO vs SFT; issue 41
    assert selected(parse_args(["--gpu"]))[-1] == "gpu"
    assert selected(parse_args(["--only", "eval", "--quick"])) == ["eval"]


def test_the_integrity_guards_cost_per_loop_is_a_ratio_to_its_training() -> None:
    """Issue 39: the ``integrity`` event's duration over the loop's ``train*`` runs, target <= 0.05."""
    events = [_ev(0.0, "session_start"), _ev(1.0, "run", 0, purpose="train", duration_s=40.0),
              _ev(2.0, "run", 0, purpose="eval", duration_s=10.0), _ev(3.0, "integrity", 0, duration_s=0.5),
              _ev(4.0, "loop_end", 0, status="succeeded", duration_s=60.0),
              _ev(5.0, "run", 1, purpose="train_retry", duration_s=10.0), _ev(6.0, "integrity", 1, duration_s=1.0),
              _ev(7.0, "loop_end", 1, status="succeeded", duration_s=20.0)]
    l0, l1 = loop_timings(events)
    assert (l0.train_s, l0.integrity_s, l1.train_s, l1.integrity_s) == (40.0, 0.5, 10.0, 1.0)
    res = BenchResults()
    record(res, summarize(events))
    guard = {r.name: r for r in res.ratios if "integrity" in r.name}
    assert guard["loop 0 integrity guard / training"].value == pytest.approx(0.0125)
    assert guard["loop 0 integrity guard / training"].ok is True and guard["loop 1 integrity guard / training"].ok is False
