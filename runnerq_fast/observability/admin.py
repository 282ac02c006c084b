"""Operator actions on one queue: :class:`QueueAdmin` (retry, cancel, run now, priority, delete, prune).

Kept apart from :class:`~runnerq_fast.observability.QueueInspector`, which is
read-only by design: a dashboard can be handed an inspector without the
power to change anything. Every action is a backend operation
(:mod:`runnerq_fast.storage`), records one event per activity it changes and
works by id or by the same :class:`~runnerq_fast.models.ActivityFilter` as the
listings.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from runnerq_fast.errors import InvalidActivityError
from runnerq_fast.models import ActionResult, ActivityFilter
from runnerq_fast.observability.retention import FINISHED_STATUSES, PruneReport, prune
from runnerq_fast.storage import Backend

__all__ = ["QueueAdmin"]


def _target(ids: Iterable[str] | None, flt: ActivityFilter | None) -> ActivityFilter:
    """The filter an action applies to: ``flt`` narrowed to ``ids`` (at least one must be given)."""
    if ids is None and flt is None:
        raise InvalidActivityError("give ids or a filter (an empty ActivityFilter() matches the whole queue)")
    if isinstance(ids, str):
        ids = (ids,)
    base = flt if flt is not None else ActivityFilter()
    if ids is None:
        return base
    return msgspec.structs.replace(base, ids=tuple(ids))


class QueueAdmin:
    """Operator actions on one queue of a backend.

    Each method takes ``ids`` (an id or several), a ``flt``, or both (the
    ids must then also match the filter), changes at most ``limit``
    activities, newest first, and returns an :class:`ActionResult`.

    Parameters
    ----------
    backend : Backend
        The store.
    queue_name : str
        The queue to act on.

    Raises
    ------
    InvalidActivityError
        From every method: neither ids nor a filter, a bad filter, or a
        ``limit`` outside 1-100,000; nothing is changed.
    """

    def __init__(self, backend: Backend, queue_name: str) -> None:
        self.backend = backend
        self.queue_name = queue_name

    async def retry(
        self, ids: Iterable[str] | str | None = None, flt: ActivityFilter | None = None, *, limit: int = 10_000
    ) -> ActionResult:
        """Put failed, dead-lettered and cancelled activities back to ``pending``, retries counted from 0."""
        return await self.backend.retry_activities(self.queue_name, _target(ids, flt), limit=limit)

    async def cancel(
        self, ids: Iterable[str] | str | None = None, flt: ActivityFilter | None = None, *, limit: int = 10_000
    ) -> ActionResult:
        """Cancel activities; a running one ends ``cancelled`` once its engine's next heartbeat stops it."""
        return await self.backend.cancel_activities(self.queue_name, _target(ids, flt), limit=limit)

    async def run_now(
        self, ids: Iterable[str] | str | None = None, flt: ActivityFilter | None = None, *, limit: int = 10_000
    ) -> ActionResult:
        """Make scheduled and retrying activities ready now."""
        return await self.backend.run_now(self.queue_name, _target(ids, flt), limit=limit)

    async def set_priority(
        self,
        priority: int,
        ids: Iterable[str] | str | None = None,
        flt: ActivityFilter | None = None,
        *,
        limit: int = 10_000,
    ) -> ActionResult:
        """Change the priority (1-4) of activities that have not started."""
        return await self.backend.set_priority(self.queue_name, _target(ids, flt), priority, limit=limit)

    async def delete(
        self, ids: Iterable[str] | str | None = None, flt: ActivityFilter | None = None, *, limit: int = 10_000
    ) -> ActionResult:
        """Delete finished activities with their events and idempotency keys."""
        return await self.backend.delete_activities(self.queue_name, _target(ids, flt), limit=limit)

    async def prune(
        self,
        *,
        older_than: float,
        statuses: Sequence[str] = FINISHED_STATUSES,
        events_older_than: float | None = None,
        batch_size: int = 1000,
    ) -> PruneReport:
        """Delete finished activities that finished over ``older_than`` seconds ago, in batches.

        See :func:`runnerq_fast.observability.retention.prune` for the parameters and errors.
        """
        return await prune(self.backend, self.queue_name, older_than=older_than, statuses=statuses,
                           events_older_than=events_older_than, batch_size=batch_size)
