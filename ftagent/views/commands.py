"""The commands ftagent prints for the user to run next, in a form that works from where the user is.

``make demo`` installs the CLI into ``.venv/bin``, which is not on the user's PATH: a printed ``ftagent …``
was "command not found". The console script sits beside the interpreter that runs ftagent (pip puts both in
the same ``bin/``), so that script's absolute path always works; plain ``ftagent`` is printed only when the
PATH already finds this very script.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def cli_command() -> str:
    """``ftagent`` when the PATH finds this installation's script, else the script's absolute path."""
    script = Path(sys.executable).parent / "ftagent"  # not resolved: a venv's python is a symlink out of it
    if not script.is_file():  # run from a source tree without the console script installed
        return f"{sys.executable} -m ftagent"
    found = shutil.which("ftagent")
    if found and Path(found).resolve() == script.resolve():
        return "ftagent"
    return str(script.absolute())


def next_steps(session_dir: str | Path, *, exported: bool) -> list[str]:
    """What to run after a session: the report again, the UI, and the export when a loop beat the baseline."""
    cli = cli_command()
    session = Path(session_dir).absolute()
    lines = ["Next:",
             f"  {cli} report {session}            # the report again",
             f"  {cli} ui --log-dir {session.parent}      # browse the sessions (http://127.0.0.1:19899)"]
    if exported:
        lines.append(f"  {cli} export {session}            # the best model as a Hugging Face folder")
    activate = Path(sys.executable).parent / "activate"
    if cli != "ftagent" and activate.is_file():
        lines.append(f"(`source {activate.absolute()}` puts `ftagent` on your PATH)")
    return lines
