"""`ftagent ui` as a real headless server, screenshotted with Chromium (skipped without chromium).

Writes test-artifacts/ui.png (Job Summary) and test-artifacts/ui-single-task.png. Set
FTAGENT_UPDATE_DOC_IMAGES=1 to also copy them to docs/img/ for the docs.

It also drives Chromium over the DevTools protocol (``websockets``, a Streamlit dependency) to time, in
wall-clock seconds, how long the single-task page of a finished session takes from navigation until its
real content (not Streamlit's grey skeleton) is on the page, and checks that no Deploy button is there.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from ftagent.jobs.tasks import TaskSpec
from tests.helpers.make_sessions import LoopPlan, SessionPlan, decisions_plan, make_job

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"ftagent ui exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.read().strip() == b"ok":
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError("the UI did not become healthy in time")


def _screenshot(url: str, out: Path) -> None:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
           f"--screenshot={out}", "--window-size=1400,1600", "--virtual-time-budget=20000", url]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)


# the session page's real content: header metrics, the export command, the step times (near the end)
CONTENT = ("SOTA loop", "ftagent export ", "Wall time per step", "LLM calls")
# why each loop became the best or not, an integrity flag with its reason, the constant-answer baseline
# (issue 31 follow-up): in the page's text (HTML tables, not canvas grids), from the report's view-model
DECISIONS = ("Best-model decisions", "+0.05 [-0.1, +0.2] on 30 items vs loop 0", "not significant",
             "integrity flag: benchmark_files", "Loop 2 flagged by the integrity guard, not eligible as best: "
             "benchmark_files: the evaluator's files changed", "a constant answer", "0.25",
             "not best (not significant)", "FLAGGED")
FIRST_RENDER_BOUND_S = 30.0  # a hang, not a speed goal (make bench has those): measured 3-8 s on a busy 2-core box


def _devtools_page(port: int, timeout: float = 30) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as r:
                pages = [p for p in json.load(r) if p.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError("chromium's DevTools endpoint did not come up")


def _time_to_text(url: str, needles: tuple[str, ...], timeout: float = 90) -> tuple[float, str]:
    """Seconds from ``Page.navigate`` until all ``needles`` are in the page's text, and that text."""
    from websockets.sync.client import connect

    port = _free_port()
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:  # chromium helpers may linger
        browser = subprocess.Popen([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                    "--disable-dev-shm-usage", "--disable-background-networking",
                                    f"--remote-debugging-port={port}", f"--user-data-dir={profile}",
                                    "--window-size=1400,1600", "about:blank"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            with connect(_devtools_page(port), max_size=None) as ws:
                ids = iter(range(1, 1_000_000))

                def call(method: str, **params):
                    n = next(ids)
                    ws.send(json.dumps({"id": n, "method": method, "params": params}))
                    while (msg := json.loads(ws.recv())).get("id") != n:
                        pass
                    return msg.get("result", {})

                t0 = time.monotonic()
                call("Page.navigate", url=url)
                while time.monotonic() - t0 < timeout:
                    text = call("Runtime.evaluate", expression="document.body ? document.body.innerText : ''",
                                returnByValue=True).get("result", {}).get("value") or ""
                    if all(n in text for n in needles):
                        return time.monotonic() - t0, text
                    time.sleep(0.1)
            raise AssertionError(f"{needles} were not all on {url} after {timeout:.0f} s")
        finally:
            browser.terminate()
            browser.wait(timeout=15)


def _assert_not_blank(png: Path) -> float:
    from PIL import Image, ImageStat

    assert png.stat().st_size > 30_000, f"{png} is only {png.stat().st_size} bytes"
    with Image.open(png) as img:
        stat = ImageStat.Stat(img.convert("L"))
    assert stat.var[0] > 200, f"{png} looks blank (variance {stat.var[0]:.1f})"
    return stat.var[0]


def test_ui_screenshots(tmp_path):
    job_dir = make_job(tmp_path / "log", "2026-01-01_12-00-00", [
        (TaskSpec(model="builtin/tiny-qwen2", benchmark="demo_add"), decisions_plan(), None),
        (TaskSpec(model="Qwen/Qwen2.5-7B-Instruct", benchmark="aime25"),
         SessionPlan(benchmark="aime25", baseline=(0.13, 0.07),
                     loops=[LoopPlan(val=0.2, test=0.13), LoopPlan(val=0.27, test=0.2), LoopPlan(val=0.2)]), 15),
        (TaskSpec(model="org/llama-3-8b", benchmark="gsm8k"), None, None),
    ])
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "ftagent", "ui", "--log-dir", str(job_dir), "--port", str(port)],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_healthy(url, proc)
        # first render of a finished session's page: a fresh browser session, the server's first script run
        seconds, text = _time_to_text(f"{url}/?page=single", CONTENT)
        print(f"\nsingle-task page of a finished session: real content after {seconds:.2f} s (wall clock)")
        assert seconds < FIRST_RENDER_BOUND_S, f"first render took {seconds:.1f} s"
        assert "Deploy" not in text  # client.toolbarMode=viewer
        # Streamlit renders the page in pieces: the timed content can be up while the decisions' table is not yet;
        # a second browser session waits for every decision (a decision never shown fails after 90 s, naming them)
        again, _ = _time_to_text(f"{url}/?page=single", CONTENT + DECISIONS)
        print(f"same page, second browser session: every decision after {again:.2f} s")
        artifacts = REPO / "test-artifacts"
        artifacts.mkdir(exist_ok=True)
        shots = {"ui.png": url, "ui-single-task.png": f"{url}/?page=single"}
        for name, target in shots.items():
            # virtual time does not wait for the server: on a busy machine the first (cold) script run
            # can miss the budget, so a blank shot is retried a few times before failing
            for attempt in range(4):
                _screenshot(target, artifacts / name)
                try:
                    _assert_not_blank(artifacts / name)
                    break
                except AssertionError:
                    if attempt == 3:
                        raise
                    time.sleep(2)
        if os.environ.get("FTAGENT_UPDATE_DOC_IMAGES"):
            (REPO / "docs" / "img").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(artifacts / "ui.png", REPO / "docs" / "img" / "ui-job-summary.png")
            shutil.copyfile(artifacts / "ui-single-task.png", REPO / "docs" / "img" / "ui-single-task.png")
    finally:
        proc.terminate()  # `ftagent ui` stops its streamlit child on SIGTERM
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        assert proc.returncode == 0
