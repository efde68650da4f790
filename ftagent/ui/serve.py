"""The UI server process (``python -m ftagent.ui.serve run ftagent/ui/app.py ...``, what ``ftagent ui`` starts).

It imports what the first page render needs (pandas, the session views, the UI's frames) and then hands
over to Streamlit's own command line. Streamlit runs ``app.py`` only when a browser connects, so
without this the first visitor's first script run paid for these imports (about 1.5 s idle, several
seconds on a loaded machine) while the page showed Streamlit's grey skeleton.
"""

from __future__ import annotations

import sys


def preload() -> None:
    """Import the modules every page render uses, so the first render finds them loaded."""
    import pandas  # noqa: F401
    import streamlit  # noqa: F401

    import ftagent.ui.decisions  # noqa: F401
    import ftagent.ui.frames  # noqa: F401
    import ftagent.ui.llm_calls  # noqa: F401
    import ftagent.views.job  # noqa: F401
    import ftagent.views.report  # noqa: F401
    import ftagent.views.session  # noqa: F401


def main() -> None:
    """Preload, then run Streamlit's CLI on this process's arguments (``run APP --server.* ... -- ...``)."""
    preload()
    from streamlit.web import cli

    sys.exit(cli.main(prog_name="streamlit"))


if __name__ == "__main__":
    main()
