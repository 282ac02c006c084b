"""Request latency of the operator listings, counts and summaries on a large store, per backend.

Fills one fresh queue with ``-n`` activities (default 1,000,000; about 98 % finished: completed,
failed, dead letter; the rest pending, scheduled, retrying; ten types, 100 tenants in the
metadata, some children), then times each request ``--repeat`` times and prints p50 / p95 in
milliseconds::

    .venv/bin/python benchmarks/listing.py memory:// sqlite:////tmp/rq-listing.db \\
        postgresql://postgres@127.0.0.1:5432/listing redis://127.0.0.1:6379/0 -n 1000000 --output-json listing.json

PostgreSQL and SQLite are filled with one ``INSERT ... SELECT`` (the rows the engine would have
written; no events); memory and Redis through the backend itself (enqueue, claim, ack in batches
of 1,000), so their fill takes a while. The queue (PostgreSQL, SQLite) or key namespace (Redis) is
removed at the end unless ``--keep``. Figures on a shared machine vary: compare backends in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import runnerq_fast as rq
from runnerq_fast.engine import run_with_uvloop
from runnerq_fast.ids import new_activity_id
from runnerq_fast.models import Ack, AckOutcome, ActivityFilter, NewActivity

F = ActivityFilter

# Status of row i (1-based), per 1,000 rows: 10 failed, 5 dead letter, 3 pending, 1 scheduled,
# 1 retrying per 2,000, the rest completed. The same split as tests/integration/test_postgres_explain.py.
PG_FILL = """
INSERT INTO runnerq_activities (id, queue_name, activity_type, status, priority, retry_count, max_retries, timeout_ms,
    payload, metadata, created_at, ready_at, started_at, finished_at, last_error, parent_id)
SELECT md5($1::text || i)::uuid, $1::text, 't' || (i % 10),
       CASE WHEN i % 1000 < 10 THEN 'failed' WHEN i % 1000 < 15 THEN 'dead_letter' WHEN i % 1000 < 18 THEN 'pending'
            WHEN i % 1000 = 18 THEN 'scheduled' WHEN i % 2000 = 1019 THEN 'retrying' ELSE 'completed' END,
       1 + i % 4, i % 3, 3, 300000, '{"n":' || i || '}', '{"tenant":"t' || (i % 100) || '"}',
       now() - ($2::integer - i) * interval '2 milliseconds',
       CASE WHEN i % 1000 = 18 THEN now() + interval '1 hour'
            ELSE now() - ($2::integer - i) * interval '2 milliseconds' END,
       now() - ($2::integer - i) * interval '2 milliseconds', now() - ($2::integer - i) * interval '2 milliseconds',
       CASE WHEN i % 1000 < 15 THEN 'boom' END,
       CASE WHEN i % 5000 BETWEEN 1 AND 20 AND i > 5000 THEN md5($1::text || (i - i % 5000))::uuid END
FROM generate_series(1, $2::integer) AS i
"""

SQLITE_FILL = """
WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?2)
INSERT INTO runnerq_activities (id, queue_name, activity_type, status, priority, retry_count, max_retries, timeout_ms,
    payload, metadata, created_at, ready_at, started_at, finished_at, last_error, parent_id)
SELECT printf('%016x%016x', ?3, i), ?1, 't' || (i % 10),
       CASE WHEN i % 1000 < 10 THEN 'failed' WHEN i % 1000 < 15 THEN 'dead_letter' WHEN i % 1000 < 18 THEN 'pending'
            WHEN i % 1000 = 18 THEN 'scheduled' WHEN i % 2000 = 1019 THEN 'retrying' ELSE 'completed' END,
       1 + i % 4, i % 3, 3, 300000, '{"n":' || i || '}', '{"tenant":"t' || (i % 100) || '"}',
       ?4 - (?2 - i) * 2,
       CASE WHEN i % 1000 = 18 THEN ?4 + 3600000 ELSE ?4 - (?2 - i) * 2 END,
       ?4 - (?2 - i) * 2, ?4 - (?2 - i) * 2,
       CASE WHEN i % 1000 < 15 THEN 'boom' END,
       CASE WHEN i % 5000 BETWEEN 1 AND 20 AND i > 5000 THEN printf('%016x%016x', ?3, i - i % 5000) END
FROM s
"""


def _status_of(i: int) -> str:
    r = i % 1000
    if r < 10:
        return "failed"
    if r < 15:
        return "dead_letter"
    if r < 18:
        return "pending"
    if r == 18:
        return "scheduled"
    if i % 2000 == 1019:
        return "retrying"
    return "completed"


async def _fill_through_backend(backend: rq.Backend, queue: str, n: int, report: Callable[[int], None]) -> None:
    """Enqueue, claim and ack ``n`` activities with the same split of statuses, 1,000 at a time."""
    outcome = {"completed": AckOutcome.COMPLETED, "failed": AckOutcome.FAILED, "dead_letter": AckOutcome.DEAD_LETTER,
               "retrying": AckOutcome.RETRY}
    later: list[NewActivity] = []
    parents: dict[int, str] = {}
    done = 0
    for start in range(1, n + 1, 1000):
        batch: list[NewActivity] = []
        wanted: dict[str, str] = {}
        for i in range(start, min(start + 1000, n + 1)):
            status = _status_of(i)
            aid = new_activity_id()
            if i % 5000 == 0:
                parents[i] = aid
            parent = parents.get(i - i % 5000) if 1 <= i % 5000 <= 20 else None
            item = NewActivity(aid, f"t{i % 10}", b'{"n":%d}' % i, priority=1 + i % 4,
                               metadata=b'{"tenant":"t%d"}' % (i % 100), parent_id=parent,
                               run_at_ms=int(time.time() * 1000) + 3_600_000 if status == "scheduled" else 0)
            if status in ("pending", "scheduled"):
                later.append(item)
            else:
                batch.append(item)
                wanted[aid] = status
        await backend.enqueue(queue, batch)
        while wanted:
            claimed = await backend.claim(queue, "fill", len(wanted), None, 600_000)
            acks = [Ack(c.id, c.claim_token, outcome[wanted[c.id]], b"1" if wanted[c.id] == "completed" else None,
                        None if wanted[c.id] == "completed" else "boom", int(time.time() * 1000) + 3_600_000)
                    for c in claimed if c.id in wanted]
            await backend.ack(queue, acks)
            for c in claimed:
                wanted.pop(c.id, None)
        done += len(batch)
        report(done)
    for start in range(0, len(later), 1000):
        await backend.enqueue(queue, later[start : start + 1000])
    report(n)


async def fill(url: str, backend: rq.Backend, queue: str, n: int) -> float:
    """Fill ``queue`` with ``n`` activities; returns the seconds it took."""
    t0 = time.perf_counter()

    def report(done: int) -> None:
        if done % 100_000 < 1000 or done == n:
            print(f"  filled {done:,} in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)

    scheme = urlsplit(url).scheme
    if scheme.startswith("postgres"):
        pool = backend.pool  # type: ignore[attr-defined]
        await pool.execute(PG_FILL, queue, n)
        await pool.execute("VACUUM ANALYZE runnerq_activities")
    elif scheme == "sqlite":
        stamp = uuid.uuid4().int & (2**62 - 1)
        now = int(time.time() * 1000)

        def insert(conn: Any) -> None:
            conn.execute(SQLITE_FILL, (queue, n, stamp, now))
            conn.execute("ANALYZE")

        await backend._write(insert)  # type: ignore[attr-defined]
    else:
        await _fill_through_backend(backend, queue, n, report)
    return time.perf_counter() - t0


async def _timed(call: Callable[[], Awaitable[Any]], repeat: int) -> tuple[float, float, Any]:
    await call()  # warm up (prepared statements, caches)
    samples: list[float] = []
    last: Any = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        last = await call()
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.95))], last


async def measure(backend: rq.Backend, queue: str, repeat: int) -> dict[str, tuple[float, float, str]]:
    """p50 / p95 (ms) of each request, with a note on what it returned."""
    page1 = await backend.query_activities(queue, F(statuses=("completed",)))
    sample = page1.items[0].id
    mid = (await backend.query_activities(queue, F(), limit=1, newest_first=False)).items[0].created_at_ms
    newest = (await backend.query_activities(queue, F(), limit=1)).items[0].created_at_ms
    middle = (mid + newest) // 2
    parent_id: str | None = None
    cursor: str | None = None
    for _ in range(100):  # one parent, found outside the timing (children are rows 5001-5020 of each 5,000)
        pg = await backend.query_activities(queue, F(activity_types=("t1",)), limit=1000, cursor=cursor,
                                            newest_first=False)
        parent_id = next((s.parent_id for s in pg.items if s.parent_id), None)
        if parent_id or pg.next_cursor is None:
            break
        cursor = pg.next_cursor

    requests: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("page: newest 50, no filter", lambda: backend.query_activities(queue, F())),
        ("page: status=pending", lambda: backend.query_activities(queue, F(statuses=("pending",)))),
        ("page 2: status=completed (cursor)",
         lambda: backend.query_activities(queue, F(statuses=("completed",)), cursor=page1.next_cursor)),
        ("page: created after the middle, oldest first",
         lambda: backend.query_activities(queue, F(created_after_ms=middle), newest_first=False)),
        ("page: type=t3", lambda: backend.query_activities(queue, F(activity_types=("t3",)))),
        ("page: type=t3 status=failed",
         lambda: backend.query_activities(queue, F(activity_types=("t3",), statuses=("failed",)))),
        ("page: status=failed tenant=t7 (metadata)",
         lambda: backend.query_activities(queue, F(statuses=("failed",), metadata=(("tenant", "t7"),)))),
        ("page: children of one parent",
         lambda: backend.query_activities(queue, F(parent_id=parent_id or "0" * 32))),
        ("count: status=pending", lambda: backend.count_activities(queue, F(statuses=("pending",)))),
        ("count: all (cap 10,000)", lambda: backend.count_activities(queue, F())),
        ("count: type=t3 status=failed",
         lambda: backend.count_activities(queue, F(activity_types=("t3",), statuses=("failed",)))),
        ("one activity + its events", lambda: asyncio.gather(backend.get_activity(sample), backend.get_events(sample))),
        ("queue summaries (list_queues; may read every row)", backend.list_queues),
        ("stats (counts by status)", lambda: backend.stats(queue)),
    ]
    out: dict[str, tuple[float, float, str]] = {}
    for name, call in requests:
        p50, p95, last = await _timed(call, repeat)
        if isinstance(last, rq.ActivityPage):
            note = f"{len(last.items)} items{', more' if last.next_cursor else ''}"
        elif isinstance(last, rq.ActivityCount):
            note = f"{last.count}{'' if last.exact else '+'}"
        elif isinstance(last, list):
            note = f"{len(last)} queues"
        else:
            note = ""
        out[name] = (p50, p95, note)
    return out


async def cleanup(url: str, backend: rq.Backend, queue: str, namespace: str | None) -> None:
    scheme = urlsplit(url).scheme
    if scheme.startswith("postgres"):
        pool = backend.pool  # type: ignore[attr-defined]
        await pool.execute("DELETE FROM runnerq_activities WHERE queue_name = $1", queue)
    elif scheme == "sqlite":
        await backend._write(  # type: ignore[attr-defined]
            lambda conn: conn.execute("DELETE FROM runnerq_activities WHERE queue_name = ?", (queue,))
        )
    elif scheme.startswith("redis") and namespace:
        client = backend.client  # type: ignore[attr-defined]
        async for key in client.scan_iter(match=f"{namespace}:*", count=5000):
            await client.unlink(key)


async def one(url: str, n: int, repeat: int, keep: bool) -> dict[str, Any]:
    queue = f"listing-{uuid.uuid4().hex[:8]}"
    namespace = None
    options: dict[str, Any] = {}
    if urlsplit(url).scheme.startswith("redis"):
        namespace = f"rqlist{uuid.uuid4().hex[:8]}"
        options["namespace"] = namespace
    backend = await rq.connect(url, **options)
    try:
        print(f"{backend.name}: filling {n:,} activities into queue {queue!r}", file=sys.stderr, flush=True)
        fill_s = await fill(url, backend, queue, n)
        stats = await backend.stats(queue)
        print(f"  {stats}", file=sys.stderr, flush=True)
        figures = await measure(backend, queue, repeat)
        if not keep:
            await cleanup(url, backend, queue, namespace)
        return {"backend": backend.name, "n": n, "fill_seconds": round(fill_s, 1),
                "counts": msgspec.structs.asdict(stats),
                "requests": {k: {"p50_ms": round(v[0], 3), "p95_ms": round(v[1], 3), "result": v[2]}
                             for k, v in figures.items()}}
    finally:
        await backend.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("urls", nargs="+", metavar="URL")
    parser.add_argument("-n", type=int, default=1_000_000, help="activities in the queue (default 1,000,000)")
    parser.add_argument("--repeat", type=int, default=30, help="timed runs per request (default 30)")
    parser.add_argument("--keep", action="store_true", help="leave the rows (keys) in the store")
    parser.add_argument("--output-json", type=Path, metavar="FILE")
    args = parser.parse_args()

    async def run_all() -> list[dict[str, Any]]:
        return [await one(url, args.n, args.repeat, args.keep) for url in args.urls]

    box: list[list[dict[str, Any]]] = []

    async def holder() -> None:
        box.append(await run_all())

    run_with_uvloop(holder())
    results = box[0]
    names = list(results[0]["requests"])
    width = max(len(x) for x in names)
    header = " | ".join(f"{r['backend']:>22}" for r in results)
    print(f"\n{'request (p50 / p95 ms)':<{width}} | {header}")
    for name in names:
        cells = []
        for r in results:
            fig = r["requests"][name]
            cells.append(f"{fig['p50_ms']:>7.2f} / {fig['p95_ms']:>7.2f} {fig['result'][:5]:>5}")
        print(f"{name:<{width}} | " + " | ".join(cells))
    print(f"{'fill (s)':<{width}} | " + " | ".join(f"{r['fill_seconds']:>22}" for r in results))
    if args.output_json:
        args.output_json.write_text(msgspec.json.encode(results).decode())


if __name__ == "__main__":
    main()
