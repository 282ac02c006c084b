"""EXPLAIN ANALYZE of the listing, counting and summary statements over a large store.

The store: ``n`` activities in one queue, about 98 % of them finished (completed, failed,
dead letter), the rest pending, scheduled, processing and retrying, across ten types and
100 tenants, some with a parent. Each statement runs under ``EXPLAIN (ANALYZE, FORMAT
JSON)`` with the parameters the backend sends, as a custom plan and (for the pages) as the
generic plan asyncpg's prepared statements may switch to; the test asserts that no node
scans ``runnerq_activities`` sequentially, that the scans use the expected index, and that
the rows read (rows returned plus rows removed by a filter, over all loops) stay within a
bound set by the page size or count cap, never by the number of finished rows.

The default run uses 60,000 rows (a few seconds to build); the ``slow`` variant uses
1,000,000 (about 20-40 s to build on the development machine).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest

from runnerq_fast import filters
from runnerq_fast.backends.postgres.backend import Q, _scan_args
from runnerq_fast.models import ActivityFilter

QUEUE = "big"
ALL = list(filters.ALL_STATUSES)

FILL = """
INSERT INTO runnerq_activities (id, queue_name, activity_type, status, priority, retry_count, max_retries, timeout_ms,
    payload, metadata, created_at, ready_at, started_at, finished_at, parent_id)
SELECT md5(i::text)::uuid, $1::text, 't' || (i % 10),
       CASE WHEN i % 1000 < 10 THEN 'failed' WHEN i % 1000 < 15 THEN 'dead_letter' WHEN i % 1000 < 18 THEN 'pending'
            WHEN i % 1000 = 18 THEN 'scheduled' WHEN i % 2000 = 19 THEN 'processing'
            WHEN i % 2000 = 1019 THEN 'retrying' ELSE 'completed' END,
       1 + i % 4, i % 3, 3, 300000, '{"n":' || i || '}', '{"tenant":"t' || (i % 100) || '"}',
       now() - ($2::integer - i) * interval '2 seconds',
       CASE WHEN i % 1000 = 18 THEN now() + interval '1 hour' ELSE now() - ($2::integer - i) * interval '2 seconds' END,
       now() - ($2::integer - i) * interval '2 seconds', now() - ($2::integer - i) * interval '2 seconds',
       CASE WHEN i % 5000 BETWEEN 1 AND 20 AND i > 5000 THEN md5((i - i % 5000)::text)::uuid END
FROM generate_series(1, $2::integer) AS i
"""


def fill_sql() -> str:
    """The statement that writes the large store: ``$1`` queue, ``$2`` rows."""
    return FILL


@pytest.fixture(scope="module", params=[pytest.param(60_000, id="60k"),
                                        pytest.param(1_000_000, id="1M", marks=pytest.mark.slow)])
def big_db(request: pytest.FixtureRequest, pg_template: str) -> Iterator[tuple[str, int]]:
    """A database holding the large store (built once per size)."""
    from tests.pg_fixtures import _drop, _fresh_database, _in_thread, database_url

    n = int(request.param)
    name = _in_thread(_fresh_database(pg_template))

    async def build() -> None:
        conn = await asyncpg.connect(database_url(name))
        try:
            await conn.execute(FILL, QUEUE, n)
            await conn.execute(FILL.replace("md5(i::text)", "md5('o' || i)"), "other", 100)
            await conn.execute("VACUUM ANALYZE runnerq_activities")
        finally:
            await conn.close()

    _in_thread(build())
    try:
        yield database_url(name), n
    finally:
        _in_thread(_drop(name))


@pytest.fixture
async def conn(big_db: tuple[str, int]) -> AsyncIterator[asyncpg.Connection]:
    c = await asyncpg.connect(big_db[0])
    try:
        yield c
    finally:
        await c.close()


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _nodes(child)


def _on_activities(node: dict[str, Any]) -> bool:
    return node.get("Relation Name") == "runnerq_activities" or str(node.get("Index Name", "")).startswith(
        "runnerq_activities"
    )


def _read(plan: dict[str, Any]) -> tuple[int, set[str], list[str], int]:
    """(rows read from runnerq_activities, indexes used, node types scanning it, pages they touched).

    Pages matter as much as rows: an index condition the B-tree checks entry by entry (rather
    than starting the scan at it) filters silently, and only the pages show what it walked.
    """
    rows = pages = 0
    indexes: set[str] = set()
    kinds: list[str] = []
    for node in _nodes(plan["Plan"]):
        if not _on_activities(node) or node.get("Actual Loops") == 0:
            continue  # never executed: e.g. the generic plan's processing branch, behind a one-time filter
        kinds.append(node["Node Type"])
        pages += int(node.get("Shared Hit Blocks", 0)) + int(node.get("Shared Read Blocks", 0))
        loops = int(node.get("Actual Loops", 1))
        rows += int(node.get("Actual Rows", 0)) * loops + int(node.get("Rows Removed by Filter", 0))
        rows += int(node.get("Rows Removed by Index Recheck", 0))
        if "Index Name" in node:
            indexes.add(node["Index Name"])
    return rows, indexes, kinds, pages


async def _explain(conn: asyncpg.Connection, sql: str, args: list[Any]) -> dict[str, Any]:
    rows = await conn.fetch("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, *args)
    plan: dict[str, Any] = json.loads(rows[0][0])[0]
    return plan


async def _explain_generic(conn: asyncpg.Connection, sql: str, args: list[Any]) -> dict[str, Any]:
    """The generic plan (what a prepared statement may settle on), via PREPARE/EXECUTE."""
    def text(v: Any) -> str | None:
        if v is None:
            return None
        if isinstance(v, list):
            return "{" + ",".join(str(x) for x in v) + "}"
        return str(v)

    literals = await conn.fetchval(
        "SELECT string_agg(quote_nullable(x), ', ' ORDER BY o) FROM unnest($1::text[]) WITH ORDINALITY AS t(x, o)",
        [text(a) for a in args],
    )
    await conn.execute("SET plan_cache_mode = force_generic_plan")
    await conn.execute("PREPARE generic_probe AS " + sql)
    try:
        rows = await conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE generic_probe({literals})")
    finally:
        await conn.execute("DEALLOCATE generic_probe")
        await conn.execute("RESET plan_cache_mode")
    plan: dict[str, Any] = json.loads(rows[0][0])[0]
    return plan


def _check(plan: dict[str, Any], index: str, bound: int, also: frozenset[str] = frozenset()) -> int:
    rows, indexes, kinds, pages = _read(plan)
    assert "Seq Scan" not in kinds, kinds
    assert index in indexes, indexes
    assert indexes <= {index, "runnerq_activities_pkey", *also}, indexes
    text = json.dumps(plan["Plan"], indent=1)[:6000]
    assert rows <= bound, f"read {rows} rows (bound {bound}): {text}"
    # a row costs at most a heap page and a share of index pages; a scan that walks a range
    # entry by entry touches its whole length
    assert pages <= 2 * bound + 50, f"touched {pages} pages for at most {bound} rows: {text}"
    return rows


def _page_args(flt: ActivityFilter, limit: int = 50, scan: int | None = None) -> list[Any]:
    scan = scan if scan is not None else (filters.ROW_SCAN_LIMIT if filters.row_filters(flt) else limit + 1)
    return _scan_args(QUEUE, flt, flt.statuses, scan, limit + 1, None)


STATUS_IDX = "runnerq_activities_status_listing_idx"
TYPE_IDX = "runnerq_activities_type_listing_idx"
LEASE_IDX = "runnerq_activities_lease_idx"
PAGE_BOUND = 8 * 51 + 51 + 60  # eight status ranges of one page each, the page's rows by key, slack
# The listing indexes leave out processing rows (migration 0008): a listing that asks for them reads
# the queue's processing rows through the lease index, the activities in flight (1 in 2,000 rows here).
LEASE = frozenset({LEASE_IDX})


def _inflight(flt: ActivityFilter, n: int) -> tuple[frozenset[str], int]:
    """The lease index and the rows in flight, when ``flt`` asks for processing rows; else nothing."""
    if flt.statuses is not None and "processing" not in flt.statuses:
        return frozenset(), 0
    return LEASE, n // 2000 + 1


@pytest.mark.parametrize("generic", [False, True], ids=["custom", "generic"])
async def test_pages_read_one_page_per_index_range(
    conn: asyncpg.Connection, big_db: tuple[str, int], generic: bool
) -> None:
    explain = _explain_generic if generic else _explain
    cases: list[tuple[str, ActivityFilter, list[Any], str, int]] = [
        ("query_status_desc", ActivityFilter(), [], STATUS_IDX, PAGE_BOUND),
        ("query_status_desc", ActivityFilter(statuses=("pending",)), [], STATUS_IDX, 200),
        ("query_status_asc", ActivityFilter(statuses=("completed",)), [], STATUS_IDX, 200),
        ("query_type_desc", ActivityFilter(activity_types=("t3",)), [["t3"]], TYPE_IDX, PAGE_BOUND),
        ("query_type_desc", ActivityFilter(activity_types=("t3",), statuses=("failed",)), [["t3"]], TYPE_IDX, 200),
        # a metadata condition examines at most ROW_SCAN_LIMIT rows, of the filtered statuses only
        ("query_status_desc", ActivityFilter(statuses=("failed",), metadata=(("tenant", "t7"),)), [], STATUS_IDX,
         filters.ROW_SCAN_LIMIT + 200),
    ]
    for name, flt, extra, index, bound in cases:
        plan = await explain(conn, Q[name], [*_page_args(flt), *extra])
        also, inflight = _inflight(flt, big_db[1])
        _check(plan, index, bound + inflight, also)


async def test_a_page_deep_in_the_finished_rows_reads_one_page(
    conn: asyncpg.Connection, big_db: tuple[str, int]
) -> None:
    n = big_db[1]
    mid = await conn.fetchrow(
        "SELECT floor(extract(epoch FROM created_at) * 1000000)::bigint, id FROM runnerq_activities "
        "WHERE queue_name = $1 AND status = 'completed' ORDER BY created_at, id OFFSET $2 LIMIT 1", QUEUE, n // 2)
    assert mid is not None
    mid_us, mid_id = mid
    at = filters.Cursor(mid_us, mid_id.hex, True)
    for name, flt, extra, index in [
        ("query_status_desc", ActivityFilter(statuses=("completed",)), [], STATUS_IDX),
        ("query_status_desc", ActivityFilter(), [], STATUS_IDX),
        ("query_type_desc", ActivityFilter(activity_types=("t1", "t2")), [["t1", "t2"]], TYPE_IDX),
    ]:
        args = [*_scan_args(QUEUE, flt, flt.statuses, 51, 51, at), *extra]
        also, inflight = _inflight(flt, n)
        _check(await _explain(conn, Q[name], args), index, 2 * PAGE_BOUND + inflight, also)
    asc = ActivityFilter(created_after_ms=mid_us // 1000)
    also, inflight = _inflight(asc, n)
    _check(await _explain(conn, Q["query_status_asc"], _page_args(asc)), STATUS_IDX, PAGE_BOUND + inflight, also)


async def test_parent_and_ids_use_their_indexes(conn: asyncpg.Connection) -> None:
    parent = await conn.fetchval("SELECT parent_id FROM runnerq_activities WHERE parent_id IS NOT NULL LIMIT 1")
    flt = ActivityFilter(parent_id=parent.hex)
    _check(await _explain(conn, Q["query_parent_desc"], [*_page_args(flt), parent.hex, None]),
           "runnerq_activities_parent_idx", 100)
    ids = [r[0].hex for r in await conn.fetch("SELECT id FROM runnerq_activities WHERE queue_name = $1 LIMIT 20",
                                               QUEUE)]
    flt = ActivityFilter(ids=tuple(ids))
    _check(await _explain(conn, Q["query_ids_desc"], [*_page_args(flt), ids, None]), "runnerq_activities_pkey", 100)


async def test_counts_stop_at_the_cap(conn: asyncpg.Connection, big_db: tuple[str, int]) -> None:
    # a cap well below the size of the finished ranges (10,000 at 1M rows; 1,000 at 60k rows, where the
    # planner rightly reads a whole range with a bitmap once the cap nears its size)
    cap = min(filters.COUNT_CAP, big_db[1] // 60)
    for name, flt, scan, extra, index in [
        ("count_plain_status", ActivityFilter(statuses=("pending",)), cap + 1, [], STATUS_IDX),
        ("count_plain_status", ActivityFilter(), cap + 1, [], STATUS_IDX),
        ("count_plain_type", ActivityFilter(activity_types=("t4",)), cap + 1, [["t4"]], TYPE_IDX),
        ("count_status", ActivityFilter(statuses=("failed",), metadata=(("tenant", "t3"),)),
         cap + filters.ROW_SCAN_LIMIT + 1, [], STATUS_IDX),
    ]:
        args = [*_scan_args(QUEUE, flt, flt.statuses, scan, cap + 1, None), *extra]
        also, inflight = _inflight(flt, big_db[1])
        _check(await _explain(conn, Q[name], args), index, scan + inflight, also)


async def test_action_pick_and_queue_summary_reads_stay_small(conn: asyncpg.Connection) -> None:
    flt = ActivityFilter(statuses=("failed", "dead_letter", "cancelled"))
    _check(await _explain(conn, Q["pick_status"], _scan_args(QUEUE, flt, flt.statuses, 100, 100, None)),
           STATUS_IDX, 400)
    plan = await _explain(conn, Q["oldest_ready"], [[QUEUE, "other"]])
    _check(plan, "runnerq_activities_dequeue_idx", 200)
    plan = await _explain(conn, Q["queue_names"], [])
    rows, _, kinds, _pages = _read(plan)
    assert kinds == [] and rows == 0, kinds  # the maintained counters name the queues (migration 0008)
    assert [r[0] for r in await conn.fetch(Q["queue_names"])] == sorted([QUEUE, "other"])


@pytest.mark.parametrize("generic", [False, True], ids=["custom", "generic"])
async def test_processing_rows_come_from_the_lease_index(
    conn: asyncpg.Connection, big_db: tuple[str, int], generic: bool
) -> None:
    """Migration 0008: the listing indexes leave processing rows out (a claim writes no entry in them).

    A listing, count or action pick of processing rows reads the queue's rows in flight through
    the lease index, never the finished rows, and pages through them in (created, id) order.
    """
    explain = _explain_generic if generic else _explain
    _, inflight = _inflight(ActivityFilter(), big_db[1])
    processing = ActivityFilter(statuses=("processing",))
    typed = ActivityFilter(statuses=("processing", "failed"), activity_types=("t9",))
    for name, flt, extra, index in [
        ("query_status_desc", processing, [], LEASE_IDX),
        ("query_status_asc", processing, [], LEASE_IDX),
        ("query_type_desc", typed, [["t9"]], TYPE_IDX),
        ("pick_status", processing, [], LEASE_IDX),
        ("pick_type", typed, [["t9"]], TYPE_IDX),
    ]:
        plan = await explain(conn, Q[name], [*_page_args(flt), *extra])
        _check(plan, index, 200 + inflight, LEASE)
        assert LEASE_IDX in _read(plan)[1]
    for name, flt, extra, index in [
        ("count_plain_status", processing, [], LEASE_IDX),
        ("count_plain_type", typed, [["t9"]], TYPE_IDX),
    ]:
        args = [*_scan_args(QUEUE, flt, flt.statuses, 1001, 1001, None), *extra]
        _check(await _explain(conn, Q[name], args), index, 1001 + inflight, LEASE)
    # the page itself: newest first, a cursor goes on after the last row
    expected = [r[0] for r in await conn.fetch(
        "SELECT id FROM runnerq_activities WHERE queue_name = $1 AND status = 'processing' "
        "ORDER BY created_at DESC, id DESC", QUEUE)]
    first = await conn.fetch(Q["query_status_desc"], *_scan_args(QUEUE, processing, ("processing",), 11, 11, None))
    assert [r[3] for r in first] == expected[:11]
    last = first[9]
    at = filters.Cursor(last[21], last[3].hex, True)
    second = await conn.fetch(Q["query_status_desc"], *_scan_args(QUEUE, processing, ("processing",), 11, 11, at))
    assert [r[3] for r in second] == expected[10:21]


def _rows_of(plan: dict[str, Any], relations: set[str]) -> int:
    return sum(int(n.get("Actual Rows", 0)) * int(n.get("Actual Loops", 1)) + int(n.get("Rows Removed by Filter", 0))
               for n in _nodes(plan["Plan"]) if n.get("Relation Name") in relations)


COUNTERS = {"runnerq_counts", "runnerq_count_deltas"}


async def test_stats_and_the_queue_summary_read_counters_never_activity_rows(
    conn: asyncpg.Connection, big_db: tuple[str, int]
) -> None:
    """Issue 15: ``stats`` read every row of every queue (72,623 rows to count one queue's 2,516)."""
    await conn.execute(Q["fold_counts"])  # half the deltas folded, the other half not: both are read
    await conn.execute(FILL.replace("md5(i::text)", f"md5('{uuid.uuid4().hex}' || i)"), QUEUE, 50)
    probes: list[tuple[str, list[Any]]] = [("stats", [QUEUE]), ("counts_by_type", [[QUEUE, "other"]])]
    for name, args in probes:
        plan = await _explain(conn, Q[name], args)
        _rows, _indexes, kinds, _pages = _read(plan)
        assert kinds == [], f"{name} reads runnerq_activities: {kinds}"
        # 10 types x 8 statuses of counters, as many deltas, for both queues: never the number of activities
        assert _rows_of(plan, COUNTERS) <= 4 * 10 * 8, json.dumps(plan["Plan"], indent=1)[:4000]
    counts = {r[0]: r[1] for r in await conn.fetch(Q["stats"], QUEUE)}
    actual = {r[0]: r[1] for r in await conn.fetch(
        "SELECT status, count(*) FROM runnerq_activities WHERE queue_name = $1 GROUP BY status", QUEUE)}
    assert counts == actual and sum(counts.values()) >= big_db[1] + 50


async def test_a_prune_batch_reads_the_rows_it_deletes(conn: asyncpg.Connection, big_db: tuple[str, int]) -> None:
    n = big_db[1]
    half_ms = n * 1000  # rows finished every 2 s: the older half of the store
    for statuses in (["completed"], ["failed", "dead_letter", "cancelled"]):
        plan = await _explain(conn, Q["prune_pick"], [QUEUE, statuses, half_ms, 1000])
        rows, indexes, kinds, _pages = _read(plan)
        assert "Seq Scan" not in kinds and indexes == {"runnerq_activities_finished_idx"}, (kinds, indexes)
        assert rows <= 2 * 1000 + 60, json.dumps(plan["Plan"], indent=1)[:4000]
async def test_ready_work_reads_the_backlog_never_the_finished_rows(conn: asyncpg.Connection) -> None:
    backlog = await conn.fetchval("SELECT count(*) FROM runnerq_activities WHERE queue_name = $1 "
                                  "AND status IN ('pending', 'scheduled', 'retrying')", QUEUE)
    plan = await _explain(conn, Q["ready_by_type"], [QUEUE])
    rows, indexes, kinds, _pages = _read(plan)
    assert "Seq Scan" not in kinds, kinds
    assert indexes and indexes <= {"runnerq_activities_dequeue_idx", STATUS_IDX}, indexes
    assert rows <= backlog + 50, f"read {rows} rows for a backlog of {backlog}"


async def test_the_idle_fetchers_next_due_read_is_one_probe_per_type(conn: asyncpg.Connection) -> None:
    # t8 has scheduled rows, t9 retrying ones, t4 none: each type costs one index probe, whatever the store holds
    _check(await _explain(conn, Q["next_due"], [QUEUE, ["t8", "t9", "t4"]]), "runnerq_activities_due_type_idx", 3)
    _check(await _explain(conn, Q["next_due_any"], [QUEUE]), "runnerq_activities_due_idx", 1)


@pytest.mark.parametrize("generic", [False, True], ids=["custom", "generic"])
async def test_progress_writes_read_their_rows_or_the_rows_in_flight(
    conn: asyncpg.Connection, big_db: tuple[str, int], generic: bool
) -> None:
    """``set_progress`` (issue 27) reads its rows by id (primary key) or the queue's rows in flight (the
    lease index, as the ack and heartbeat statements may), never the store: bounded whatever it holds and
    under a generic plan. Run in a transaction rolled back (EXPLAIN ANALYZE writes)."""
    explain = _explain_generic if generic else _explain
    rows = await conn.fetch("SELECT id, coalesce(claim_token, 'x') FROM runnerq_activities WHERE queue_name = $1 "
                            "AND status = 'processing' LIMIT 50", QUEUE)
    assert rows
    ids, tokens = [r[0].hex for r in rows], [r[1] for r in rows]
    tr = conn.transaction()
    await tr.start()
    try:
        plan = await explain(conn, Q["set_progress"], [ids, tokens, ["0.5"] * len(ids)])
    finally:
        await tr.rollback()
    read, indexes, kinds, _pages = _read(plan)
    assert "Seq Scan" not in kinds and indexes and indexes <= {"runnerq_activities_pkey", LEASE_IDX}, (kinds, indexes)
    _also, inflight = _inflight(ActivityFilter(statuses=("processing",)), big_db[1])
    assert read <= 2 * len(ids) + inflight, json.dumps(plan["Plan"], indent=1)[:4000]
