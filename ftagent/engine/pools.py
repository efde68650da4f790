"""Who lends the slots trials run on (:mod:`ftagent.engine.parallel`): the protocol and this machine's pool.

A slot is the application's object (the engine reads its ``index`` and ``label`` only); a pool lends one slot per
trial. ``LocalSlotPool`` lends the slots of this machine; the Ray pool (``ftagent.jobs.ray_slots``) lends a slot
only while a Ray task holds its GPUs.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Protocol


class SlotPool(Protocol):
    """Lends the slots trials run on. A slot is the application's (``index`` and ``label`` are read here)."""

    @property
    def size(self) -> int:
        """How many trials may run at once."""
        ...

    def acquire(self, preferred: int | None = None) -> Any | None:
        """A free slot (``preferred`` by index when it is free), None when all are lent."""
        ...

    def release(self, slot: Any) -> None: ...

    def bind(self, slot: Any) -> None:
        """Called in the trial's worker thread before its first step (pin it to the slot)."""
        ...

    # optional: ``waiting() -> bool`` (a slot was asked for and not lent yet: the scheduler keeps waiting for it)
    # and ``close()`` (give back what the pool holds when the session ends)


class WholeMachine:
    """The one slot of a session resumed with trials in flight but given no pool: the whole machine."""

    index = 0
    label = "slot 0"


class LocalSlotPool:
    """Slots of this machine, lent one trial at a time; ``bind`` calls the slot's own ``bind`` (pinning)."""

    def __init__(self, slots: Sequence[Any]) -> None:
        self.slots = list(slots)
        self._free = list(self.slots)
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        return len(self.slots)

    def acquire(self, preferred: int | None = None) -> Any | None:
        with self._lock:
            if not self._free:
                return None
            pick = next((s for s in self._free if s.index == preferred), self._free[0])
            self._free.remove(pick)
            return pick

    def release(self, slot: Any) -> None:
        with self._lock:
            if slot not in self._free:
                self._free.append(slot)

    def bind(self, slot: Any) -> None:
        getattr(slot, "bind", lambda: None)()
