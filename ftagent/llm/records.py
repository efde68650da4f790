"""Per-call LLM records (``<session>/llm/<n>.json``) and secret redaction.

Every LLM call the client makes is written as one JSON file holding the messages, the reply, the
model, token counts, cost, latency and the stage. Records and ``llm_call`` events pass through a
:class:`Redactor` first (owned by :mod:`ftagent.core.redact`), so API keys never reach the disk: the
configured key values are replaced, and so is anything that looks like a common key (``sk-...``,
``hf_...``, ``Bearer ...``, AWS ids) or a credential inside a URL.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

# one owner for secret masking (URL credentials included): ftagent.core.redact
from ftagent.core.redact import Redactor


class LLMRecord(BaseModel):
    """One LLM call as stored in ``llm/<n>.json``."""

    n: int = 0
    stage: str
    model: str
    messages: list[dict[str, Any]]
    reply: str = ""
    finish_reason: str | None = None
    prompt_tokens: int = 0  # as the server counted them
    completion_tokens: int = 0
    prompt_tokens_measured: int = 0  # counted by ftagent before sending (ftagent.llm.budget)
    prompt_budget: int | None = None  # FT_PROMPT_TOKEN_BUDGET at the time of the call
    token_counter: str = ""
    cost_usd: float | None = 0.0  # None: the model's price is unknown (not counted, never shown as $0)
    total_cost_usd: float = 0.0  # known cost accumulated by this session so far, this call included
    latency_s: float = 0.0
    attempts: int = 1  # HTTP attempts including retries
    started_at: float = Field(default_factory=time.time)
    error: str | None = None


class RecordWriter:
    """Writes numbered records into ``<session_dir>/llm/`` (atomic: temp file + rename).

    Without a session (the dataset selection runs before the session exists) records are kept in
    memory and written by :meth:`attach` once the session folder is known, so every call is in the
    ledger that ``FT_LLM_BUDGET_USD`` reads.
    """

    def __init__(self, session_dir: Path | None) -> None:
        self.dir: Path | None = None
        self._lock = threading.Lock()
        self._next = 1
        self._costs: dict[str, float] = {}  # record file name -> cost (records never change once written)
        self.pending: list[tuple[LLMRecord, Redactor]] = []
        if session_dir is not None:
            self._open(Path(session_dir))

    def _open(self, session_dir: Path) -> None:
        self.dir = session_dir / "llm"
        if self.dir.exists():
            numbers = [int(p.stem) for p in self.dir.glob("*.json") if p.stem.isdigit()]
            self._next = max(numbers, default=0) + 1

    def attach(self, session_dir: Path) -> list[Path]:
        """Write the records kept before the session existed into ``session_dir/llm/``; later ones go there."""
        self._open(Path(session_dir))
        pending, self.pending = self.pending, []
        return [path for record, redactor in pending if (path := self.write(record, redactor)) is not None]

    def spent_usd(self) -> float:
        """Cost of the calls already recorded in this session (so a resumed session keeps its budget)."""
        if self.dir is None or not self.dir.exists():
            return 0.0
        for path in self.dir.glob("*.json"):  # other writers (the LLM gateway) share the folder
            if path.name in self._costs:
                continue
            try:
                self._costs[path.name] = float(json.loads(path.read_text(encoding="utf-8")).get("cost_usd") or 0.0)
            except (OSError, ValueError, AttributeError):
                continue  # a number reserved but not written yet: read next time
        return sum(self._costs.values())

    def write(self, record: LLMRecord, redactor: Redactor) -> Path | None:
        """Assign the next number, redact and write; returns the file path (None: kept until :meth:`attach`)."""
        if self.dir is None:
            self.pending.append((record.model_copy(deep=True), redactor))
            return None
        with self._lock:
            self.dir.mkdir(parents=True, exist_ok=True)
            while True:  # reserve the number: several writers (planner client, gateway) share the folder
                path = self.dir / f"{self._next}.json"
                self._next += 1
                try:
                    os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                    break
                except FileExistsError:
                    continue
            record.n = int(path.stem)
            data = redactor.obj(record.model_dump(mode="json"))
            tmp = path.with_name(f".{path.stem}.{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
            os.replace(tmp, path)
        return path
