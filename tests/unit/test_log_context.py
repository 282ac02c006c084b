"""Log records made while an activity runs carry its id, type and attempt (memory backend).

Covers the three ways an attempt runs — an ``async def`` handler without
hooks (the compiled worker's inline path), one with hooks (``run_one``) and
a plain ``def`` handler (a pool thread) — under the selected implementation;
the suite runs once more with ``RUNNERQ_NO_EXTENSIONS=1`` for the pure twin.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import runnerq_fast as rq
from tests.conformance import FAST


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def capture() -> Iterator[Capture]:
    """A handler with :class:`rq.ActivityLogFilter` on the ``app`` and ``runnerq_fast`` loggers."""
    handler = Capture()
    handler.addFilter(rq.ActivityLogFilter())
    loggers = [logging.getLogger("app"), logging.getLogger("runnerq_fast")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.INFO)
    yield handler
    for lg, level in zip(loggers, levels, strict=True):
        lg.removeHandler(handler)
        lg.setLevel(level)


class NoHooks(rq.LifecycleHooks):
    pass


def _stamps(records: list[logging.LogRecord], message: str) -> list[tuple[Any, Any, Any]]:
    return [
        (r.__dict__["activity_id"], r.__dict__["activity_type"], r.__dict__["attempt"])
        for r in records
        if r.getMessage().startswith(message)
    ]


@pytest.mark.parametrize("kind", ["async", "async+hooks", "def"])
async def test_records_in_a_handler_carry_id_type_and_attempt(capture: Capture, kind: str) -> None:
    backend = rq.MemoryBackend()
    engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": "u"}, hooks=[NoHooks()] if kind == "async+hooks" else [])
    app = logging.getLogger("app")
    seen: list[rq.ActivityInfo | None] = []

    if kind == "def":

        @engine.activity("job")
        def job_sync(payload: Any, ctx: rq.ActivityContext) -> None:
            assert threading.current_thread() is not threading.main_thread()
            app.info("working on %s", payload)
            seen.append(rq.current_activity())
            if ctx.retry_count == 0:
                raise RuntimeError("first attempt fails")

    else:

        @engine.activity("job")
        async def job(payload: Any, ctx: rq.ActivityContext) -> None:
            app.info("working on %s", payload)
            seen.append(rq.current_activity())
            if ctx.retry_count == 0:
                raise RuntimeError("first attempt fails")

    fut = await engine.executor.activity("job").payload(7).execute()
    async with engine:
        await fut.result(timeout=5)
    aid = fut.activity_id
    assert _stamps(capture.records, "working on 7") == [(aid, "job", 1), (aid, "job", 2)]
    # the engine's own line about the failed attempt carries the activity too
    assert _stamps(capture.records, f"activity {aid} (job) attempt 1 failed") == [(aid, "job", 1)]
    assert [(i.id, i.activity_type, i.attempt) for i in seen if i is not None] == [(aid, "job", 1), (aid, "job", 2)]
    # outside an activity the attributes exist and are None
    app.info("after")
    assert _stamps(capture.records, "after") == [(None, None, None)]
    assert rq.current_activity() is None


async def test_activities_running_at_once_each_see_their_own(capture: Capture) -> None:
    backend = rq.MemoryBackend()
    engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": "u", "max_workers": 8})
    app = logging.getLogger("app")
    gate = asyncio.Event()
    started = 0

    @engine.activity("job")
    async def job(payload: Any, ctx: rq.ActivityContext) -> None:
        nonlocal started
        started += 1
        if started == 8:
            gate.set()
        await gate.wait()  # all eight are in flight, interleaved on one loop
        app.info("job %s", payload)

    ids = await engine.executor.enqueue_many([("job", i) for i in range(8)])
    async with engine:
        for activity_id in ids:
            await rq.ActivityFuture(backend, activity_id).result(timeout=5)
    for i, activity_id in enumerate(ids):
        assert _stamps(capture.records, f"job {i}") == [(activity_id, "job", 1)]


async def test_install_log_context_filters_the_root_handlers(monkeypatch: pytest.MonkeyPatch) -> None:
    root = logging.getLogger()
    handler = Capture()  # no filter of its own
    monkeypatch.setattr(root, "handlers", [handler])
    app = logging.getLogger("app.plain")  # propagates to the root's handlers
    app.setLevel(logging.INFO)
    try:
        assert rq.install_log_context() == [handler]
        rq.install_log_context()  # a second call adds nothing
        assert len(handler.filters) == 1
        backend = rq.MemoryBackend()
        engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": "u"})

        @engine.activity("job")
        async def job(payload: Any, ctx: rq.ActivityContext) -> None:
            app.info("inside")

        fut = await engine.executor.activity("job").execute()
        async with engine:
            await fut.result(timeout=5)
        app.info("outside", extra={"activity_id": "given", "attempt": 9})  # extra= still works and is kept
        assert _stamps(handler.records, "inside") == [(fut.activity_id, "job", 1)]
        assert _stamps(handler.records, "outside") == [("given", None, 9)]
        formatted = logging.Formatter("%(activity_type)s %(activity_id)s #%(attempt)s %(message)s")
        inside = next(r for r in handler.records if r.getMessage() == "inside")
        assert formatted.format(inside) == f"job {fut.activity_id} #1 inside"
    finally:
        app.setLevel(logging.NOTSET)


async def test_tasks_and_threads_a_handler_starts_keep_its_activity(capture: Capture) -> None:
    """What an attempt starts (gathered tasks, to_thread, a task outliving it) logs as that attempt."""
    backend = rq.MemoryBackend()
    engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": "u", "max_workers": 1})  # one worker: in turn
    app = logging.getLogger("app")
    second_done = asyncio.Event()
    stragglers: list[asyncio.Task[None]] = []

    async def part(n: int) -> None:
        app.info("part %s", n)

    async def straggler(payload: Any) -> None:
        await second_done.wait()  # logs after its own attempt ended and the worker ran the next one
        app.info("late %s", payload)

    @engine.activity("job")
    async def job(payload: Any, ctx: rq.ActivityContext) -> None:
        await asyncio.gather(part(payload * 10), part(payload * 10 + 1))
        await asyncio.to_thread(app.info, "thread %s", payload)
        if payload == 1:
            stragglers.append(asyncio.create_task(straggler(payload)))
        else:
            second_done.set()

    first = await engine.executor.activity("job").payload(1).execute()
    second = await engine.executor.activity("job").payload(2).execute()
    async with engine:
        await first.result(timeout=5)
        await second.result(timeout=5)
        await asyncio.wait_for(stragglers[0], 5)
    one, two = (first.activity_id, "job", 1), (second.activity_id, "job", 1)
    assert _stamps(capture.records, "part 10") == [one] and _stamps(capture.records, "part 11") == [one]
    assert _stamps(capture.records, "part 20") == [two]
    assert _stamps(capture.records, "thread 1") == [one] and _stamps(capture.records, "thread 2") == [two]
    assert _stamps(capture.records, "late 1") == [one]
