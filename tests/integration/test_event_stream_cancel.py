"""A live event stream cancelled in the very loop turn its wakeup arrives ends (SQLite, PostgreSQL).

Python 3.11's ``asyncio.wait_for`` returns the inner result when the
cancellation and the inner future's completion meet, so a stream waiting for
its wakeup with it swallowed the cancel and went on querying the store for
ever: the SSE replays that hand over to the shared reader are cancelled just
so, while writes wake every stream.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import runnerq_fast as rq
from runnerq_fast.backends.postgres import PostgresBackend
from runnerq_fast.backends.sqlite import SqliteBackend


async def _consume(source: AsyncIterator[rq.ActivityEvent]) -> None:
    async for _ in source:
        pass


async def _cancel_as_woken(backend: rq.Backend, wakers: Callable[[], set[asyncio.Event]]) -> None:
    source = backend.event_stream("cancelq", None)
    task = asyncio.create_task(_consume(source))
    for _ in range(200):
        await asyncio.sleep(0.01)
        found = wakers()
        if found:
            break
    (wake,) = found
    wake.set()  # the wakeup and the cancel in one loop turn
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert task.cancelled()


async def test_sqlite_stream_cancelled_as_it_is_woken_ends(tmp_path: Path) -> None:
    backend = await SqliteBackend.open(f"sqlite:///{tmp_path / 'c.db'}")
    try:
        await _cancel_as_woken(backend, lambda: set(backend._streams))
        assert not backend._streams
    finally:
        await backend.close()


async def test_postgres_stream_cancelled_as_it_is_woken_ends(pg_backend: PostgresBackend) -> None:
    await _cancel_as_woken(pg_backend, lambda: set(pg_backend._streams.get("cancelq", ())))
    assert "cancelq" not in pg_backend._streams
