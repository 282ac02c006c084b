"""A backend belongs to the event loop it was opened in (issue 11, item 15): a second loop gets a clear error."""

from __future__ import annotations

import asyncio

import pytest

import runnerq_fast as rq


def test_a_backend_used_in_a_second_asyncio_run_names_the_cause() -> None:
    backend = rq.MemoryBackend()
    assert asyncio.run(backend.stats("q")).total == 0  # its first call binds it to this loop
    with pytest.raises(rq.EventLoopMismatchError, match="MemoryBackend was opened in another event loop "
                                                       r"\(which is now closed\)"):
        asyncio.run(backend.stats("q"))


def test_an_engine_started_in_another_loop_than_its_backend_fails_at_start() -> None:
    async def opened() -> rq.Backend:
        return await rq.connect("memory://")

    backend = asyncio.run(opened())
    engine = rq.WorkerEngine(backend, queue_name="q")

    @engine.activity("t")
    async def t(payload: object, ctx: rq.ActivityContext) -> None:
        return None

    with pytest.raises(rq.EventLoopMismatchError):
        asyncio.run(engine.start())
