"""Issue 27 items 2 and 3: plain def handlers enqueue children without await; per-type options.

Memory backend, and a SQLite file where it says so (the registry itself runs on all four backends in
tests/conformance_registry.py).
"""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import runnerq_fast as rq
from runnerq_fast.executor import BlockingExecutor
from tests.conformance import FAST


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[rq.Backend]:
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'q.db'}"
    backend = await rq.connect(url)
    try:
        yield backend
    finally:
        await backend.close()


def make(backend: rq.Backend, **kw: Any) -> rq.WorkerEngine:
    return rq.WorkerEngine(backend, **{**FAST, "queue_name": "u", **kw})


# ------------------------------------------------------------------ item 2: sync children
async def test_a_plain_def_handler_enqueues_a_child_without_await(store: rq.Backend) -> None:
    engine = make(store)
    seen: dict[str, Any] = {}

    @engine.activity("parent")
    def parent(payload: Any, ctx: rq.ActivityContext) -> str:
        ctx.metadata["added"] = "in-handler"
        ex = ctx.executor
        seen["executor"] = ex
        child_id: str = ex.activity("child").payload({"n": payload}).metadata({"own": "1"}).execute()  # type: ignore[assignment]
        many: list[str] = ex.enqueue_many([("child", {"n": 2}), ex.activity("child").payload({"n": 3})])  # type: ignore[assignment]
        seen["many"] = many
        return child_id

    @engine.activity("child")
    async def child(payload: Any, ctx: rq.ActivityContext) -> dict[str, Any]:
        return {"n": payload["n"], "meta": dict(ctx.metadata)}

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a dropped coroutine would warn
        async with engine:
            fut = await engine.executor.activity("parent").payload(1).metadata({"tenant": "t1"}).execute()
            child_id = await fut.result(timeout=5)
            got = await engine.executor.future(child_id).result(timeout=5)
            others = [await engine.executor.future(i).result(timeout=5) for i in seen["many"]]
        gc.collect()
    assert isinstance(seen["executor"], BlockingExecutor)
    assert got == {"n": 1, "meta": {"tenant": "t1", "added": "in-handler", "own": "1"}}
    assert [o["n"] for o in others] == [2, 3]
    assert all(o["meta"] == {"tenant": "t1", "added": "in-handler"} for o in others)
    for cid in (child_id, *seen["many"]):
        snap = await store.get_activity(cid)
        assert snap is not None and snap.parent_id == fut.activity_id


async def test_an_async_handler_keeps_the_async_executor() -> None:
    backend = rq.MemoryBackend()
    engine = make(backend)

    @engine.activity("p")
    async def p(payload: Any, ctx: rq.ActivityContext) -> str:
        assert not isinstance(ctx.executor, BlockingExecutor)
        return (await ctx.executor.activity("c").execute()).activity_id

    @engine.activity("c")
    async def c(payload: Any, ctx: rq.ActivityContext) -> None:
        return None

    async with engine:
        fut = await engine.executor.activity("p").execute()
        assert len(await fut.result(timeout=5)) == 32


async def test_a_blocking_executor_refuses_a_running_loop() -> None:
    backend = rq.MemoryBackend()
    ex = BlockingExecutor(rq.ActivityExecutor(backend, "u"), asyncio.get_running_loop())
    with pytest.raises(RuntimeError, match="cannot be called from a running event loop"):
        ex.activity("c").execute()
    assert (await backend.stats("u")).pending == 0


async def test_a_plain_def_handler_returning_a_coroutine_fails_loudly_and_is_not_retried() -> None:
    backend = rq.MemoryBackend()
    engine = make(backend)

    async def later(payload: Any, ctx: rq.ActivityContext) -> None:
        return None

    @engine.activity("bad")
    def bad(payload: Any, ctx: rq.ActivityContext) -> Any:
        return later(payload, ctx)  # nobody would await this

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # closed, not dropped: no "never awaited" warning
        async with engine:
            fut = await engine.executor.activity("bad").max_retries(3).execute()
            with pytest.raises(rq.ActivityFailed, match=r"returned coroutine .* an awaitable nobody awaits") as err:
                await fut.result(timeout=5)
        gc.collect()
    assert err.value.status == "failed"
    snap = await backend.get_activity(fut.activity_id)
    assert snap is not None and snap.retry_count == 0


# ------------------------------------------------------------------ item 3: per-type options
async def test_the_engines_own_executor_applies_its_types_defaults_and_an_enqueue_overrides(
    store: rq.Backend,
) -> None:
    engine = make(store, default_max_retries=2, default_timeout=60)

    @engine.activity("t", max_retries=7, timeout=1.5, priority=rq.Priority.CRITICAL)
    async def t(payload: Any, ctx: rq.ActivityContext) -> None:
        return None

    ex = engine.executor  # before start: the local registration alone
    a = (await ex.activity("t").execute()).activity_id
    b = (await ex.activity("t").max_retries(1).timeout(0).priority(rq.Priority.LOW).execute()).activity_id
    [c] = await ex.enqueue_many([("t", None)])
    [d] = await ex.enqueue_many([("other", None)])
    got = {i: await store.get_activity(i) for i in (a, b, c, d)}
    assert [(s.max_retries, s.timeout_ms, s.priority) for s in got.values() if s is not None] == [
        (7, 1500, 4), (1, 0, 1), (7, 1500, 4), (2, 60_000, 2)]


async def test_periodic_takes_retries_a_timeout_and_the_types_defaults() -> None:
    backend = rq.MemoryBackend()
    engine = make(backend)

    @engine.activity("tick", max_retries=5, priority=rq.Priority.HIGH)
    async def tick(payload: Any, ctx: rq.ActivityContext) -> None:
        return None

    engine.periodic(0.05, "tick", name="own", max_retries=1, timeout=9)
    engine.periodic(0.05, "tick", name="typed")
    with pytest.raises(rq.ConfigError, match="max_retries must be"):
        engine.periodic(1, "tick", name="bad", max_retries=-1)
    with pytest.raises(rq.ConfigError, match="timeout must be"):
        engine.periodic(1, "tick", name="bad", timeout=-1)
    def schedule_of(s: rq.ActivitySnapshot) -> Any:
        return s.metadata.get("schedule")

    async with engine:
        insp = engine.inspector()
        for _ in range(200):
            if {"own", "typed"} <= {schedule_of(s) for s in await insp.list_activities(limit=100)}:
                break
            await asyncio.sleep(0.02)
    snaps = await engine.inspector().list_activities(limit=100)
    own = [s for s in snaps if schedule_of(s) == "own"]
    typed = [s for s in snaps if schedule_of(s) == "typed"]
    assert own and typed
    assert (own[0].max_retries, own[0].timeout_ms, own[0].priority) == (1, 9000, 3)
    assert (typed[0].max_retries, typed[0].timeout_ms, typed[0].priority) == (5, 300_000, 3)


class Transient(Exception):
    pass


class Permanent(Exception):
    pass


async def test_retry_on_and_no_retry_on_classify_and_the_error_classes_keep_precedence() -> None:
    backend = rq.MemoryBackend()
    engine = make(backend)
    calls: dict[str, int] = {}

    @engine.activity("only", retry_on=(Transient,), max_retries=2)
    async def only(payload: Any, ctx: rq.ActivityContext) -> None:
        calls[payload] = calls.get(payload, 0) + 1
        raise {"transient": Transient(), "other": ValueError("no"), "retryable": rq.RetryableError("r"),
               "timeout": TimeoutError("slow")}[payload]

    @engine.activity("never", no_retry_on=Permanent, max_retries=2)
    async def never(payload: Any, ctx: rq.ActivityContext) -> None:
        calls["n-" + payload] = calls.get("n-" + payload, 0) + 1
        raise {"permanent": Permanent(), "other": ValueError("yes")}[payload]

    async with engine:
        ex = engine.executor
        futs = {p: await ex.activity("only").payload(p).execute() for p in ("transient", "other", "retryable",
                                                                             "timeout")}
        futs.update({"n-" + p: await ex.activity("never").payload(p).execute() for p in ("permanent", "other")})
        outcomes: dict[str, str] = {}
        for k, f in futs.items():
            with pytest.raises(rq.ActivityFailed) as err:
                await f.result(timeout=10)
            outcomes[k] = err.value.status
            if k in ("other", "n-permanent"):
                assert "not retried: the type's" in (err.value.error or "")
    assert outcomes == {"transient": "dead_letter", "other": "failed", "retryable": "dead_letter",
                        "timeout": "failed", "n-permanent": "failed", "n-other": "dead_letter"}
    assert calls == {"transient": 3, "other": 1, "retryable": 3, "timeout": 1, "n-permanent": 1, "n-other": 3}


async def test_an_empty_retry_on_retries_nothing_but_a_retryable_error_and_a_list_is_taken() -> None:
    """``retry_on=()`` is given, and names nothing (Celery's ``autoretry_for=()``); ``None`` retries all."""
    backend = rq.MemoryBackend()
    engine = make(backend)
    calls: dict[str, int] = {}

    @engine.activity("none", retry_on=(), max_retries=2)
    async def none(payload: Any, ctx: rq.ActivityContext) -> None:
        calls[payload] = calls.get(payload, 0) + 1
        raise rq.RetryableError("again") if payload == "retryable" else Transient("x")

    @engine.activity("listed", retry_on=[Transient], max_retries=1)
    async def listed(payload: Any, ctx: rq.ActivityContext) -> None:
        calls["listed"] = calls.get("listed", 0) + 1
        raise Transient("x")

    async with engine:
        ex = engine.executor
        futs = {p: await ex.activity("none").payload(p).execute() for p in ("plain", "retryable")}
        futs["listed"] = await ex.activity("listed").payload("listed").execute()
        statuses = {}
        for k, f in futs.items():
            with pytest.raises(rq.ActivityFailed) as err:
                await f.result(timeout=10)
            statuses[k] = err.value.status
    assert statuses == {"plain": "failed", "retryable": "dead_letter", "listed": "dead_letter"}
    assert calls == {"plain": 1, "retryable": 3, "listed": 2}


async def test_a_types_backoff_sets_the_retry_delay() -> None:
    backend = rq.MemoryBackend()
    engine = make(backend, retry_jitter=0.0, retry_delay=0.01, max_retry_delay=0.05)
    delays: list[float] = []

    class Hook(rq.LifecycleHooks):
        async def on_released(self, info: Any, delay: float, error: str) -> None:
            delays.append(delay)

    engine.hooks = (Hook(),)

    @engine.activity("slow", backoff=(0.2, 0.3), max_retries=2)
    async def slow(payload: Any, ctx: rq.ActivityContext) -> None:
        raise ValueError("again")

    async with engine:
        fut = await engine.executor.activity("slow").execute()
        with pytest.raises(rq.ActivityFailed):
            await fut.result(timeout=10)
    assert delays == [0.2, 0.3]


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"max_retries": -1}, "max_retries must be"),
        ({"timeout": float("nan")}, "timeout must be"),
        ({"priority": 9}, "priority must be"),
        ({"retry_on": (ValueError, "x")}, "retry_on takes exception classes"),
        ({"no_retry_on": int}, "no_retry_on takes exception classes"),
        ({"backoff": -1}, "backoff is seconds"),
        ({"backoff": (1, 2, 3)}, "backoff is seconds"),
        ({"backoff": (5.0, 1.0)}, "needs cap >= base"),
        ({"retry_on": [ValueError, 3]}, "retry_on takes exception classes"),
    ],
)
def test_bad_type_options_are_refused_at_registration(kw: dict[str, Any], match: str) -> None:
    engine = rq.WorkerEngine(rq.MemoryBackend(), queue_name="u")
    with pytest.raises(rq.ConfigError, match=match):
        engine.activity("t", **kw)(lambda p, c: None)
    assert engine.activity_types == []


async def test_a_producer_reads_the_store_at_most_once_per_ttl(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = rq.MemoryBackend()
    reads = 0
    real = backend.get_type_defaults

    async def counting(queue: str) -> dict[str, rq.TypeDefaults]:
        nonlocal reads
        reads += 1
        return await real(queue)

    monkeypatch.setattr(backend, "get_type_defaults", counting)
    await backend.set_type_defaults("u", [rq.TypeDefaults(activity_type="t", max_retries=4)])
    ex = rq.ActivityExecutor(backend, "u")
    for _ in range(5):
        await ex.activity("t").execute()
    await ex.enqueue_many([("t", None)] * 3)
    await rq.ActivityExecutor(backend, "u").activity("t").execute()  # another executor of the backend shares it
    assert reads == 1
    assert {s.max_retries for s in await rq.QueueInspector(backend, "u").list_activities(limit=20)} == {4}


# ------------------------------------------------------------------ HTTP and CLI enqueues
async def test_an_http_enqueue_gets_the_types_defaults_a_worker_registered() -> None:
    from runnerq_fast.web import create_app
    from tests.web_helpers import asgi_client

    backend = rq.MemoryBackend()
    engine = rq.WorkerEngine(backend, **FAST)  # the default queue

    @engine.activity("email", max_retries=8, timeout=4, priority=rq.Priority.HIGH)
    async def email(payload: Any, ctx: rq.ActivityContext) -> None:
        return None

    await engine.start()  # records the defaults
    await engine.stop()
    q = "/api/v1/queues/default/activities"
    async with asgi_client(create_app(backend)) as c:
        plain = (await c.post(q, json={"type": "email"})).json()["id"]
        own = (await c.post(q, json={"type": "email", "max_retries": 0, "priority": "low", "timeout": 1})).json()["id"]
        batch = await c.post(f"{q}/batch", json={"activities": [{"type": "email"}]})
        [in_batch] = [item["id"] for item in batch.json()["activities"]]
    got = [await backend.get_activity(i) for i in (plain, own, in_batch)]
    assert [(s.max_retries, s.timeout_ms, s.priority) for s in got if s is not None] == [
        (8, 4000, 3), (0, 1000, 1), (8, 4000, 3)]


def test_a_cli_enqueue_gets_the_types_defaults_a_worker_registered(tmp_path: Path) -> None:
    from tests.acceptance.helpers import run_cli

    url = f"sqlite:///{tmp_path / 'q.db'}"

    async def register() -> None:
        backend = await rq.connect(url)
        try:
            engine = rq.WorkerEngine(backend, queue_name="cli", **FAST)
            engine.register_activity("report", lambda p, c: None, max_retries=6, timeout=2.5, priority=4)
            await engine.start()
            await engine.stop()
        finally:
            await backend.close()

    asyncio.run(register())
    plain = run_cli("enqueue", "report", "--queue", "cli", "--backend", url)
    own = run_cli("enqueue", "report", "--queue", "cli", "--max-retries", "1", "--priority", "low", "--backend", url)
    assert plain.returncode == 0 and own.returncode == 0, plain.stderr + own.stderr

    async def read() -> list[tuple[int, int, int]]:
        backend = await rq.connect(url)
        try:
            out = []
            for res in (plain, own):
                snap = await backend.get_activity(res.stdout.strip())
                assert snap is not None
                out.append((snap.max_retries, snap.timeout_ms, snap.priority))
            return out
        finally:
            await backend.close()

    assert asyncio.run(read()) == [(6, 2500, 4), (1, 2500, 1)]


async def test_an_async_handler_leaving_an_enqueue_unawaited_fails_loudly_and_an_awaited_or_tasked_one_does_not(
) -> None:
    backend = rq.MemoryBackend()
    engine = make(backend)
    tasks: list[asyncio.Task[Any]] = []

    @engine.activity("forgets")
    async def forgets(payload: Any, ctx: rq.ActivityContext) -> None:
        ctx.executor.activity("child").execute()  # type: ignore[unused-coroutine]  # the bug: no await
        ctx.executor.enqueue_many([("child", None)])  # type: ignore[unused-coroutine]

    @engine.activity("fine")
    async def fine(payload: Any, ctx: rq.ActivityContext) -> None:
        await ctx.executor.activity("child").execute()
        tasks.append(asyncio.create_task(ctx.executor.activity("child").execute()))  # started by the loop

    @engine.activity("child")
    async def child(payload: Any, ctx: rq.ActivityContext) -> None:
        return None

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # closed by the engine: no "never awaited" warning
        async with engine:
            bad = await engine.executor.activity("forgets").max_retries(3).execute()
            with pytest.raises(rq.ActivityFailed, match="never awaited") as err:
                await bad.result(timeout=5)
            good = await engine.executor.activity("fine").execute()
            await good.result(timeout=5)
            await asyncio.gather(*tasks)
        gc.collect()
    assert err.value.status == "failed"
    assert "activity 'child'" in (err.value.error or "") and "enqueue_many" in (err.value.error or "")
    assert (await engine.inspector().children(bad.activity_id)).items == []
    assert len((await engine.inspector().children(good.activity_id)).items) == 2


async def test_run_eagerly_gives_a_plain_def_handler_the_blocking_executor_too() -> None:
    engine = rq.WorkerEngine(rq.MemoryBackend(), queue_name="u")

    @engine.activity("p")
    def p(payload: Any, ctx: rq.ActivityContext) -> str:
        ex = ctx.executor
        assert isinstance(ex, rq.BlockingExecutor)
        return ex.activity("c").payload(payload).execute()

    child_id = await rq.testing.run_eagerly(engine, "p", 5)
    assert isinstance(child_id, str) and len(child_id) == 32


def test_the_sync_client_applies_the_types_defaults(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"

    async def register() -> None:
        backend = await rq.connect(url)
        try:
            engine = rq.WorkerEngine(backend, queue_name="s", **FAST)
            engine.register_activity("t", lambda p, c: None, max_retries=9, priority=1)
            await engine.start()
            await engine.stop()
        finally:
            await backend.close()

    asyncio.run(register())
    with rq.SyncExecutor(url, "s") as client:
        plain = client.activity("t").execute()
        own = client.activity("t").priority(4).execute()
        [many] = client.enqueue_many([("t", None)])

        async def fields(ex: rq.ActivityExecutor) -> list[tuple[int, int]]:
            snaps = [await ex.backend.get_activity(i) for i in (plain, own, many)]
            return [(s.max_retries, s.priority) for s in snaps if s is not None]

        assert client.run(fields) == [(9, 1), (9, 4), (9, 1)]
