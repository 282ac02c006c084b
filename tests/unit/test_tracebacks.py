"""The traceback stored with a failed attempt (issue 27): its frames, its bound, where it is logged."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

import runnerq_fast as rq
from runnerq_fast.engine import errtext
from runnerq_fast.engine.errtext import format_traceback
from runnerq_fast.ids import new_activity_id
from runnerq_fast.models import NewActivity
from tests.conformance import FAST


def _recurse(n: int) -> None:
    if n == 0:
        raise ValueError("bottom")
    _recurse(n - 1)


def _caught(fn: Any, *args: Any) -> BaseException:
    try:
        fn(*args)
    except BaseException as exc:
        return exc
    raise AssertionError("did not raise")


def test_chained_exceptions_are_printed_as_python_prints_them() -> None:
    def inner() -> None:
        raise KeyError("missing")

    def outer() -> None:
        try:
            inner()
        except KeyError as exc:
            raise RuntimeError("wrapped") from exc

    tb = format_traceback(_caught(outer))
    assert tb.index("KeyError: 'missing'") < tb.index("direct cause") < tb.index("RuntimeError: wrapped")
    assert "in inner\n" in tb and "in outer\n" in tb and tb.endswith("RuntimeError: wrapped\n")


def test_a_deep_traceback_keeps_its_head_and_innermost_frames_within_the_bound() -> None:
    exc = _caught(_recurse, 150)
    exc.add_note("x" * 30_000)  # a huge message line
    tb = format_traceback(exc)
    assert len(tb) <= errtext._MAX_TRACEBACK_CHARS
    assert tb.startswith("Traceback (most recent call last):\n")
    assert "characters of the traceback cut) ...\n" in tb
    assert "ValueError: bottom" in tb and tb.rstrip().endswith("x" * 100)
    short = format_traceback(_caught(_recurse, 3))
    assert "cut" not in short and short.count("in _recurse\n") == 4


def test_nul_and_lone_surrogates_are_made_storable() -> None:
    tb = format_traceback(ValueError("a\x00b \udcff"))  # never raised: no frames
    assert tb == "ValueError: a\\x00b \\udcff\n"


def test_an_exception_whose_str_raises_still_gives_a_traceback() -> None:
    class Odd(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    tb = format_traceback(_caught(lambda: (_ for _ in ()).throw(Odd())))
    assert "Odd" in tb and tb.startswith("Traceback")


async def test_final_failure_is_logged_once_with_its_traceback_and_a_retry_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backend = rq.MemoryBackend()
    engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": "tb"})

    def deep() -> None:
        raise LookupError("gone")

    @engine.activity("t")
    async def handler(payload: Any, ctx: rq.ActivityContext) -> None:
        deep()

    caplog.set_level(logging.DEBUG, logger="runnerq_fast.engine")
    fut = await engine.executor.activity("t").max_retries(1).execute()
    async with engine:
        with pytest.raises(rq.ActivityFailed):
            await fut.result(timeout=5)
    with_tb = [r for r in caplog.records if "in deep\n" in r.getMessage()]
    assert [r.levelno for r in with_tb] == [logging.DEBUG, logging.ERROR]
    assert "dead-lettered after 2 attempts" in with_tb[1].getMessage()
    snap = await backend.get_activity(fut.activity_id)
    assert snap is not None and snap.traceback is not None
    assert with_tb[1].getMessage().endswith("\n" + snap.traceback.rstrip("\n"))


async def test_a_timeout_shows_where_the_handler_was_waiting() -> None:
    backend = rq.MemoryBackend()
    engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": "tb"})

    async def slow_call() -> None:
        await asyncio.sleep(10)

    @engine.activity("slow")
    async def slow(payload: Any, ctx: rq.ActivityContext) -> None:
        await slow_call()

    fut = await engine.executor.activity("slow").timeout(0.05).max_retries(0).execute()
    async with engine:
        with pytest.raises(rq.ActivityFailed):
            await fut.result(timeout=5)
    snap = await backend.get_activity(fut.activity_id)
    assert snap is not None and snap.traceback is not None
    assert "in slow_call\n    await asyncio.sleep(10)" in snap.traceback
    assert snap.traceback.rstrip().endswith("TimeoutError")


async def test_an_undecodable_payload_has_no_traceback() -> None:
    backend = rq.MemoryBackend()
    engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": "tb"})

    @engine.activity("t")
    async def handler(payload: Any, ctx: rq.ActivityContext) -> None:
        raise AssertionError("never called")

    (res,) = await backend.enqueue("tb", [NewActivity(new_activity_id(), "t", b"{not json")])
    async with engine:
        with pytest.raises(rq.ActivityFailed):
            await rq.ActivityFuture(backend, res.activity_id).result(timeout=5)
    snap = await backend.get_activity(res.activity_id)
    assert snap is not None and snap.last_error is not None and snap.traceback is None
