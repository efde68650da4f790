"""The loop engine, generic: runs a workflow's steps loop after loop with budgets, goto caps and
resume (``loop``), keeps JSON snapshots (``session``) and the typed event log (``events``, written by ``event_log``). It knows
nothing of fine-tuning; may import only ``ftagent.core``.
"""

from ftagent.core.lazy import lazy_exports

__all__ = ['LoopEngine', 'StepContext', 'Goto', 'RunSummary', 'Workflow', 'Session', 'SessionState', 'LoopState', 'list_snapshots', 'EventLog', 'read_events']
__getattr__ = lazy_exports(__name__, {
    "LoopEngine": "ftagent.engine.loop",
    "StepContext": "ftagent.engine.loop",
    "Goto": "ftagent.engine.loop",
    "RunSummary": "ftagent.engine.loop",
    "Workflow": "ftagent.engine.loop",
    "Session": "ftagent.engine.session",
    "SessionState": "ftagent.engine.session",
    "LoopState": "ftagent.engine.session",
    "list_snapshots": "ftagent.engine.session",
    "EventLog": "ftagent.engine.event_log",
    "read_events": "ftagent.engine.events",
})
