"""The engine's entry in the worker registry: registered at start, refreshed on each heartbeat, removed at stop.

One backend call per heartbeat tick (never per activity). A failing call is
logged and retried on the next tick: the registry is for operators, and an
engine keeps working without it. The entry lives :data:`TTL_HEARTBEATS`
heartbeat intervals, so an engine that stops heartbeating (killed, frozen,
cut off) leaves the registry within that time.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Sequence

from runnerq_fast.models import WorkerInfo
from runnerq_fast.storage import Backend

__all__ = ["TTL_HEARTBEATS", "Presence"]

log = logging.getLogger("runnerq_fast.engine")

TTL_HEARTBEATS = 3
"""Heartbeat intervals a registry entry outlives its last heartbeat."""


def _now_ms() -> int:
    return int(time.time() * 1000)


class Presence:
    """One engine's registry entry.

    Parameters
    ----------
    backend : Backend
        Where the registry lives.
    queue : str
        The engine's queue.
    worker_id : str
        The engine's id.
    activity_types : sequence of str or None
        The types it claims; ``None`` for any (recorded as ``("*",)``).
    concurrency : int
        Its worker slots.
    heartbeat_interval : float
        Seconds between heartbeats; the entry's TTL is :data:`TTL_HEARTBEATS` of them.
    """

    def __init__(
        self,
        backend: Backend,
        queue: str,
        worker_id: str,
        activity_types: Sequence[str] | None,
        concurrency: int,
        heartbeat_interval: float,
    ) -> None:
        self.backend = backend
        self.ttl_ms = max(1, round(heartbeat_interval * TTL_HEARTBEATS * 1000))
        self._base = WorkerInfo(
            worker_id=worker_id,
            queue=queue,
            host=socket.gethostname(),
            pid=os.getpid(),
            activity_types=("*",) if activity_types is None else tuple(activity_types),
            in_flight=0,
            concurrency=concurrency,
            started_at_ms=_now_ms(),
            last_seen_ms=0,
        )
        self._failing = False

    def info(self, in_flight: int) -> WorkerInfo:
        """The entry as of now, with ``in_flight`` activities held."""
        b = self._base
        return WorkerInfo(
            worker_id=b.worker_id, queue=b.queue, host=b.host, pid=b.pid, activity_types=b.activity_types,
            in_flight=in_flight, concurrency=b.concurrency, started_at_ms=b.started_at_ms, last_seen_ms=_now_ms(),
        )

    async def beat(self, in_flight: int) -> bool:
        """Register (or refresh) the entry; ``False`` if the backend call failed (logged once per outage)."""
        try:
            await self.backend.register_worker(self.info(in_flight), self.ttl_ms)
        except Exception as exc:
            if not self._failing:
                log.warning("worker registry heartbeat failed (%s: %s); retrying on each heartbeat",
                            type(exc).__name__, exc)
            self._failing = True
            return False
        if self._failing:
            log.info("worker registry heartbeat works again")
        self._failing = False
        return True

    async def leave(self) -> None:
        """Remove the entry at once (a clean stop); a failure is logged and the entry simply expires."""
        try:
            await self.backend.deregister_worker(self._base.queue, self._base.worker_id)
        except Exception as exc:
            log.warning("could not leave the worker registry (%s: %s); the entry expires in %.1f s",
                        type(exc).__name__, exc, self.ttl_ms / 1000)
