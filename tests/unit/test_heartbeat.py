"""Set-up is never silent: pip installs and image builds beat at least every interval (issue #22.2)."""

from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest

from ftagent.runners import heartbeat
from ftagent.runners.heartbeat import Heartbeat, latest_pip_line
from ftagent.runners.images import ImageSpec, build_image
from ftagent.runners.toolenv import install_venv
from tests.unit.test_docker_images import _FakeClient


def _gaps(stamps: list[float], start: float, end: float) -> list[float]:
    points = [start, *stamps, end]
    return [b - a for a, b in zip(points, points[1:], strict=False)]


def test_a_quiet_stretch_gets_beats_no_further_apart_than_the_interval() -> None:
    said: list[tuple[float, str]] = []
    start = time.monotonic()
    with Heartbeat("install x", lambda m: said.append((time.monotonic(), m)), interval=1.0):
        time.sleep(4.2)
    end = time.monotonic()
    assert len(said) >= 3
    # poll granularity + a loaded machine's scheduling; beats at twice the interval still fail
    assert max(_gaps([t for t, _ in said], start, end)) <= 1.0 + 0.9
    assert all(m.startswith("install x: ") and m.rstrip().endswith("s") for _, m in said)


def test_touch_postpones_beats_and_a_failing_display_is_ignored() -> None:
    said: list[str] = []
    with Heartbeat("build", said.append, interval=0.5) as beat:
        for _ in range(8):  # a chatty tool: a line every 0.1 s, no beat needed
            beat.touch("step 2/9: RUN pip install")
            time.sleep(0.1)
    assert said == []
    with Heartbeat("build", lambda m: 1 / 0, interval=0.2) as beat:
        time.sleep(0.6)
    assert beat.beats >= 1  # the ZeroDivisionError did not stop the thread


def test_latest_pip_line_reads_what_pip_is_doing_now(tmp_path: Path) -> None:
    log = tmp_path / "setup.log"
    log.write_text("$ pip install x\nCollecting llamafactory==0.9.5\n  Downloading llamafactory-0.9.5.whl (1 MB)\n"
                   "   ━━━━━━━━━━━━━ 1.0/1.0 MB\nBuilding wheel for rouge-chinese (setup.py) ... -\n")
    assert latest_pip_line(log) == "Building wheel for rouge-chinese (setup.py) ... -"
    assert latest_pip_line(log, offset=log.stat().st_size) == ""
    assert latest_pip_line(tmp_path / "missing.log") == ""


def test_a_slow_pip_step_shows_its_latest_line_while_it_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heartbeat, "HEARTBEAT_S", 0.4)
    fake_pip = tmp_path / "pip"
    fake_pip.write_text("#!/bin/sh\necho 'Collecting opencompass==0.5.4'\nsleep 1.5\necho done\n")
    fake_pip.chmod(fake_pip.stat().st_mode | stat.S_IEXEC)
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").symlink_to("/bin/true")  # the venv exists: only the pip step runs
    said: list[str] = []
    install_venv(env, [("install LLaMA-Factory + OpenCompass", ["install", "x"])], base_python="python3",
                 pip_cmd=[str(fake_pip)], step_timeout=30, say=said.append)
    beats = [m for m in said if m.startswith("install LLaMA-Factory + OpenCompass: ")]
    assert len(beats) >= 2, said
    assert "Collecting opencompass==0.5.4" in beats[-1]


def test_a_quiet_build_step_beats_with_the_step_it_is_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heartbeat, "HEARTBEAT_S", 0.3)

    class SlowChunks(list):
        def __iter__(self):
            for chunk in super().__iter__():
                if chunk.get("stream", "").startswith("Successfully"):
                    time.sleep(1.2)  # RUN pip install: minutes of nothing, here 1.2 s
                yield chunk

    chunks = SlowChunks([{"stream": "Step 1/2 : FROM ftagent-base:bookworm\n"},
                         {"stream": "Step 2/2 : RUN pip install -r tools.txt\n"},
                         {"aux": {"ID": "sha256:abc"}}, {"stream": "Successfully built abc\n"}])
    beats: list[str] = []
    build_image(_FakeClient(chunks), ImageSpec(base_image="ftagent-base:bookworm"), log_file=tmp_path / "b.log",
                on_heartbeat=beats.append)
    assert len(beats) >= 2, beats
    assert "step 2/2: RUN pip install -r tools.txt" in beats[-1]


def test_quiet_mode_beats_through_lines_the_user_does_not_see(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`env build-images --quiet` shows only steps: pip's lines inside a RUN step must not silence the beat
    (they did: every build line reset it, so a quiet build said nothing for minutes)."""
    monkeypatch.setattr(heartbeat, "HEARTBEAT_S", 0.3)

    class ChattyChunks(list):
        def __iter__(self):
            yield from super().__iter__()

    lines = [{"stream": "Step 1/1 : RUN pip install -r tools.txt\n"}]
    lines += [{"stream": f"Collecting pkg{i}\n"} for i in range(24)]
    lines += [{"aux": {"ID": "sha256:abc"}}]

    class Slow(ChattyChunks):
        def __iter__(self):
            for chunk in super().__iter__():
                time.sleep(0.05)
                yield chunk

    beats: list[str] = []
    build_image(_FakeClient(Slow(lines)), ImageSpec(base_image="ftagent-base:bookworm"), log_file=tmp_path / "b.log",
                on_heartbeat=beats.append)  # no on_line: nothing of the build log is shown
    assert len(beats) >= 2, beats
    assert "Collecting pkg" in beats[-1] and "step 1/1" in beats[-1]
