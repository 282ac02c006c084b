"""The engine's progress buffer: ``ctx.set_progress`` calls, coalesced before they reach the store.

A handler may report progress as often as it likes (from the loop, or from
the thread pool for a plain ``def`` handler); the buffer keeps only the
latest value per running attempt, and the engine writes what it holds in one
:meth:`~runnerq_fast.storage.Backend.set_progress` call: at once when the
first value arrives after a quiet spell, then at most once every
:data:`PROGRESS_INTERVAL` seconds. An ack batch first writes the values of
its own activities (so an attempt's last value is stored before its ack ends
the claim it is written under).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterable

from runnerq_fast.models import ProgressUpdate

__all__ = ["PROGRESS_INTERVAL", "ProgressBuffer"]

PROGRESS_INTERVAL = 0.5
"""Seconds between two progress writes of an engine (each carries the latest value of every attempt)."""


class ProgressBuffer:
    """The latest unsent progress of each running attempt, by activity id.

    Parameters
    ----------
    loop : asyncio.AbstractEventLoop
        The engine's loop (which :attr:`ready` belongs to).

    Attributes
    ----------
    pending : dict of str to ProgressUpdate
        The latest unsent value of each attempt, by activity id (read it
        only to test whether it is empty; :meth:`put` and :meth:`take` change it).
    ready : asyncio.Event
        Set when a value arrives in an empty buffer (from another thread,
        through the loop).
    sent : int
        Updates handed to the store so far (stats, tests).
    """

    __slots__ = ("_lock", "_loop", "_loop_thread", "pending", "ready", "sent")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._lock = threading.Lock()
        self.pending: dict[str, ProgressUpdate] = {}
        self.ready = asyncio.Event()
        self.sent = 0

    def put(self, activity_id: str, claim_token: str, progress: str) -> None:
        """Keep ``progress`` (JSON text) as the latest of the attempt; thread-safe, never blocks on the store."""
        with self._lock:
            first = not self.pending
            self.pending[activity_id] = ProgressUpdate(activity_id, claim_token, progress)
        if first:
            if threading.get_ident() == self._loop_thread:
                self.ready.set()
            else:
                with contextlib.suppress(RuntimeError):  # a closed loop: the engine is gone, nothing is written
                    self._loop.call_soon_threadsafe(self.ready.set)

    def take(self) -> list[ProgressUpdate]:
        """Every buffered update (the buffer is then empty)."""
        with self._lock:
            pending, self.pending = self.pending, {}
            self.ready.clear()
        return list(pending.values())

    def take_for(self, activity_ids: Iterable[str]) -> list[ProgressUpdate]:
        """The buffered updates of ``activity_ids`` (those about to be acknowledged); the others stay."""
        taken: list[ProgressUpdate] = []
        with self._lock:
            pending = self.pending
            for aid in activity_ids:
                u = pending.pop(aid, None)
                if u is not None:
                    taken.append(u)
            if not pending:
                self.ready.clear()
        return taken

    def restore(self, updates: list[ProgressUpdate]) -> None:
        """Put back ``updates`` that could not be written, unless a newer value of the same attempt came since."""
        with self._lock:
            for u in updates:
                if u.id not in self.pending:
                    self.pending[u.id] = u
            if self.pending:
                self.ready.set()
