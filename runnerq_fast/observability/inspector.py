"""Read-only access to a queue for dashboards, CLIs and tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from runnerq_fast.codec import decode_json
from runnerq_fast.errors import InvalidActivityError
from runnerq_fast.filters import COUNT_CAP
from runnerq_fast.models import (
    ActivityCount,
    ActivityEvent,
    ActivityFilter,
    ActivityPage,
    ActivityResult,
    ActivitySnapshot,
    ActivityStatus,
    DeadLetterRecord,
    QueueStats,
    QueueSummary,
    ReadyWork,
    WorkerInfo,
)
from runnerq_fast.observability.workers import UnhandledType, find_unhandled_types
from runnerq_fast.storage import Backend

__all__ = ["QueueInspector"]


class QueueInspector:
    """Inspect one queue of a backend.

    Parameters
    ----------
    backend : Backend
        The store to read.
    queue_name : str
        The queue to inspect.
    """

    def __init__(self, backend: Backend, queue_name: str) -> None:
        self.backend = backend
        self.queue_name = queue_name

    async def stats(self) -> QueueStats:
        """Activity counts by status."""
        return await self.backend.stats(self.queue_name)

    async def list_activities(
        self, status: ActivityStatus | str | None = None, *, offset: int = 0, limit: int = 50
    ) -> list[ActivitySnapshot]:
        """Activities newest first, optionally of one status.

        Raises
        ------
        InvalidActivityError
            For an unknown status or a negative offset / non-positive limit.
        """
        st: str | None = None
        if status is not None:
            try:
                st = ActivityStatus(status).value
            except ValueError:
                valid = [s.value for s in ActivityStatus]
                raise InvalidActivityError(f"unknown status {status!r}; expected one of {valid}") from None
        if offset < 0 or limit < 1:
            raise InvalidActivityError("offset must be >= 0 and limit >= 1")
        return await self.backend.list_activities(self.queue_name, st, offset, limit)

    async def get(self, activity_id: str) -> ActivitySnapshot | None:
        """One activity, or ``None``."""
        return await self.backend.get_activity(activity_id)

    async def events(self, activity_id: str) -> list[ActivityEvent]:
        """The activity's events, oldest first (a failed attempt's with its ``traceback``)."""
        return await self.backend.get_events(activity_id)

    async def result(self, activity_id: str) -> ActivityResult | None:
        """The stored outcome, or ``None`` while unfinished."""
        return await self.backend.get_result(activity_id)

    async def result_value(self, activity_id: str) -> Any:
        """The decoded return value of a completed activity (``None`` otherwise)."""
        res = await self.backend.get_result(activity_id)
        if res is None or res.data is None:
            return None
        return decode_json(res.data)

    async def dead_letters(self, *, offset: int = 0, limit: int = 50) -> list[DeadLetterRecord]:
        """Dead-lettered activities, newest first."""
        return await self.backend.list_dead_letter(self.queue_name, offset, limit)

    async def queues(self) -> list[QueueSummary]:
        """Every queue of the backend (not only this one) with counts by status and type."""
        return await self.backend.list_queues()

    async def query(
        self,
        flt: ActivityFilter | None = None,
        *,
        limit: int = 50,
        cursor: str | None = None,
        newest_first: bool = True,
    ) -> ActivityPage:
        """One keyset-paged page of this queue's activities matching ``flt`` (default: all).

        Pass the page's ``next_cursor`` back for the next one; see
        :meth:`~runnerq_fast.storage.Backend.query_activities`.

        Raises
        ------
        InvalidActivityError
            For a bad filter, a ``limit`` outside 1-1000 or a bad cursor.
        """
        return await self.backend.query_activities(
            self.queue_name, flt or ActivityFilter(), limit=limit, cursor=cursor, newest_first=newest_first
        )

    async def count(self, flt: ActivityFilter | None = None, *, cap: int = COUNT_CAP) -> ActivityCount:
        """How many of this queue's activities match ``flt``, counting at most ``cap`` (see ``exact``)."""
        return await self.backend.count_activities(self.queue_name, flt or ActivityFilter(), cap=cap)

    async def children(self, activity_id: str, *, limit: int = 50, cursor: str | None = None) -> ActivityPage:
        """The activities ``activity_id``'s handler enqueued through ``ctx.executor``, oldest first."""
        return await self.backend.query_activities(
            self.queue_name, ActivityFilter(parent_id=activity_id), limit=limit, cursor=cursor, newest_first=False
        )

    async def workers(self) -> list[WorkerInfo]:
        """The live workers of this queue (the worker registry), ordered by id."""
        return await self.backend.list_workers(self.queue_name)

    async def ready_work(self) -> ReadyWork:
        """What a worker could claim now: counts by activity type and the oldest ready time."""
        return await self.backend.ready_work(self.queue_name)

    async def unhandled_types(self) -> list[UnhandledType]:
        """Activity types with ready work and no live worker claiming them, most ready first."""
        return await find_unhandled_types(self.backend, self.queue_name)

    def live_events(self, after_id: int | None = None) -> AsyncIterator[ActivityEvent]:
        """Async iterator over the queue's events as they happen.

        With ``after_id`` it first replays stored events after that id, so a
        reconnecting client resumes without a gap.
        """
        return self.backend.event_stream(self.queue_name, after_id)

