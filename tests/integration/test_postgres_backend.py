"""PostgreSQL-specific behaviour of :class:`PostgresBackend`.

The shared semantics are checked by the conformance suite; these tests cover
what only this backend has: the SQL file loader, migrations, the dequeue
index, atomic idempotency across connections, the claim guard on acks,
LISTEN/NOTIFY wakeups (including a dropped listener) and connection errors.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence

import asyncpg
import msgspec
import pytest

from runnerq_fast.backends.postgres import RESULTS_CHANNEL, WORK_CHANNEL, PostgresBackend, apply_migrations
from runnerq_fast.backends.postgres.backend import Q
from runnerq_fast.backends.postgres.rows import ack_params
from runnerq_fast.backends.postgres.sql import load_migrations, load_queries, parse_queries
from runnerq_fast.backends.sqlfiles import UNKNOWN_MIGRATIONS
from runnerq_fast.errors import BackendError, ConfigError
from runnerq_fast.ids import new_activity_id
from runnerq_fast.models import (
    Ack,
    AckOutcome,
    ActivityEvent,
    ActivityFilter,
    EnqueueOutcome,
    EnqueueResult,
    LeaseRef,
    MigrationReport,
    NewActivity,
    OnDuplicate,
)
from tests.pg_fixtures import ADMIN_URL

PAYLOAD = b'{"n": 1}'


def new(
    activity_type: str = "job",
    *,
    priority: int = 2,
    key: str | None = None,
    on_duplicate: int = OnDuplicate.RETURN_EXISTING,
    max_retries: int = 3,
    run_at_ms: int = 0,
    ttl_ms: int = 86_400_000,
) -> NewActivity:
    return NewActivity(
        new_activity_id(),
        activity_type,
        PAYLOAD,
        priority=priority,
        max_retries=max_retries,
        run_at_ms=run_at_ms,
        idempotency_key=key,
        on_duplicate=on_duplicate,
        idempotency_ttl_ms=ttl_ms,
    )


# ------------------------------------------------------------------ SQL files
def test_parser_splits_named_blocks_and_drops_their_comments() -> None:
    text = "-- header\n\n-- name: one\n-- what one does\nSELECT 1;\n\n-- name: two\nSELECT $1::int\n  + 1;\n"
    assert parse_queries(text) == {"one": "SELECT 1;", "two": "SELECT $1::int\n  + 1;"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-- name: a\nSELECT 1;", "no header"),
        ("-- h\nSELECT 1;\n-- name: a\nSELECT 2;", "outside a named block"),
        ("-- h\n-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;", "defined twice"),
        ("-- h\n-- name: a\n-- only a comment\n", "holds no statement"),
    ],
)
def test_parser_rejects_malformed_files(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_queries(text)


def test_shipped_sql_loads() -> None:
    queries = load_queries()
    for name in ("claim", "ack", "enqueue", "extend_leases", "release", "requeue_expired", "cancel"):
        assert name in queries
    assert not any("{" in q and "}" in q and "format" in q for q in queries.values())
    migrations = load_migrations()
    versions = [m.version for m in migrations]
    assert versions == sorted(set(versions)) and versions[0] == 1 and {4, 6, 7} <= set(versions)
    assert migrations[0].name == "initial"


# ----------------------------------------------------------------- migrations
async def test_migrations_are_idempotent(pg_empty_url: str) -> None:
    conn = await asyncpg.connect(pg_empty_url)
    try:
        first = await apply_migrations(conn)
        second = await apply_migrations(conn)
        versions = [r[0] for r in await conn.fetch("SELECT version FROM runnerq_migrations ORDER BY version")]
    finally:
        await conn.close()
    assert first == [m.version for m in load_migrations()]
    assert second == []
    assert versions == first


async def test_concurrent_opens_migrate_once(pg_empty_url: str) -> None:
    backends = await asyncio.gather(*(PostgresBackend.open(pg_empty_url, min_size=1, max_size=2) for _ in range(5)))
    try:
        rows = await backends[0].pool.fetch("SELECT version FROM runnerq_migrations")
        assert [r[0] for r in rows] == [m.version for m in load_migrations()]
        await backends[1].enqueue("q", [new()])
        assert (await backends[2].stats("q")).pending == 1
    finally:
        await asyncio.gather(*(b.close() for b in backends))


async def _pg_state(url: str) -> list[object]:
    """Every table of the database with its rows, its columns and its indexes, to compare before and after."""
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")
        tables = [r[0] for r in rows]
        state: list[object] = [tables]
        for table in tables:  # names from the catalog
            state.append(sorted(repr(tuple(r)) for r in await conn.fetch(f'SELECT * FROM "{table}"')))
        state.append([tuple(r) for r in await conn.fetch(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1")])
        state.append([tuple(r) for r in await conn.fetch(
            "SELECT table_name, column_name, data_type, column_default FROM information_schema.columns "
            "WHERE table_schema = 'public' ORDER BY 1, 2")])
        return state
    finally:
        await conn.close()


async def test_a_database_a_newer_release_migrated_opens_with_one_warning_and_is_left_as_it_is(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Versions this release does not ship are warned about at open, never refused (a rollback must work)."""
    backend = await PostgresBackend.open(pg_url, min_size=1, max_size=2)
    [enqueued] = await backend.enqueue("q", [new()])
    await backend.close()
    future = max(m.version for m in load_migrations()) + 1
    conn = await asyncpg.connect(pg_url)
    try:
        await conn.execute("INSERT INTO runnerq_migrations (version, name) VALUES ($1, 'from_the_future')", future)
    finally:
        await conn.close()
    before = await _pg_state(pg_url)

    def unknown_warnings() -> list[logging.LogRecord]:
        return [r for r in caplog.records if hasattr(r, UNKNOWN_MIGRATIONS)]

    with caplog.at_level(logging.INFO, "runnerq_fast"):
        backend = await PostgresBackend.open(pg_url, min_size=1, max_size=2)
    try:
        [record] = unknown_warnings()
        assert record.levelno == logging.WARNING
        message = record.getMessage()
        assert pg_url.rpartition("/")[2] in message and f"migration {future:04d}," in message, message
        assert f"up to {future - 1:04d}" in message and "newer runnerq-fast" in message, message
        assert "may not read or write it correctly" in message and "upgrade runnerq-fast" in message, message
        assert [r for r in caplog.records if "applied" in r.getMessage()] == []
        # usable all the same
        snapshot = await backend.get_activity(enqueued.activity_id)
        assert snapshot is not None and snapshot.status == "pending"
        assert (await backend.stats("q")).pending == 1
        caplog.clear()
        with caplog.at_level(logging.INFO, "runnerq_fast"):
            report = await backend.migrate()
        assert report == MigrationReport(applied=(), latest=future - 1, unknown=(future,))
        assert len(unknown_warnings()) == 1
    finally:
        await backend.close()
    assert await _pg_state(pg_url) == before  # the warning path changed nothing stored

    conn = await asyncpg.connect(pg_url)
    try:
        caplog.clear()
        with caplog.at_level(logging.INFO, "runnerq_fast"):
            assert await apply_migrations(conn) == []
        [record] = unknown_warnings()
        assert f"{future:04d}" in record.getMessage()
    finally:
        await conn.close()
    assert await _pg_state(pg_url) == before


async def test_migrate_reports_what_it_applied_then_nothing(pg_empty_url: str) -> None:
    versions = tuple(m.version for m in load_migrations())
    backend = await PostgresBackend.open(pg_empty_url, min_size=1, max_size=2, migrate=False)
    try:
        assert await backend.migrate() == MigrationReport(applied=versions, latest=versions[-1])
        assert await backend.migrate() == MigrationReport(latest=versions[-1])
    finally:
        await backend.close()


async def test_close_is_idempotent(pg_url: str) -> None:
    backend = await PostgresBackend.open(pg_url)
    await backend.close()
    await backend.close()


# -------------------------------------------------------------------- planner
async def test_claim_uses_the_dequeue_index(pg_backend: PostgresBackend) -> None:
    # Enough rows in other queues and finished states that a sequential scan loses.
    for queue in ("a", "b", "c", "d"):
        for _ in range(10):
            await pg_backend.enqueue(queue, [new() for _ in range(500)])
    await pg_backend.pool.execute(
        "UPDATE runnerq_activities SET status = 'completed' WHERE queue_name IN ('b', 'c', 'd')"
    )
    await pg_backend.pool.execute("ANALYZE")
    for types in (None, ["job"]):
        rows = await pg_backend.pool.fetch("EXPLAIN " + Q["claim"], "a", types, 500, "t", "w", 1000, False)
        plan = "\n".join(r[0] for r in rows)
        assert "runnerq_activities_dequeue_idx" in plan, plan


# ---------------------------------------------------------------- idempotency
@pytest.mark.parametrize(
    ("behaviour", "created", "others"),
    [
        (OnDuplicate.ALLOW_REUSE, 50, None),
        (OnDuplicate.RETURN_EXISTING, 1, EnqueueOutcome.EXISTING),
        (OnDuplicate.ALLOW_REUSE_ON_FAILURE, 1, EnqueueOutcome.EXISTING),
        (OnDuplicate.NO_REUSE, 1, EnqueueOutcome.REJECTED),
    ],
)
async def test_idempotency_is_atomic_across_connections(
    pg_url: str, behaviour: OnDuplicate, created: int, others: EnqueueOutcome | None
) -> None:
    backend = await PostgresBackend.open(pg_url, migrate=False, min_size=10, max_size=10)
    try:
        results: list[list[EnqueueResult]] = await asyncio.gather(
            *(backend.enqueue("q", [new(key="order-42", on_duplicate=behaviour)]) for _ in range(50))
        )
        flat = [r for (r,) in results]
        made = [r for r in flat if r.outcome == EnqueueOutcome.CREATED]
        assert len(made) == created
        if others is not None:
            assert {r.outcome for r in flat if r.outcome != EnqueueOutcome.CREATED} == {others}
            assert {r.activity_id for r in flat} == {made[0].activity_id}
        stored = await backend.pool.fetchval(
            "SELECT count(*) FROM runnerq_activities WHERE idempotency_key = 'order-42'"
        )
        assert stored == created
    finally:
        await backend.close()


async def test_idempotency_reuse_after_failure_and_expiry(pg_backend: PostgresBackend) -> None:
    b = pg_backend
    beh = OnDuplicate.ALLOW_REUSE_ON_FAILURE
    (first,) = await b.enqueue("q", [new(key="k", on_duplicate=beh)])
    (again,) = await b.enqueue("q", [new(key="k", on_duplicate=beh)])
    assert again == EnqueueResult(first.activity_id, EnqueueOutcome.EXISTING)
    (held,) = await b.claim("q", "w", 1, None, 30_000)
    assert await b.ack("q", [Ack(held.id, held.claim_token, AckOutcome.FAILED, error="boom")]) == []
    (reused,) = await b.enqueue("q", [new(key="k", on_duplicate=beh)])
    assert reused.outcome == EnqueueOutcome.CREATED

    # Scoped by type, and an expired key counts as absent.
    (other_type,) = await b.enqueue("q", [new("other", key="k", on_duplicate=OnDuplicate.NO_REUSE)])
    assert other_type.outcome == EnqueueOutcome.CREATED
    (short,) = await b.enqueue("q", [new("short", key="k", ttl_ms=1)])
    await asyncio.sleep(0.01)
    (after,) = await b.enqueue("q", [new("short", key="k")])
    assert after.outcome == EnqueueOutcome.CREATED and after.activity_id != short.activity_id


async def test_same_key_twice_in_one_batch(pg_backend: PostgresBackend) -> None:
    items = [new(key="k"), new(), new(key="k")]
    res = await pg_backend.enqueue("q", items)
    assert [r.outcome for r in res] == [EnqueueOutcome.CREATED, EnqueueOutcome.CREATED, EnqueueOutcome.EXISTING]
    assert res[2].activity_id == items[0].id
    assert (await pg_backend.stats("q")).pending == 2



async def _holders(b: PostgresBackend, queue: str) -> dict[str, str]:
    """Give queue ``queue`` one key of each kind of holder; their ids by key.

    "f": held by an activity that failed; "p": by a pending one; "x": expired.
    """
    (f,) = await b.enqueue(queue, [new(key="f")])
    (held,) = await b.claim(queue, "w", 1, None, 30_000)
    assert held.id == f.activity_id
    assert await b.ack(queue, [Ack(held.id, held.claim_token, AckOutcome.FAILED, error="boom")]) == []
    (p,) = await b.enqueue(queue, [new(key="p")])
    (x,) = await b.enqueue(queue, [new(key="x", ttl_ms=1)])
    return {"f": f.activity_id, "p": p.activity_id, "x": x.activity_id}


def _keyed_batch() -> list[NewActivity]:
    """Repeated keys, every OnDuplicate, held/expired/free keys, another type, an unkeyed item, interleaved."""
    AR, RE, OF, NO = (
        OnDuplicate.ALLOW_REUSE,
        OnDuplicate.RETURN_EXISTING,
        OnDuplicate.ALLOW_REUSE_ON_FAILURE,
        OnDuplicate.NO_REUSE,
    )
    spec = [
        ("job", "p", RE), ("job", "f", RE), ("job", "n", OF), ("job", "p", AR), ("job", "x", NO),
        ("job", "f", OF), ("job", None, RE), ("job", "n", AR), ("job", "p", RE), ("job2", "p", NO),
        ("job", "f", OF), ("job", "x", NO), ("job", "n", RE), ("job", "p", NO), ("job", "f", NO),
        ("job2", "p", OF), ("job", "q", OF), ("job", "q", OF), ("job", "q", AR), ("job", "q", NO),
    ]  # fmt: skip
    return [new(t, key=k, on_duplicate=d) for t, k, d in spec]


def _shape(items: Sequence[NewActivity], results: Sequence[EnqueueResult], held: dict[str, str]) -> list[str]:
    """Each result as outcome and whose id it names: its own item, an earlier item (by position) or a holder."""
    who = {it.id: f"item{i}" for i, it in enumerate(items)} | {v: f"held:{k}" for k, v in held.items()}
    return [f"{EnqueueOutcome(r.outcome).name} {who.get(r.activity_id, r.activity_id)}" for r in results]


async def test_a_keyed_batch_decides_each_item_as_one_at_a_time_enqueues_would(pg_backend: PostgresBackend) -> None:
    b = pg_backend
    held_batch, held_single = await _holders(b, "batch"), await _holders(b, "single")
    await asyncio.sleep(0.01)  # the "x" keys expire
    items, one_by_one = _keyed_batch(), _keyed_batch()
    batch = await b.enqueue("batch", items)
    singles = [r for it in one_by_one for r in await b.enqueue("single", [it])]
    assert _shape(items, batch, held_batch) == _shape(one_by_one, singles, held_single)
    first = ["EXISTING held:p", "EXISTING held:f", "CREATED item2", "CREATED item3"]
    assert _shape(items, batch, held_batch)[:4] == first
    assert (await b.stats("batch")).total == (await b.stats("single")).total


async def test_a_keyed_batch_in_a_callers_transaction_rolls_back_with_it(pg_url: str) -> None:
    b = await PostgresBackend.open(pg_url, migrate=False)
    try:
        held = await _holders(b, "q")
        await asyncio.sleep(0.01)
        conn = await asyncpg.connect(pg_url)
        try:
            with pytest.raises(asyncpg.DivisionByZeroError):
                async with conn.transaction():
                    inside = await b.enqueue("q", _keyed_batch(), connection=conn)
                    assert any(r.outcome == EnqueueOutcome.CREATED for r in inside)
                    await conn.execute("SELECT 1/0")  # the caller's transaction fails after the enqueue
        finally:
            await conn.close()
        assert (await b.stats("q")).total == 3  # the holders alone
        again = await b.enqueue("q", (items := _keyed_batch()))
        assert _shape(items, again, held)[:2] == ["EXISTING held:p", "EXISTING held:f"]
    finally:
        await b.close()



async def test_a_keyed_item_whose_id_is_written_another_way_is_still_recognised_as_the_holder(
    pg_backend: PostgresBackend,
) -> None:
    dashed, upper = str(uuid.uuid4()), uuid.uuid4().hex.upper()
    items = [
        NewActivity(dashed, "job", PAYLOAD, idempotency_key="a"),
        NewActivity(upper, "job", PAYLOAD, idempotency_key="b"),
        new(key="a"),
    ]
    res = await pg_backend.enqueue("q", items)
    assert [r.outcome for r in res] == [EnqueueOutcome.CREATED, EnqueueOutcome.CREATED, EnqueueOutcome.EXISTING]
    assert res[2].activity_id == uuid.UUID(dashed).hex

async def test_concurrent_keyed_batches_over_shared_keys_create_each_key_once(pg_url: str) -> None:
    backend = await PostgresBackend.open(pg_url, migrate=False, min_size=8, max_size=8)
    try:
        keys = [f"k{i:02d}" for i in range(60)]

        async def batch(seed: int) -> list[tuple[str, EnqueueResult]]:
            mine = sorted(keys, key=lambda k: hash((seed, k)))[:45]  # each batch its own order and subset
            items = [new(key=k, on_duplicate=OnDuplicate.RETURN_EXISTING) for k in mine]
            return list(zip(mine, await backend.enqueue("q", items), strict=True))

        runs = await asyncio.gather(*(batch(seed) for seed in range(8)))
        by_key: dict[str, set[str]] = {}
        created = 0
        for key, res in (pair for run in runs for pair in run):
            by_key.setdefault(key, set()).add(res.activity_id)
            created += res.outcome == EnqueueOutcome.CREATED
        assert all(len(ids) == 1 for ids in by_key.values())
        assert created == len(by_key) == (await backend.stats("q")).total
    finally:
        await backend.close()


async def test_a_keyed_batch_makes_two_key_statements_not_two_per_key(pg_url: str) -> None:
    statements: list[str] = []
    backend = await PostgresBackend.open(pg_url, migrate=False, min_size=1, max_size=1)  # one connection: logged
    try:
        async with backend.pool.acquire() as conn:
            conn.add_query_logger(lambda record: statements.append(record.query))
        held = [new(key=f"k{i}", on_duplicate=OnDuplicate.RETURN_EXISTING) for i in range(0, 100, 2)]
        await backend.enqueue("q", held)
        statements.clear()
        items = [new(key=f"k{i}", on_duplicate=OnDuplicate.ALLOW_REUSE_ON_FAILURE) for i in range(100)]
        results = await backend.enqueue("q", items)
        assert sum(r.outcome == EnqueueOutcome.CREATED for r in results) == 50
        assert sum("runnerq_idempotency" in q for q in statements) == 2  # was one or two per key
    finally:
        await backend.close()

def _varied(i: int, column: str) -> NewActivity:
    """Item ``i`` of a batch where only ``column`` differs between items (the rest are equal)."""
    vary = {column: True}
    return NewActivity(
        new_activity_id(),
        f"type{i}" if vary.get("type") else "job",
        f'{{"n": {i}}}'.encode() if vary.get("payload") else PAYLOAD,
        priority=1 + i % 4 if vary.get("priority") else 2,
        max_retries=i if vary.get("retries") else 3,
        timeout_ms=1_000 + i if vary.get("timeout") else 300_000,
        run_at_ms=(int(time.time() * 1000) + 3_600_000 + i if i % 2 else 0) if vary.get("run_at") else 0,
        metadata=f'{{"i": "{i}"}}'.encode() if vary.get("metadata") else b"{}",
        idempotency_key=(f"k{i}" if i % 2 else None) if vary.get("key") else None,
    )


@pytest.mark.parametrize(
    "column", ["none", "type", "payload", "priority", "retries", "timeout", "run_at", "metadata", "key"]
)
async def test_a_batch_stores_every_items_own_values(pg_backend: PostgresBackend, column: str) -> None:
    # equal columns go to the statement as one-element arrays that every row takes: each row must
    # still get its own item's values whichever columns are equal and which differ
    items = [_varied(i, column) for i in range(5)]
    res = await pg_backend.enqueue("q", items)
    assert [r.outcome for r in res] == [EnqueueOutcome.CREATED] * 5
    for it in items:
        snap = await pg_backend.get_activity(it.id)
        assert snap is not None
        payload = snap.payload if isinstance(snap.payload, bytes) else snap.payload.encode()
        assert (
            snap.activity_type,
            payload,
            snap.priority,
            snap.max_retries,
            snap.timeout_ms,
            snap.metadata,
            snap.idempotency_key,
        ) == (it.activity_type, it.payload, it.priority, it.max_retries, it.timeout_ms,
              msgspec.json.decode(it.metadata), it.idempotency_key)
        assert snap.status == ("scheduled" if it.run_at_ms else "pending")
        if it.run_at_ms:
            assert snap.ready_at_ms == it.run_at_ms
    one = _varied(0, column)
    assert (await pg_backend.enqueue("q", [one]))[0].outcome == EnqueueOutcome.CREATED
    snap = await pg_backend.get_activity(one.id)
    assert snap is not None and (snap.activity_type, snap.priority) == (one.activity_type, one.priority)


# --------------------------------------------------------------- claim / ack
async def test_claim_order_and_ack_round_trip(pg_backend: PostgresBackend) -> None:
    b = pg_backend
    items = [new(priority=p) for p in (1, 2, 4, 3, 2)]
    await b.enqueue("q", items)
    claimed = await b.claim("q", "w", 10, None, 30_000)
    assert [c.id for c in claimed] == [items[i].id for i in (2, 3, 1, 4, 0)]
    assert len({c.claim_token for c in claimed}) == 1
    acks = [Ack(c.id, c.claim_token, AckOutcome.COMPLETED, result=b'{"ok": true}') for c in claimed]
    assert await b.ack("q", acks) == []
    res = await b.get_result(items[0].id)
    assert res is not None and res.status == "completed" and res.data == '{"ok": true}'
    events = await b.get_events(items[0].id)
    assert [e.event_type for e in events] == ["enqueued", "claimed", "completed"]
    assert (await b.stats("q")).completed == 5




async def test_key_text_columns_compare_bytes(pg_backend: PostgresBackend) -> None:
    """Migration 0009: the index key columns are COLLATE "C" (memcmp, not strcoll), idempotency's too."""
    rows = await pg_backend.pool.fetch(
        "SELECT c.relname, a.attname, l.collname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
        " JOIN pg_collation l ON l.oid = a.attcollation"
        " WHERE c.relname IN ('runnerq_activities', 'runnerq_idempotency')"
        " AND a.attname IN ('queue_name', 'activity_type', 'status')")
    assert sorted(tuple(r) for r in rows) == [
        ("runnerq_activities", "activity_type", "C"), ("runnerq_activities", "queue_name", "C"),
        ("runnerq_activities", "status", "C"),
        ("runnerq_idempotency", "activity_type", "C"), ("runnerq_idempotency", "queue_name", "C")]
    # the delete's join of idempotency rows against deleted activities compares one collation
    item = new(key="k")
    await pg_backend.enqueue("q", [item])
    (c,) = await pg_backend.claim("q", "w", 1, None, 30_000)
    await pg_backend.ack("q", [Ack(c.id, c.claim_token, AckOutcome.COMPLETED)])
    deleted = await pg_backend.delete_activities("q", ActivityFilter(ids=(item.id,)))
    assert deleted.changed == [item.id]
    assert await pg_backend.pool.fetchval("SELECT count(*) FROM runnerq_idempotency") == 0


@pytest.mark.parametrize("async_claims", [False, True], ids=["default", "async_claims"])
async def test_claims_commit_asynchronously_only_when_asked(pg_url: str, async_claims: bool) -> None:
    """async_claims=True: a claim's transaction runs with synchronous_commit off; an ack's keeps the server's.

    By default every statement, claims included, commits with the server's setting.
    """
    b = await PostgresBackend.open(pg_url, async_claims=async_claims)
    try:
        items = [new(), new(), new()]
        await b.enqueue("q", items)
        await b.pool.execute("UPDATE runnerq_activities SET suspect = true WHERE id = $1::uuid", items[1].id)
        token = uuid.uuid4().hex
        async with b.pool.acquire() as conn:
            server = await conn.fetchval("SHOW synchronous_commit")
            assert server != "off"
            claim_commit = "off" if async_claims else server
            for statement, limit in [("claim", 1), ("claim_suspect", 1)]:
                async with conn.transaction():
                    assert len(await conn.fetch(Q[statement], "q", None, limit, token, "w", 30_000, async_claims)) == 1
                    assert await conn.fetchval("SHOW synchronous_commit") == claim_commit, statement
                assert await conn.fetchval("SHOW synchronous_commit") == server  # transaction-local
            async with conn.transaction():
                await conn.fetchrow(Q["ack_completed"], "q", [items[0].id], [token], [None])
                assert await conn.fetchval("SHOW synchronous_commit") == server
        (claimed,) = await b.claim("q", "w", 5, None, 30_000)  # through the backend: its option goes with it
        assert claimed.id == items[2].id
        assert await b.ack("q", [Ack(claimed.id, claimed.claim_token, AckOutcome.COMPLETED)]) == []
        assert (await b.stats("q")).completed == 2
    finally:
        await b.close()


EDGE_TIMES = [
    "1969-12-31 23:59:59.999999+00", "1960-06-01 12:00:00.0005+00", "1999-12-31 23:59:59.9995+00",
    "2000-01-01 00:00:00+00", "2000-01-01 00:00:00.000001+00", "2024-02-29 10:11:12.345+00",
    "2024-02-29 10:11:12.345999+00", "0044-03-15 12:00:00.25+00",
]


async def test_claimed_times_are_the_floor_of_their_epoch_milliseconds(pg_backend: PostgresBackend) -> None:
    """The claim's binary times decode to floor(extract(epoch) * 1000), before 1970 and 2000 too."""
    b = pg_backend
    items = [new() for _ in EDGE_TIMES]
    await b.enqueue("q", items)
    for it, created, ready in zip(items, EDGE_TIMES, reversed(EDGE_TIMES), strict=True):
        await b.pool.execute(
            "UPDATE runnerq_activities SET created_at = $2::text::timestamptz, ready_at = $3::text::timestamptz"
            " WHERE id = $1::uuid", it.id, created, ready)
    claimed = await b.claim("q", "w", 100, None, 30_000)
    assert len(claimed) == len(items)
    want = {
        uuid.UUID(str(r[0])).hex: (r[1], r[2])
        for r in await b.pool.fetch(
            "SELECT id, floor(extract(epoch FROM created_at) * 1000)::bigint,"
            " floor(extract(epoch FROM ready_at) * 1000)::bigint FROM runnerq_activities")
    }
    assert {c.id: (c.created_at_ms, c.ready_at_ms) for c in claimed} == want


ROW_STATE = (
    "SELECT status, retry_count, result, last_error, finished_at IS NOT NULL, claim_token, lease_expires_at,"
    " cancel_requested_at, suspect, dead_lettered_at, ready_at = created_at FROM runnerq_activities WHERE id = $1::uuid"
)


async def test_an_all_completed_flush_leaves_what_the_general_ack_leaves(pg_backend: PostgresBackend) -> None:
    """backend.ack takes ack_completed for a batch of plain completions; rows, events and stale checks match ack."""
    b = pg_backend
    items = [new() for _ in range(6)]
    await b.enqueue("q", items)
    claimed = await b.claim("q", "w", 10, None, 30_000)
    by_id = {c.id: c for c in claimed}
    fast, general = [by_id[it.id] for it in items[:3]], [by_id[it.id] for it in items[3:]]
    await b.pool.execute("UPDATE runnerq_activities SET cancel_requested_at = now() WHERE id = ANY($1::uuid[])",
                         [fast[2].id, general[2].id])
    results = [b'{"r": 1}', None, b"[]"]
    stale = Ack(fast[0].id, "not-the-token", AckOutcome.COMPLETED)
    fast_acks = [Ack(c.id, c.claim_token, AckOutcome.COMPLETED, result=r) for c, r in zip(fast, results, strict=True)]
    assert await b.ack("q", [stale, *fast_acks]) == [stale.id]
    gen = [Ack(c.id, c.claim_token, AckOutcome.COMPLETED, result=r) for c, r in zip(general, results, strict=True)]
    ids, tokens, outcomes, texts, errors, retry_at = ack_params(gen)
    row = await b.pool.fetchrow(Q["ack"], "q", ids, tokens, outcomes, texts, errors, retry_at, [None] * len(ids))
    assert row is not None and len(row[0]) == 3
    for f, g in zip(fast, general, strict=True):
        fast_row, general_row = await b.pool.fetchrow(ROW_STATE, f.id), await b.pool.fetchrow(ROW_STATE, g.id)
        assert fast_row is not None and general_row is not None
        assert tuple(fast_row) == tuple(general_row)
        assert [(e.event_type, e.detail) for e in await b.get_events(f.id)] == [
            (e.event_type, e.detail) for e in await b.get_events(g.id)]
    assert (await b.stats("q")).completed == 6
    assert await b.ack("q", fast_acks) == [a.id for a in fast_acks]  # acked already: stale now


async def test_late_ack_after_requeue_expired_is_rejected(pg_backend: PostgresBackend) -> None:
    b = pg_backend
    (item,) = [new()]
    await b.enqueue("q", [item])
    (held,) = await b.claim("q", "w1", 1, None, 1)
    await asyncio.sleep(0.01)
    report = await b.requeue_expired("q", 100)
    assert report.requeued == [item.id] and report.dead_lettered == []
    late = Ack(held.id, held.claim_token, AckOutcome.COMPLETED, result=b"1")
    assert await b.ack("q", [late]) == [item.id]
    assert (await b.extend_leases("q", [LeaseRef(held.id, held.claim_token)], 1000)).lost == [item.id]
    snap = await b.get_activity(item.id)
    assert snap is not None and snap.status == "pending" and snap.retry_count == 0  # an ordinary claim: not counted

    (again,) = await b.claim_suspect("q", "w2", None, 30_000)
    assert await b.ack("q", [late]) == [item.id]  # still the old token
    assert await b.ack("q", [Ack(again.id, again.claim_token, AckOutcome.COMPLETED)]) == []
    assert await b.ack("q", [Ack("not-a-uuid", "x", AckOutcome.COMPLETED)]) == ["not-a-uuid"]


async def test_release_and_retry(pg_backend: PostgresBackend) -> None:
    b = pg_backend
    item = new()
    await b.enqueue("q", [item])
    (held,) = await b.claim("q", "w", 1, None, 30_000)
    assert await b.release("q", [LeaseRef(held.id, held.claim_token)]) == [item.id]
    (held,) = await b.claim("q", "w", 1, None, 30_000)
    assert held.retry_count == 0
    retry_at = int(time.time() * 1000) + 60_000
    assert await b.ack("q", [Ack(held.id, held.claim_token, AckOutcome.RETRY, error="e", retry_at_ms=retry_at)]) == []
    snap = await b.get_activity(item.id)
    assert snap is not None and (snap.status, snap.retry_count, snap.last_error) == ("retrying", 1, "e")
    assert abs(snap.ready_at_ms - retry_at) <= 1
    assert await b.claim("q", "w", 1, None, 30_000) == []
    assert await b.cancel(item.id) is True
    assert await b.cancel(item.id) is False
    res = await b.get_result(item.id)
    assert res is not None and res.status == "cancelled"


# ------------------------------------------------------------------- wakeups
async def _second_backend(url: str) -> PostgresBackend:
    return await PostgresBackend.open(url, migrate=False, min_size=1, max_size=2)


async def test_wait_for_result_is_woken_by_notify(pg_backend: PostgresBackend, pg_url: str) -> None:
    worker = await _second_backend(pg_url)
    try:
        item = new()
        await pg_backend.enqueue("q", [item])
        waiter = asyncio.create_task(pg_backend.wait_for_result(item.id, 10))
        await asyncio.sleep(0.05)
        (held,) = await worker.claim("q", "w", 1, None, 30_000)
        started = time.monotonic()
        await worker.ack("q", [Ack(held.id, held.claim_token, AckOutcome.COMPLETED, result=b"7")])
        res = await waiter
        assert res is not None and res.data == "7"
        assert time.monotonic() - started < 1.0
    finally:
        await worker.close()


async def test_dead_letter_by_reaper_wakes_waiter(pg_backend: PostgresBackend, pg_url: str) -> None:
    worker = await _second_backend(pg_url)
    try:
        item = new(max_retries=0)
        await pg_backend.enqueue("q", [item])
        waiter = asyncio.create_task(pg_backend.wait_for_result(item.id, 10))
        await worker.claim("q", "w", 1, None, 1)
        await asyncio.sleep(0.01)
        assert (await worker.requeue_expired("q", 10)).requeued == [item.id]  # not counted: now a suspect
        await worker.claim_suspect("q", "w", None, 1)
        await asyncio.sleep(0.01)
        report = await worker.requeue_expired("q", 10)  # claimed alone: counted
        assert report.dead_lettered == [item.id]
        res = await waiter
        assert res is not None and res.status == "dead_letter"
        (record,) = await pg_backend.list_dead_letter("q")
        assert record.activity.id == item.id and record.error == "lease expired; retries exhausted"
    finally:
        await worker.close()


async def test_listener_reconnects_after_termination(pg_backend: PostgresBackend, pg_url: str) -> None:
    listener = pg_backend.listener
    assert listener is not None and listener.connects == 1
    worker = await _second_backend(pg_url)
    admin = await asyncpg.connect(ADMIN_URL)
    try:
        # Result produced while the listener is down: the reconnect lookup must find it.
        item = new()
        await pg_backend.enqueue("q", [item])
        waiter = asyncio.create_task(pg_backend.wait_for_result(item.id, 20))
        await asyncio.sleep(0.05)
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", listener.server_pid)
        (held,) = await worker.claim("q", "w", 1, None, 30_000)
        await worker.ack("q", [Ack(held.id, held.claim_token, AckOutcome.COMPLETED)])
        res = await waiter
        assert res is not None and res.status == "completed"
        deadline = time.monotonic() + 10
        while listener.connects < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert listener.connects == 2

        # And the new connection receives notifications.
        item2 = new()
        await pg_backend.enqueue("q", [item2])
        waiter2 = asyncio.create_task(pg_backend.wait_for_result(item2.id, 10))
        await asyncio.sleep(0.05)
        (held2,) = await worker.claim("q", "w", 1, None, 30_000)
        await worker.ack("q", [Ack(held2.id, held2.claim_token, AckOutcome.FAILED, error="x")])
        res2 = await waiter2
        assert res2 is not None and res2.status == "failed" and res2.error == "x"
    finally:
        await admin.close()
        await worker.close()


async def test_wait_for_work_woken_by_other_process(pg_backend: PostgresBackend, pg_url: str) -> None:
    producer = await _second_backend(pg_url)
    try:
        assert await pg_backend.claim("q", "w", 1, None, 1000) == []
        waiting = asyncio.create_task(pg_backend.wait_for_work("q", 10))
        await asyncio.sleep(0.05)
        started = time.monotonic()
        await producer.enqueue("q", [new()])
        await waiting
        assert time.monotonic() - started < 1.0
    finally:
        await producer.close()


async def test_a_delayed_enqueue_by_another_process_times_the_wait_to_its_due_time(
    pg_backend: PostgresBackend, pg_url: str
) -> None:
    producer = await _second_backend(pg_url)
    try:
        assert await pg_backend.claim("q", "w", 1, ["t"], 1000) == []
        waiting = asyncio.create_task(pg_backend.wait_for_work("q", 10, ["t"]))
        await asyncio.sleep(0.05)
        due = time.time() + 0.3
        await producer.enqueue("q", [new("t", run_at_ms=int(due * 1000))])
        await waiting  # woken by the enqueue's notification: claims nothing yet, then waits for the due time
        assert await pg_backend.claim("q", "w", 1, ["t"], 1000) == []
        await asyncio.wait_for(pg_backend.wait_for_work("q", 10, ["t"]), 2.0)
        assert 0 <= time.time() - due < 0.25
        assert len(await pg_backend.claim("q", "w", 1, ["t"], 1000)) == 1
    finally:
        await producer.close()


async def _count_notifications(url: str, channel: str) -> tuple[asyncpg.Connection, list[str]]:
    got: list[str] = []
    conn = await asyncpg.connect(url)
    await conn.add_listener(channel, lambda _c, _p, _ch, payload: got.append(str(payload)))
    return conn, got


async def test_work_notifications_are_rate_limited(pg_url: str) -> None:
    # 100 ms windows: on a loaded machine 1,000 serial enqueues took 5.4 s, and with 20 ms windows
    # every enqueue fell in a window of its own, leaving nothing to coalesce (254 notifications > 250)
    interval = 0.1
    backend = await PostgresBackend.open(pg_url, migrate=False, notify_interval=interval)
    conn, got = await _count_notifications(pg_url, WORK_CHANNEL)
    try:
        started = time.monotonic()
        for _ in range(1000):
            await backend.enqueue("burst", [new()])
        elapsed = time.monotonic() - started
        await asyncio.sleep(interval * 5)
        # At most one per window (plus the leading edge and the trailing one), far fewer than rows.
        assert 1 <= len(got) <= min(elapsed / interval + 2, 1000 // 4), (len(got), elapsed)
        assert set(got) == {"burst"}

        # Leading edge immediately, then one trailing notification for the rest of the window.
        got.clear()
        await asyncio.sleep(interval * 2)
        await asyncio.gather(backend.enqueue("burst", [new()]), backend.enqueue("burst", [new()]))
        await asyncio.sleep(interval * 5)
        assert len(got) == 2
        assert backend.trailing_notifications >= 1
    finally:
        await conn.close()
        await backend.close()


async def test_results_notification_once_per_statement(pg_backend: PostgresBackend, pg_url: str) -> None:
    conn, got = await _count_notifications(pg_url, RESULTS_CHANNEL)
    try:
        await pg_backend.enqueue("q", [new() for _ in range(100)])
        held = await pg_backend.claim("q", "w", 100, None, 30_000)
        await pg_backend.ack("q", [Ack(c.id, c.claim_token, AckOutcome.COMPLETED) for c in held])
        await asyncio.sleep(0.1)
        assert got == ["q"]
    finally:
        await conn.close()


async def test_event_stream_replays_then_follows(pg_backend: PostgresBackend) -> None:
    b = pg_backend
    first = new()
    await b.enqueue("q", [first])
    (ev0,) = await b.get_events(first.id)
    stream = b.event_stream("q", after_id=ev0.id - 1)
    seen: list[ActivityEvent] = []

    async def collect(it: AsyncIterator[ActivityEvent], n: int) -> None:
        async for ev in it:
            seen.append(ev)
            if len(seen) == n:
                return

    task = asyncio.create_task(collect(stream, 3))
    await asyncio.sleep(0.05)
    second = new()
    await b.enqueue("q", [second])
    (held,) = await b.claim("q", "w", 1, ["job"], 30_000)
    await asyncio.wait_for(task, 5)
    await stream.aclose()  # type: ignore[attr-defined]
    assert [(e.activity_id, e.event_type) for e in seen] == [
        (first.id, "enqueued"),
        (second.id, "enqueued"),
        (held.id, "claimed"),
    ]
    assert seen[0].id < seen[1].id < seen[2].id


# ------------------------------------------------------------------ inspection
async def test_inspection_queries(pg_backend: PostgresBackend) -> None:
    b = pg_backend
    future_ms = int(time.time() * 1000) + 3_600_000
    items: Sequence[NewActivity] = [new(), new(run_at_ms=future_ms), new()]
    await b.enqueue("q", items)
    listed = await b.list_activities("q", None)
    assert [s.id for s in listed] == [items[2].id, items[1].id, items[0].id]
    assert [s.id for s in await b.list_activities("q", "scheduled")] == [items[1].id]
    assert [s.id for s in await b.list_activities("q", None, offset=1, limit=1)] == [items[1].id]
    snap = await b.get_activity(items[1].id)
    assert snap is not None and snap.status == "scheduled" and snap.ready_at_ms == future_ms
    assert [e.event_type for e in await b.get_events(items[1].id)] == ["enqueued", "scheduled"]
    stats = await b.stats("q")
    assert (stats.pending, stats.scheduled, stats.total) == (2, 1, 3)
    assert await b.get_activity("nope") is None
    assert await b.get_activity(uuid.uuid4().hex) is None
    assert await b.get_result("nope") is None
    assert await b.wait_for_result(items[0].id, 0.05) is None


# -------------------------------------------------------------------- errors
async def test_unreachable_server_gives_a_clear_error() -> None:
    with pytest.raises(BackendError, match=r"cannot connect to PostgreSQL at postgresql://u:\*\*\*@127\.0\.0\.1:1/"):
        await PostgresBackend.open("postgresql://u:secret@127.0.0.1:1/nothing", connect_timeout=2)


async def test_missing_database_gives_a_clear_error(pg_template: str) -> None:
    with pytest.raises(BackendError, match="does not exist"):
        await PostgresBackend.open(ADMIN_URL.rsplit("/", 1)[0] + "/rq_no_such_database_x")


async def test_malformed_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        await PostgresBackend.open("postgresql://host:notaport/db")
    with pytest.raises(ConfigError):
        await PostgresBackend.open("mysql://host/db")


async def test_autovacuum_check_reports_the_server_setting(
    pg_backend: PostgresBackend, caplog: pytest.LogCaptureFixture
) -> None:
    setting = await pg_backend.pool.fetchval("SELECT current_setting('autovacuum')")
    with caplog.at_level("WARNING", logger="runnerq_fast.backends.postgres"):
        on = await pg_backend.check_autovacuum()
    assert on is (setting == "on")
    assert any("autovacuum is off" in r.getMessage() for r in caplog.records) is (not on)


async def test_event_stream_never_skips_an_event_that_commits_late(pg_backend: PostgresBackend, pg_url: str) -> None:
    """Regression: ids are taken before commit, so a reader following "id > last" skipped
    a batch whose transaction committed after a later-numbered one (seen with 3 writers)."""
    b = pg_backend
    slow = await asyncpg.connect(pg_url)
    try:
        tx = slow.transaction()
        await tx.start()
        late = new()
        # the slow writer takes the lower event id, then waits before committing
        await slow.execute(
            "INSERT INTO runnerq_events (queue_name, event_type, at, activity_ids) VALUES ('q', 'enqueued', now(), $1)",
            [late.id],
        )
        stream = b.event_stream("q")
        seen: list[ActivityEvent] = []

        async def collect() -> None:
            async for ev in stream:
                seen.append(ev)
                if len(seen) == 2:
                    return

        task = asyncio.create_task(collect())
        fast = new()
        await b.enqueue("q", [fast])  # commits first, with a higher event id
        await asyncio.sleep(0.3)
        assert seen == []  # held back while an older transaction is still open
        await tx.commit()
        await asyncio.wait_for(task, 5)
        await stream.aclose()  # type: ignore[attr-defined]
    finally:
        await slow.close()
    assert {e.activity_id for e in seen} == {late.id, fast.id}


def test_enqueue_arrays_send_an_equal_column_as_one_element() -> None:
    from runnerq_fast.backends.postgres.backend import _enqueue_args

    items = [NewActivity(new_activity_id(), "job", PAYLOAD, priority=1 + i % 2) for i in range(3)]
    ids, types, payloads, prios, retries, timeouts, run_at, metas, keys = _enqueue_args(items)
    assert ids == [it.id for it in items]
    assert (types, payloads, prios, retries, metas, keys) == (["job"], ['{"n": 1}'], [1, 2, 1], [3], ["{}"], None)
    assert (timeouts, run_at) == ([300_000], [0])
    keyed = [NewActivity(new_activity_id(), "job", PAYLOAD, idempotency_key=k) for k in ("a", None, "a")]
    assert _enqueue_args(keyed)[8] == ["a", None, "a"]
    assert _enqueue_args(keyed[:1])[1:] == [["job"], ['{"n": 1}'], [2], [3], [300_000], [0], ["{}"], ["a"]]


async def test_a_database_not_migrated_to_0011_is_still_read_without_progress(pg_url: str) -> None:
    # a read-only look (inspect, serve --read-only) opens without migrating: a database an older release
    # wrote, with no progress column yet, still shows its activities
    b = await PostgresBackend.open(pg_url)
    try:
        (res,) = await b.enqueue("q", [new("t")])
        await b.pool.execute("ALTER TABLE runnerq_activities DROP COLUMN progress")
        await b.pool.execute("DELETE FROM runnerq_migrations WHERE version = 11")
    finally:
        await b.close()
    ro = await PostgresBackend.open(pg_url, migrate=False)
    try:
        snap = await ro.get_activity(res.activity_id)
        assert snap is not None and snap.status == "pending" and snap.progress is None
    finally:
        await ro.close()


async def test_a_database_before_0013_keeps_working_then_migrates_to_event_tracebacks(pg_url: str) -> None:
    # a database an older release wrote, with no tracebacks column on its events: a read-only look shows
    # its timeline without tracebacks; opened as usual it migrates and the next failed attempt keeps its own
    b = await PostgresBackend.open(pg_url)
    try:
        (res,) = await b.enqueue("q", [new("t", max_retries=3)])
        (c,) = await b.claim("q", "w", 1, None, 30_000)
        await b.ack("q", [Ack(c.id, c.claim_token, AckOutcome.RETRY, None, "E: 1", 0, "tb 1")])
        await b.pool.execute("ALTER TABLE runnerq_events DROP COLUMN tracebacks")
        await b.pool.execute("DELETE FROM runnerq_migrations WHERE version = 13")
    finally:
        await b.close()
    ro = await PostgresBackend.open(pg_url, migrate=False)
    try:
        events = await ro.get_events(res.activity_id)
        assert [e.event_type for e in events] == ["enqueued", "claimed", "retrying"]
        assert [e.traceback for e in events] == [None, None, None]
    finally:
        await ro.close()
    b = await PostgresBackend.open(pg_url)
    try:
        (c,) = await b.claim("q", "w", 1, None, 30_000)
        await b.ack("q", [Ack(c.id, c.claim_token, AckOutcome.DEAD_LETTER, None, "E: 2", 0, "tb 2")])
        events = await b.get_events(res.activity_id)
        assert [(e.event_type, e.traceback) for e in events if e.event_type in ("retrying", "dead_letter")] == [
            ("retrying", None),
            ("dead_letter", "tb 2"),
        ]
    finally:
        await b.close()


async def test_deleting_an_activity_clears_its_traceback_in_the_shared_event_row(pg_url: str) -> None:
    # an ack's failure events are one batch row per type, tracebacks parallel to activity_ids: a
    # deleted activity's position goes NULL in both, the others keep theirs
    b = await PostgresBackend.open(pg_url)
    try:
        a, z = (r.activity_id for r in await b.enqueue("q", [new("t"), new("t")]))
        claims = {c.id: c for c in await b.claim("q", "w", 2, None, 30_000)}
        await b.ack("q", [Ack(i, claims[i].claim_token, AckOutcome.FAILED, None, "E", 0, f"tb {i}") for i in (a, z)])
        row = await b.pool.fetchrow("SELECT activity_ids, tracebacks FROM runnerq_events WHERE event_type = 'failed'")
        assert row is not None
        assert {i.hex: tb for i, tb in zip(row[0], row[1], strict=True)} == {a: f"tb {a}", z: f"tb {z}"}
        res = await b.delete_activities("q", ActivityFilter(ids=(a,)))
        assert res.changed == [a]
        row = await b.pool.fetchrow("SELECT activity_ids, tracebacks FROM runnerq_events WHERE event_type = 'failed'")
        assert row is not None
        assert sorted(zip(row[0], row[1], strict=True), key=lambda p: p[0] is None) == [
            (uuid.UUID(z), f"tb {z}"),
            (None, None),
        ]
        assert [e.traceback for e in await b.get_events(z) if e.event_type == "failed"] == [f"tb {z}"]
    finally:
        await b.close()
