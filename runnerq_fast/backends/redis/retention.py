"""Retention on Redis: :class:`RedisRetention`, the prune and hold half of the Redis backend (a mixin).

A prune batch is one ``lua/prune.lua`` call (atomic, bounded by its limit
and by :data:`SCAN_BUDGET` index entries, so it never blocks the server
long); a hold is one ``lua/hold.lua`` call (``SET ... PX`` on a key under
the queue's hash tag). Events live in each activity's hash and go with it,
so :meth:`RedisRetention.prune_events` has nothing to delete.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runnerq_fast.storage import check_hold, check_prune, check_prune_events

__all__ = ["SCAN_BUDGET", "RedisRetention"]

SCAN_BUDGET = 20_000
"""Most status-index entries one prune call examines (finished ones it deletes, and later-finished ones it passes)."""


class RedisRetention:
    """``prune``, ``prune_events`` and ``hold`` of :class:`~runnerq_fast.backends.redis.RedisBackend`.

    It uses the backend's script runner (``_run``).
    """

    async def _run(self, name: str, queue: str, args: Sequence[Any]) -> Any:  # pragma: no cover - the backend's
        raise NotImplementedError

    async def prune(self, queue: str, statuses: Sequence[str], older_than_ms: int, *, limit: int = 1000) -> int:
        """See :meth:`runnerq_fast.storage.Backend.prune`."""
        wanted = check_prune(statuses, older_than_ms, limit)
        if not wanted:
            return 0
        deleted, _examined = await self._run(
            "prune", queue, [older_than_ms, limit, max(SCAN_BUDGET, limit), *wanted]
        )
        return int(deleted)

    async def prune_events(self, queue: str, older_than_ms: int, *, limit: int = 1000) -> int:
        """See :meth:`runnerq_fast.storage.Backend.prune_events`: always 0 on Redis (events go with their activity)."""
        check_prune_events(older_than_ms, limit)
        return 0

    async def hold(self, queue: str, purpose: str, holder: str, ttl_ms: int) -> bool:
        """See :meth:`runnerq_fast.storage.Backend.hold`."""
        check_hold(purpose, ttl_ms)
        return bool(await self._run("hold", queue, [purpose, holder, ttl_ms]))
