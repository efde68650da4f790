"""``ftagent export``: a session's model as a Hugging Face folder with its card and ``reproduce/``.

Modules: :mod:`.facts` (what the session's events and trace say about one loop), :mod:`.model`
(merge or copy, loss curve: tool env through the runner), :mod:`.reproduce` (portable data script,
config, commands), :mod:`.card` (+ ``model_card.md.j2``), :mod:`.hub` (``--push-to-hub``),
:mod:`.bundle` (checks first, then the folder, renamed into place at the end).
"""

from ftagent.finetune.export.bundle import ExportRequest, ExportResult, export_model, plan_export

__all__ = ["ExportRequest", "ExportResult", "export_model", "plan_export"]
