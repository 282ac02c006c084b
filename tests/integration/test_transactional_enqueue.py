"""Enqueue inside the caller's transaction (the outbox pattern) on PostgreSQL and SQLite.

``execute(connection=conn)`` and ``enqueue_many(..., connection=conn)`` write
through the caller's own connection: the activity exists if and only if the
caller's transaction commits, and workers are woken at the commit. Each test
uses a fresh PostgreSQL database (``pg_url``) or a fresh SQLite file.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

import runnerq_fast as rq
from runnerq_fast.backends.postgres import WORK_CHANNEL, PostgresBackend
from runnerq_fast.backends.sqlite import SqliteBackend
from runnerq_fast.errors import BackendError, ConfigError

QUEUE = "outbox"


async def _listen(url: str) -> tuple[asyncpg.Connection, list[str]]:
    """A raw LISTEN connection on the work channel and the payloads it receives."""
    conn = await asyncpg.connect(url)
    got: list[str] = []
    await conn.add_listener(WORK_CHANNEL, lambda *args: got.append(args[3]))
    return conn, got


async def _eventually(predicate: Any, timeout: float = 5.0) -> bool:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


@pytest.fixture
async def pg(pg_url: str) -> AsyncIterator[PostgresBackend]:
    backend = await PostgresBackend.open(pg_url, migrate=False)
    try:
        yield backend
    finally:
        await backend.close()


# ---------------------------------------------------------------- PostgreSQL
async def test_pg_commit_creates_the_activity_and_notifies_at_commit(pg: PostgresBackend, pg_url: str) -> None:
    listener, got = await _listen(pg_url)
    engine = rq.WorkerEngine(pg, queue_name=QUEUE, max_workers=4, poll_interval=30.0)
    ran: list[dict[str, Any]] = []

    @engine.activity("ship")
    async def ship(payload: dict[str, Any], ctx: rq.ActivityContext) -> str:
        ran.append(payload)
        return "shipped"

    conn = await asyncpg.connect(pg_url)
    try:
        await conn.execute("CREATE TABLE orders (id int PRIMARY KEY)")
        async with engine:
            await asyncio.sleep(0.1)  # the engine is idle, waiting for a notification (poll_interval 30 s)
            tx = conn.transaction()
            await tx.start()
            await conn.execute("INSERT INTO orders VALUES (1)")
            future = await engine.executor.activity("ship").payload({"order": 1}).execute(connection=conn)
            await asyncio.sleep(0.3)
            # invisible to everyone else, nothing announced, nothing run before the commit
            assert await pg.get_activity(future.activity_id) is None
            assert got == [] and ran == []
            await tx.commit()
            assert await future.result(timeout=5) == "shipped"
        assert ran == [{"order": 1}]
        assert got == [QUEUE]  # one NOTIFY, delivered by the commit
        snap = await pg.get_activity(future.activity_id)
        assert snap is not None and snap.status == "completed"
        assert await conn.fetchval("SELECT count(*) FROM orders") == 1
    finally:
        await conn.close()
        await listener.close()


async def test_pg_rollback_leaves_no_activity_event_or_notification(pg: PostgresBackend, pg_url: str) -> None:
    listener, got = await _listen(pg_url)
    executor = rq.ActivityExecutor(pg, QUEUE)
    conn = await asyncpg.connect(pg_url)
    try:
        tx = conn.transaction()
        await tx.start()
        future = await executor.activity("ship").payload({"order": 2}).execute(connection=conn)
        ids = await executor.enqueue_many(
            [("ship", {"n": 1}), executor.activity("ship").payload({"n": 2}).idempotency_key("k2")],
            connection=conn,
        )
        await tx.rollback()
        await asyncio.sleep(0.3)
        for activity_id in (future.activity_id, *ids):
            assert await pg.get_activity(activity_id) is None
            assert await pg.get_events(activity_id) == []
        assert (await pg.stats(QUEUE)).total == 0
        assert got == []
        # the key was never taken: a later enqueue of it creates an activity
        again = await executor.activity("ship").idempotency_key("k2").execute()
        assert again.created
    finally:
        await conn.close()
        await listener.close()


async def test_pg_enqueue_many_in_a_pool_connection_commits_all(pg: PostgresBackend, pg_url: str) -> None:
    listener, got = await _listen(pg_url)
    executor = rq.ActivityExecutor(pg, QUEUE)
    pool = await asyncpg.create_pool(pg_url, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn, conn.transaction():
            ids = await executor.enqueue_many(
                [("a", 1), executor.activity("b").payload(2).idempotency_key("kb"), ("c", 3)], connection=conn
            )
            # the keyed batch ran under a savepoint: the caller's transaction is still open and usable
            assert conn.is_in_transaction()
            assert await conn.fetchval("SELECT count(*) FROM runnerq_activities") == 3
            for n in range(3):
                ids.append((await executor.activity("d").payload(n).execute(connection=conn)).activity_id)
        assert (await pg.stats(QUEUE)).pending == 6
        snaps = [await pg.get_activity(i) for i in ids]
        assert [s.activity_type for s in snaps if s is not None] == ["a", "b", "c", "d", "d", "d"]
        # four statements notified inside one transaction: PostgreSQL delivers one notification, at commit
        assert await _eventually(lambda: got == [QUEUE])
        await asyncio.sleep(0.2)
        assert got == [QUEUE]
    finally:
        await pool.close()
        await listener.close()


async def test_pg_a_batch_of_equal_and_differing_columns_in_the_callers_transaction(
    pg: PostgresBackend, pg_url: str
) -> None:
    # equal columns (type, priority, ...) go as one-element arrays that every row takes; payloads differ
    executor = rq.ActivityExecutor(pg, QUEUE)
    conn = await asyncpg.connect(pg_url)
    try:
        async with conn.transaction():
            ids = await executor.enqueue_many([("a", n) for n in range(4)], connection=conn)
            assert await conn.fetchval("SELECT count(*) FROM runnerq_activities") == 4
    finally:
        await conn.close()
    snaps = [await pg.get_activity(i) for i in ids]
    assert [(s.activity_type, s.payload, s.status) for s in snaps if s is not None] == [
        ("a", str(n), "pending") for n in range(4)
    ]


@pytest.mark.parametrize("first_ends", ["commit", "rollback"])
async def test_pg_one_idempotency_key_in_two_concurrent_transactions(
    pg: PostgresBackend, pg_url: str, first_ends: str
) -> None:
    """The second transaction waits on the key; it then sees the committed holder, or takes the key."""
    executor = rq.ActivityExecutor(pg, QUEUE)
    c1, c2 = await asyncpg.connect(pg_url), await asyncpg.connect(pg_url)
    try:
        t1, t2 = c1.transaction(), c2.transaction()
        await t1.start()
        await t2.start()
        first = await executor.activity("charge").payload(1).idempotency_key("order-7").execute(connection=c1)
        assert first.created
        second_task = asyncio.ensure_future(
            executor.activity("charge").payload(2).idempotency_key("order-7").execute(connection=c2)
        )
        await asyncio.sleep(0.3)
        assert not second_task.done()  # blocked on the key row the first transaction holds
        await (t1.commit() if first_ends == "commit" else t1.rollback())
        second = await asyncio.wait_for(second_task, 10)
        await t2.commit()
        if first_ends == "commit":
            assert not second.created and second.activity_id == first.activity_id
            assert (await pg.stats(QUEUE)).total == 1
        else:
            assert second.created and second.activity_id != first.activity_id
            assert await pg.get_activity(first.activity_id) is None
            snap = await pg.get_activity(second.activity_id)
            assert snap is not None and snap.payload in ("2", b"2")
            assert (await pg.stats(QUEUE)).total == 1
        # either way the key now names the surviving activity
        third = await executor.activity("charge").idempotency_key("order-7").execute()
        assert not third.created and third.activity_id == (first if first_ends == "commit" else second).activity_id
    finally:
        await c1.close()
        await c2.close()


async def test_pg_repeatable_read_sees_a_key_taken_after_its_snapshot_as_a_serialization_failure(
    pg: PostgresBackend, pg_url: str
) -> None:
    executor = rq.ActivityExecutor(pg, QUEUE)
    c1, c2 = await asyncpg.connect(pg_url), await asyncpg.connect(pg_url)
    try:
        t2 = c2.transaction(isolation="repeatable_read")
        await t2.start()
        await c2.fetchval("SELECT 1")  # the snapshot is taken here
        async with c1.transaction():
            first = await executor.activity("charge").idempotency_key("order-9").execute(connection=c1)
        with pytest.raises(asyncpg.SerializationError):
            await executor.activity("charge").idempotency_key("order-9").execute(connection=c2)
        await t2.rollback()
        assert (await pg.stats(QUEUE)).total == 1 and await pg.get_activity(first.activity_id) is not None
    finally:
        await c1.close()
        await c2.close()


async def test_pg_connection_outside_a_transaction_or_of_another_kind_is_refused(
    pg: PostgresBackend, pg_url: str
) -> None:
    executor = rq.ActivityExecutor(pg, QUEUE)
    conn = await asyncpg.connect(pg_url)
    lite = sqlite3.connect(":memory:")
    try:
        with pytest.raises(ConfigError, match="inside a transaction"):
            await executor.activity("a").execute(connection=conn)
        with pytest.raises(ConfigError, match="asyncpg connection"):
            await executor.enqueue_many([("a", 1)], connection=lite)
        assert (await pg.stats(QUEUE)).total == 0
        async with conn.transaction():
            await pg.close()
            with pytest.raises(BackendError, match="closed"):
                await executor.activity("a").execute(connection=conn)
    finally:
        await conn.close()
        lite.close()


# -------------------------------------------------------------------- SQLite
@pytest.fixture
async def lite(tmp_path: Path) -> AsyncIterator[SqliteBackend]:
    backend = await SqliteBackend.open(f"sqlite:///{tmp_path / 'app.db'}")
    try:
        yield backend
    finally:
        await backend.close()


def _user_conn(backend: SqliteBackend, **kw: Any) -> sqlite3.Connection:
    conn: sqlite3.Connection = sqlite3.connect(backend.path, isolation_level=None, **kw)
    conn.execute("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY)")
    return conn


async def test_sqlite_commit_creates_the_activity_and_wakes_the_engine(lite: SqliteBackend) -> None:
    engine = rq.WorkerEngine(lite, queue_name=QUEUE, max_workers=4, poll_interval=30.0)

    @engine.activity("ship")
    async def ship(payload: dict[str, Any], ctx: rq.ActivityContext) -> str:
        return f"shipped {payload['order']}"

    conn = _user_conn(lite)
    conn.row_factory = lambda cur, row: {"row": row}  # a caller's row factory does not disturb the enqueue
    try:
        async with engine:
            await asyncio.sleep(0.1)
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO orders VALUES (1)")
            future = await engine.executor.activity("ship").payload({"order": 1}).execute(connection=conn)
            await asyncio.sleep(0.2)
            assert await lite.get_activity(future.activity_id) is None
            conn.execute("COMMIT")
            # woken through PRAGMA data_version (no 30 s poll)
            assert await future.result(timeout=5) == "shipped 1"
    finally:
        conn.close()


async def test_sqlite_rollback_leaves_nothing(lite: SqliteBackend) -> None:
    executor = rq.ActivityExecutor(lite, QUEUE)
    conn = _user_conn(lite)
    try:
        conn.execute("BEGIN IMMEDIATE")
        ids = await executor.enqueue_many(
            [("a", 1), executor.activity("b").payload(2).idempotency_key("kb")], connection=conn
        )
        conn.execute("ROLLBACK")
        for activity_id in ids:
            assert await lite.get_activity(activity_id) is None
            assert await lite.get_events(activity_id) == []
        assert (await lite.stats(QUEUE)).total == 0
        assert (await executor.activity("b").idempotency_key("kb").execute()).created
    finally:
        conn.close()


@pytest.mark.parametrize("first_ends", ["commit", "rollback"])
async def test_sqlite_one_idempotency_key_in_two_concurrent_transactions(
    lite: SqliteBackend, first_ends: str
) -> None:
    """SQLite has one writer: the second BEGIN IMMEDIATE waits for the first transaction to end."""
    executor = rq.ActivityExecutor(lite, QUEUE)
    c1 = _user_conn(lite)
    c2 = _user_conn(lite, check_same_thread=False)
    try:
        c1.execute("BEGIN IMMEDIATE")
        first = await executor.activity("charge").payload(1).idempotency_key("order-7").execute(connection=c1)
        begin2 = asyncio.ensure_future(asyncio.to_thread(c2.execute, "BEGIN IMMEDIATE"))
        await asyncio.sleep(0.3)
        assert not begin2.done()
        c1.execute("COMMIT" if first_ends == "commit" else "ROLLBACK")
        await asyncio.wait_for(begin2, 10)
        second = await executor.activity("charge").payload(2).idempotency_key("order-7").execute(connection=c2)
        c2.execute("COMMIT")
        if first_ends == "commit":
            assert not second.created and second.activity_id == first.activity_id
        else:
            assert second.created and await lite.get_activity(first.activity_id) is None
        assert (await lite.stats(QUEUE)).total == 1
    finally:
        c1.close()
        c2.close()


async def test_sqlite_deferred_transaction_with_a_stale_read_fails_instead_of_duplicating(
    lite: SqliteBackend,
) -> None:
    executor = rq.ActivityExecutor(lite, QUEUE)
    c1, c2 = _user_conn(lite), _user_conn(lite)
    try:
        c2.execute("BEGIN")  # deferred
        c2.execute("SELECT count(*) FROM orders").fetchone()  # its read snapshot starts here
        c1.execute("BEGIN IMMEDIATE")
        first = await executor.activity("charge").idempotency_key("order-8").execute(connection=c1)
        c1.execute("COMMIT")
        with pytest.raises(sqlite3.OperationalError):
            await executor.activity("charge").idempotency_key("order-8").execute(connection=c2)
        c2.execute("ROLLBACK")
        stats = await lite.stats(QUEUE)
        assert stats.total == 1
        assert not (await executor.activity("charge").idempotency_key("order-8").execute()).created
        assert await lite.get_activity(first.activity_id) is not None
    finally:
        c1.close()
        c2.close()


async def test_sqlite_connection_checks(lite: SqliteBackend, tmp_path: Path) -> None:
    executor = rq.ActivityExecutor(lite, QUEUE)
    conn = _user_conn(lite)
    other = sqlite3.connect(tmp_path / "other.db", isolation_level=None)
    try:
        with pytest.raises(ConfigError, match="inside a transaction"):
            await executor.activity("a").execute(connection=conn)
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(ConfigError, match="not on this backend's file"):
            await executor.activity("a").execute(connection=other)
        with pytest.raises(ConfigError, match=r"sqlite3\.Connection"):
            await executor.activity("a").execute(connection=object())
        assert (await lite.stats(QUEUE)).total == 0
        conn.execute("BEGIN IMMEDIATE")
        await lite.close()
        with pytest.raises(BackendError, match="is closed"):
            await executor.activity("a").execute(connection=conn)
    finally:
        conn.close()
        other.close()


# ---------------------------------------------------------------- the others
async def test_redis_refuses_a_connection(redis_backend: Any) -> None:
    with pytest.raises(ConfigError, match="redis backend cannot enqueue inside the caller's transaction"):
        await rq.ActivityExecutor(redis_backend, QUEUE).activity("a").execute(connection=object())
    assert (await redis_backend.stats(QUEUE)).total == 0
