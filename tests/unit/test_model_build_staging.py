"""Issue 34 item 12: a killed model build's staging folder is removed by the next build (real SIGKILL).

The build script is run by a stand-in "python" (a shell script) so the test needs no tool env: one
writes its staging folder and hangs until killed, the other writes it and succeeds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ftagent.models.builtin import build_builtin, is_built

HANG = '#!/usr/bin/env bash\nmkdir -p "$2" && echo partial > "$2/model.safetensors" && exec sleep 120\n'
OK = '#!/usr/bin/env bash\nmkdir -p "$2" && echo "{}" > "$2/config.json"\n'


def _script(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_a_killed_build_leaves_no_staging_folder_after_the_next_build(tmp_path):
    out = tmp_path / "models" / "builtin" / "tiny-qwen2"
    code = ("import sys; from pathlib import Path; from ftagent.models.builtin import build_builtin; "
            f"build_builtin('tiny-qwen2', Path({str(out)!r}), {str(_script(tmp_path, 'hang', HANG))!r})")
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not list(out.parent.glob(".tiny-qwen2.building-*/model.safetensors")):
            assert time.monotonic() < deadline and proc.poll() is None, "the build never started"
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the build and its script, as a killed session would
        proc.wait(timeout=30)
    assert len(list(out.parent.glob(".tiny-qwen2.building-*"))) == 1  # the leftover

    assert build_builtin("tiny-qwen2", out, _script(tmp_path, "ok", OK)) == out.absolute()
    assert is_built(out, "tiny-qwen2")
    assert list(out.parent.glob(".tiny-qwen2.building-*")) == []
