"""A producer's batch the store cancels is sent again in halves, in order (issue 26, hardening round 2).

A tester enqueued 1,000 activities of 2 KB under ``statement_timeout =
'20ms'``: every batch was cancelled, retried whole for 5 s and failed with
:class:`StoreBusyError`, while the engine's own batches split. Here the
cancellation is made deterministic on the shared server, in this test's own
database (``pg_url`` is a fresh copy of the template): a statement-level
trigger raises SQLSTATE 57014 (``query_canceled``, what ``statement_timeout``
raises) for any INSERT of more than ``LIMIT`` activities, and counts every
statement in a sequence (``nextval`` is not rolled back with the statement).
The real 20 ms timeout on a private server is tests/faults/test_postgres_statement_timeout.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import threading
from pathlib import Path

import asyncpg
import pytest

import runnerq_fast as rq
from runnerq_fast.backends.postgres import PostgresBackend
from runnerq_fast.backends.sqlite import SqliteBackend
from runnerq_fast.errors import StoreBusyError
from runnerq_fast.models import EnqueueOutcome, OnDuplicate
from runnerq_fast.resilience import busy_attempts
from runnerq_fast.web.buffer import EnqueueBuffer

QUEUE = "split"
LIMIT = 100  # most activities one INSERT may write before the trigger cancels it
N = 1000

_CANCEL_BIG_INSERTS = f"""
CREATE SEQUENCE enqueue_statements;
CREATE FUNCTION cancel_big_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM nextval('enqueue_statements');
    IF (SELECT count(*) FROM new_rows) > {LIMIT} THEN
        RAISE EXCEPTION 'canceling statement due to statement timeout' USING ERRCODE = 'query_canceled';
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER cancel_big_insert AFTER INSERT ON runnerq_activities
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION cancel_big_insert();
"""


async def _cancelling_server(url: str) -> None:
    conn = await asyncpg.connect(url, timeout=10)
    try:
        await conn.execute(_CANCEL_BIG_INSERTS)
    finally:
        await conn.close()


async def _stored(url: str) -> list[tuple[str, int]]:
    """(id, payload) of every activity of the queue, in creation order."""
    conn = await asyncpg.connect(url, timeout=10)
    try:
        rows = await conn.fetch("SELECT id, payload FROM runnerq_activities WHERE queue_name = $1 "
                                "ORDER BY created_at, id", QUEUE)
        return [(getattr(r[0], "hex", r[0]), int(r[1])) for r in rows]
    finally:
        await conn.close()


async def _statements(url: str) -> int:
    conn = await asyncpg.connect(url, timeout=10)
    try:
        return int(await conn.fetchval("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM enqueue_statements"))
    finally:
        await conn.close()


@pytest.mark.postgres
async def test_pg_a_batch_the_store_cancels_lands_whole_once_in_order(pg_url: str) -> None:
    """Before: the 1,000-item INSERT was cancelled on every try until StoreBusyError (nothing stored)."""
    await _cancelling_server(pg_url)
    backend = await PostgresBackend.open(pg_url, migrate=False)
    try:
        ex = rq.ActivityExecutor(backend, QUEUE)
        ids = await ex.enqueue_many([("t", i) for i in range(N)])
        assert len(ids) == len(set(ids)) == N
        got = {aid: payload for aid, payload in await _stored(pg_url)}
        assert len(got) == N
        assert [got[aid] for aid in ids] == list(range(N))  # the returned ids follow the input
        # halved until a piece passes the limit, then pieces of that size (and growing back to it)
        assert await _statements(pg_url) < 2 * N // LIMIT + 2 * (N // LIMIT).bit_length()
    finally:
        await backend.close()


@pytest.mark.postgres
async def test_pg_split_batch_keeps_idempotency_and_on_duplicate(pg_url: str) -> None:
    """Keys repeated across the pieces resolve as in one batch: first creates, later ones follow on_duplicate."""
    await _cancelling_server(pg_url)
    backend = await PostgresBackend.open(pg_url, migrate=False)
    try:
        ex = rq.ActivityExecutor(backend, QUEUE)
        held = (await ex.activity("t").payload(-1).idempotency_key("held").execute()).activity_id
        items = []
        for i in range(3 * LIMIT):
            b = ex.activity("t").payload(i)
            if i % 50 == 7:
                b = b.idempotency_key("k")  # the first creates, every later one returns it
            if i == 2 * LIMIT + 1:
                b = b.idempotency_key("held")  # taken before the batch
            if i == 2 * LIMIT + 3:
                b = b.idempotency_key("fresh", OnDuplicate.ALLOW_REUSE)
            items.append(b)
        futures = await ex.enqueue_many_futures(items)
        first_k = futures[7].activity_id
        for i, fut in enumerate(futures):
            if i % 50 == 7:
                assert fut.activity_id == first_k and fut.created == (i == 7)
        assert futures[2 * LIMIT + 1].activity_id == held and not futures[2 * LIMIT + 1].created
        assert futures[2 * LIMIT + 3].created
        stored = dict(await _stored(pg_url))
        created = [f for f in futures if f.created]
        assert len(stored) == len(created) + 1  # + held, each once
        assert all(stored[f.activity_id] == i for i, f in enumerate(futures) if f.created)
    finally:
        await backend.close()


@pytest.mark.postgres
async def test_pg_the_http_buffer_and_the_sync_client_split_too(pg_url: str) -> None:
    """The HTTP enqueue buffer (batches of up to 1,000 coalesced requests) and the sync client."""
    await _cancelling_server(pg_url)
    backend = await PostgresBackend.open(pg_url, migrate=False)
    try:
        ex = rq.ActivityExecutor(backend, QUEUE)
        buffer = EnqueueBuffer(backend, QUEUE, max_batch=N)
        built = ex._build_all([("t", i) for i in range(N)])
        results = await asyncio.gather(*(buffer.submit(item) for item in built))
        assert [r.activity_id for r in results] == [it.id for it in built]
        assert {r.outcome for r in results} == {EnqueueOutcome.CREATED}
        await buffer.close()
        assert buffer.stored == N
    finally:
        await backend.close()

    def threads() -> list[str]:
        with rq.SyncExecutor(pg_url, QUEUE) as client:
            out: list[str] = []
            lock = threading.Lock()

            def one(i: int) -> None:
                aid = client.activity("t").payload(N + i).execute(timeout=30)
                with lock:
                    out.append(aid)

            workers = [threading.Thread(target=one, args=(i,)) for i in range(2 * LIMIT)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            return out + client.enqueue_many([("t", 2 * N + i) for i in range(3 * LIMIT)], timeout=30)

    sync_ids = await asyncio.to_thread(threads)
    stored = dict(await _stored(pg_url))
    assert len(stored) == N + 5 * LIMIT
    assert [stored[aid] for aid in sync_ids[2 * LIMIT:]] == [2 * N + i for i in range(3 * LIMIT)]


@pytest.mark.postgres
async def test_pg_callers_own_transaction_is_neither_split_nor_retried(pg_url: str) -> None:
    """connection=: the cancel aborted the caller's transaction; one statement, the driver's error, nothing stored."""
    await _cancelling_server(pg_url)
    backend = await PostgresBackend.open(pg_url, migrate=False)
    conn = await asyncpg.connect(pg_url, timeout=10)
    try:
        ex = rq.ActivityExecutor(backend, QUEUE)
        with pytest.raises(asyncpg.QueryCanceledError):
            async with conn.transaction():
                try:
                    await ex.enqueue_many([("t", i) for i in range(2 * LIMIT)], connection=conn)
                finally:
                    with pytest.raises(asyncpg.InFailedSQLTransactionError):
                        await conn.execute("SELECT 1")  # aborted: only the caller can start again
        assert await _statements(pg_url) == 1
        assert await _stored(pg_url) == []
    finally:
        await conn.close()
        await backend.close()


@pytest.mark.postgres
async def test_pg_a_caller_asking_for_busy_errors_gets_the_batch_unsplit(pg_url: str) -> None:
    """Inside busy_attempts(n) the caller sizes its batches itself: n tries of the whole batch, then the error."""
    await _cancelling_server(pg_url)
    backend = await PostgresBackend.open(pg_url, migrate=False)
    try:
        with busy_attempts(2), pytest.raises(StoreBusyError):
            await rq.ActivityExecutor(backend, QUEUE).enqueue_many([("t", i) for i in range(2 * LIMIT)])
        assert await _statements(pg_url) == 2
        assert await _stored(pg_url) == []
    finally:
        await backend.close()


async def test_sqlite_a_batch_cancelled_by_a_locked_file_lands_once_in_order(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """SQLite's busy (another writer past busy_timeout) goes through the same path: split, retried, stored once."""
    caplog.set_level(logging.INFO, logger="runnerq_fast")
    path = str(tmp_path / "q.db")
    backend = await SqliteBackend.open(f"sqlite:///{path}", busy_timeout=0.01)
    locker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        locker.execute("BEGIN IMMEDIATE")  # holds the write lock: every write of the backend is cancelled
        release = asyncio.get_running_loop().call_later(0.3, locker.rollback)
        try:
            ids = await rq.ActivityExecutor(backend, QUEUE).enqueue_many([("t", i) for i in range(N)])
        finally:
            release.cancel()
        assert len(set(ids)) == N
        for i in (0, N // 2, N - 1):
            activity = await backend.get_activity(ids[i])
            assert activity is not None and json.loads(activity.payload) == i
        assert (await backend.stats(QUEUE)).pending == N
        assert any("cancelled by the store" in r.getMessage() for r in caplog.records)  # the lock was felt
    finally:
        locker.close()
        await backend.close()


@pytest.mark.postgres
async def test_pg_a_batch_over_one_statement_is_atomic_so_a_cancelled_statement_is_retried_whole(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keyless batch of more than one statement's items ran as several auto-committed statements: the first
    was stored, the second cancelled, and the retry of the whole call then stored the first part again (or
    failed on its ids). Now one transaction: the retry finds nothing stored."""
    from runnerq_fast.backends.postgres import backend as pg_backend

    monkeypatch.setattr(pg_backend, "_MAX_STATEMENT_ITEMS", 60)
    conn = await asyncpg.connect(pg_url, timeout=10)
    try:
        await conn.execute("""
            CREATE SEQUENCE enqueue_statements;
            CREATE FUNCTION cancel_second_insert() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF nextval('enqueue_statements') = 2 THEN
                    RAISE EXCEPTION 'canceling statement due to statement timeout' USING ERRCODE = 'query_canceled';
                END IF;
                RETURN NULL;
            END $$;
            CREATE TRIGGER cancel_second_insert AFTER INSERT ON runnerq_activities
                FOR EACH STATEMENT EXECUTE FUNCTION cancel_second_insert();
        """)
    finally:
        await conn.close()
    backend = await PostgresBackend.open(pg_url, migrate=False)
    try:
        ex = rq.ActivityExecutor(backend, QUEUE)
        ids = await ex.enqueue_many([("t", i) for i in range(90)])
        stored = await _stored(pg_url)
        assert len(stored) == 90 and sorted(a for a, _ in stored) == sorted(ids)
        assert await _statements(pg_url) == 4  # 60 stored, 30 cancelled (both rolled back), then 60 + 30
    finally:
        await backend.close()
