"""Start the Streamlit UI as a headless server (``ftagent ui``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

APP = Path(__file__).with_name("app.py")
TOOLBAR_MODE = "viewer"  # streamlit >= 1.31: hides Deploy / Rerun / Clear cache


def streamlit_command(log_dir: Path, host: str = "127.0.0.1", port: int = 19899) -> list[str]:
    """The ``streamlit run`` command line for ``log_dir``.

    Streamlit's own CLI, started through :mod:`ftagent.ui.serve` (which imports what the first render
    needs before the server listens). Headless, no telemetry, no file watcher, and
    ``client.toolbarMode=viewer``: the toolbar keeps the viewer options (print, theme) but not the
    developer ones (Deploy, Rerun, Clear cache), which mean nothing to someone reading a run.
    """
    return [
        sys.executable, "-m", "ftagent.ui.serve", "run", str(APP),  # streamlit's CLI after a preload
        "--server.headless", "true",
        "--server.address", host,
        "--server.port", str(port),
        "--browser.gatherUsageStats", "false",
        "--server.fileWatcherType", "none",
        "--client.toolbarMode", TOOLBAR_MODE,
        "--", "--log-dir", str(Path(log_dir).resolve()),
    ]


def launch(log_dir: Path, host: str = "127.0.0.1", port: int = 19899) -> int:
    """Run the UI until interrupted; returns streamlit's exit code (0 after Ctrl-C).

    A missing log directory is not an error: the page says so and picks it up once it exists.
    """
    log_dir = Path(log_dir)
    if not log_dir.exists():
        print(f"note: {log_dir} does not exist yet; the UI will show it once sessions are written",
              file=sys.stderr)
    print(f"ftagent UI on http://{host}:{port}  (log dir: {log_dir.resolve()})", file=sys.stderr)
    env = {**os.environ, "FTAGENT_UI_LOG_DIR": str(log_dir.resolve())}
    proc = subprocess.Popen(streamlit_command(log_dir, host, port), env=env)

    def _stop(signum, frame):  # SIGTERM to `ftagent ui` must not orphan the streamlit server
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
