"""Read-only projections of sessions: ``session`` (events.jsonl + the latest snapshot →
SessionView, for the UI and ``job status``) and ``report`` (report.md / report.json).
"""

from ftagent.core.lazy import lazy_exports

__all__ = ['SessionView', 'load_session', 'detect_layout', 'build_report', 'write_report']
__getattr__ = lazy_exports(__name__, {
    "SessionView": "ftagent.views.session_view",
    "load_session": "ftagent.views.session",
    "detect_layout": "ftagent.views.layout",
    "build_report": "ftagent.views.report",
    "write_report": "ftagent.views.report",
})
