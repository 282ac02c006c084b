"""rq.testing: TestEngine, drain, enqueue assertions, make_context, run_eagerly."""

from __future__ import annotations

import threading
from typing import Any
from unittest.mock import ANY

import pytest

import runnerq_fast as rq
from runnerq_fast.testing import RecordingBackend, TestEngine, make_context, run_eagerly


def build_app() -> rq.WorkerEngine:
    """A small app as a user would write it, bound to a URL the tests never open."""
    engine = rq.WorkerEngine("postgresql://nowhere.invalid/app", queue_name="app")

    @engine.activity("signup")
    async def signup(payload: dict[str, str], ctx: rq.ActivityContext) -> dict[str, bool]:
        await ctx.executor.activity("send_email").payload({"to": payload["email"]}).execute()
        await (ctx.executor.activity("reminder").payload({"to": payload["email"]}).delay(3600)
               .priority(rq.Priority.LOW).metadata({"kind": "nudge"}).execute())
        return {"ok": True}

    @engine.activity("send_email")
    def send_email(payload: dict[str, str], ctx: rq.ActivityContext) -> str:
        return f"sent to {payload['to']} in {threading.current_thread().name}"

    @engine.activity("reminder")
    async def reminder(payload: Any, ctx: rq.ActivityContext) -> None:
        return None

    return engine


async def test_drain_runs_everything_and_records_what_was_enqueued() -> None:
    async with TestEngine(build_app()) as t:
        fut = await t.executor.activity("signup").payload({"email": "a@b.c"}).execute()
        await t.drain()
        assert await fut.result(timeout=1) == {"ok": True}
        (mail,) = t.assert_enqueued("send_email", payload={"to": "a@b.c"}, count=1)
        assert (await t.result(mail.activity_id)).startswith("sent to a@b.c in runnerq-sync")
        (nudge,) = t.assert_enqueued("reminder", delay=3600, priority=rq.Priority.LOW, metadata={"kind": "nudge"})
        assert nudge.run_at is not None and nudge.queue == "app"
        assert (await t.backend.stats("app")).scheduled == 1  # drain does not wait for delayed work
        assert t.enqueued("signup", payload=ANY)[0].delay == 0.0
        t.assert_not_enqueued("refund")
        with pytest.raises(AssertionError, match=r"(?s)expected at least one .send_email.*send_email payload"):
            t.assert_enqueued("send_email", payload={"to": "someone@else"})
        with pytest.raises(AssertionError, match="expected no 'reminder'"):
            t.assert_not_enqueued("reminder")
        with pytest.raises(AssertionError, match="expected 2"):
            t.assert_enqueued("send_email", count=2)


async def test_drain_times_out_on_work_that_never_ends() -> None:
    engine = rq.WorkerEngine(queue_name="q", shutdown_grace=0.01)

    @engine.activity("hang")
    async def hang(payload: Any, ctx: rq.ActivityContext) -> None:
        await ctx.cancellation.wait()

    async with TestEngine(engine) as t:
        await t.executor.activity("hang").execute()
        with pytest.raises(TimeoutError, match="still to run"):
            await t.drain(timeout=0.1)


async def test_record_only_mode_runs_no_handler() -> None:
    engine = build_app()
    async with TestEngine(engine, start=False) as t:
        await t.executor.activity("signup").payload({"email": "x@y.z"}).execute()
        t.assert_enqueued("signup", payload={"email": "x@y.z"})
        assert (await t.backend.stats("app")).pending == 1
        with pytest.raises(rq.ConfigError, match="needs the engine running"):
            await t.drain()


async def test_deduplicated_enqueues_are_not_recorded() -> None:
    backend = RecordingBackend()
    ex = rq.ActivityExecutor(backend, "q")
    for _ in range(3):
        await ex.activity("t").idempotency_key("k").execute()
    backend.assert_enqueued("t", count=1)
    backend.clear()
    assert backend.enqueued() == []


async def test_run_eagerly_calls_the_handler_with_a_context() -> None:
    engine = build_app()
    children = RecordingBackend()
    ex = rq.ActivityExecutor(children, "app")
    assert await run_eagerly(engine, "signup", {"email": "e@f.g"}, executor=ex) == {"ok": True}
    children.assert_enqueued("send_email", payload={"to": "e@f.g"})
    # a plain def handler runs in a thread, as in a worker
    assert (await run_eagerly(engine, "send_email", {"to": "q"})).startswith("sent to q in ")
    with pytest.raises(rq.ConfigError, match="no handler registered"):
        await run_eagerly(engine, "nope", {})
    with pytest.raises(rq.InvalidActivityError, match="NaN"):
        await run_eagerly(engine, "send_email", {"to": float("nan")})


async def test_run_eagerly_reports_an_unencodable_result() -> None:
    engine = rq.WorkerEngine(rq.MemoryBackend())

    @engine.activity("bad")
    async def bad(payload: Any, ctx: rq.ActivityContext) -> Any:
        return {"when": object()}

    with pytest.raises(rq.InvalidActivityError):
        await run_eagerly(engine, "bad")


def test_make_context_builds_a_context_from_plain_values() -> None:
    ctx = make_context(activity_id="a1", activity_type="t", metadata={"tenant": "t1"}, retry_count=2,
                       max_retries=5, priority=rq.Priority.HIGH, enqueued_at=1_700_000_000.5, cancelled=True)
    assert isinstance(ctx, rq.ActivityContext)
    assert (ctx.activity_id, ctx.activity_type, ctx.retry_count, ctx.max_retries, ctx.priority) == (
        "a1", "t", 2, 5, 3)
    assert ctx.metadata == {"tenant": "t1"} and ctx.enqueued_at == 1_700_000_000.5 and ctx.is_cancelled
    fresh = make_context()
    assert fresh.metadata == {} and not fresh.is_cancelled and len(fresh.activity_id) == 32
    assert isinstance(fresh.executor.backend, RecordingBackend)


async def test_result_takes_the_future_or_its_id_and_refuses_anything_else() -> None:
    async with TestEngine(build_app()) as t:
        fut = await t.executor.activity("signup").payload({"email": "f@b.c"}).execute()
        assert await t.result(fut, timeout=2) == {"ok": True}
        assert await t.result(fut.activity_id, timeout=2) == {"ok": True}
        with pytest.raises(TypeError, match="an activity id is a str, got int"):
            await t.result(42, timeout=2)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="an activity id is a str, got ActivityFuture"):
            t.executor.future(fut)  # type: ignore[arg-type]
