"""Issue 34 item 12: a start that fails (exit 2) writes nothing -- not into a ``--path`` target either.

Before: ``--path`` to a snapshot taken before loop 0 took the session's lock (``.lock``,
``.lock.holder.json`` added to the target), checked it out (later snapshots dropped) and turned on the
child registry under ``FT_FILE_PATH`` before saying it cannot be resumed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ftagent.engine.session import Session
from ftagent.finetune.state import FinetuneSessionState


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def test_a_snapshot_without_a_scenario_is_refused_before_anything_is_written(tmp_path):
    session = Session.create(tmp_path / "log", config={"run": {"benchmark": "demo_add",
                                                               "base_model": "builtin/tiny-qwen2"}},
                             state_cls=FinetuneSessionState)
    session.save(0, 0, "propose")
    session.save(0, 1, "code")
    before = _tree(session.dir)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "CHAT_", "OPENAI_"))}
    env.update(FT_FILE_PATH=str(tmp_path / "ft"), LOG_PATH=str(tmp_path / "log"),
               WORKSPACE_PATH=str(tmp_path / "ws"), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    for extra in ([], ["--no-checkout"]):
        res = subprocess.run([sys.executable, "-m", "ftagent", "llm_finetune", "--path",
                              str(session.dir / "__session__" / "0" / "0_propose"), *extra],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 2, res.stderr[-2000:]
        assert "the snapshot has no scenario" in res.stderr and "Traceback" not in res.stderr
        assert _tree(session.dir) == before  # no lock files, no checkout
        assert [p.name for p in (tmp_path / "log").iterdir()] == [session.dir.name]  # no fork
        assert not (tmp_path / "ft").exists() and not (tmp_path / "ws").exists()
