"""Latency of filtered listings, counts, queue summaries and a bulk action on a large queue.

::

    # a private Redis on another port (nothing shared is touched), 1M rows
    redis-server --port 6391 --save '' --appendonly no --daemonize yes
    .venv/bin/python benchmarks/listing.py --backend redis://127.0.0.1:6391/0 -n 1000000
    redis-cli -p 6391 shutdown nosave

Fills a fresh queue with ``n`` activities through the backend itself
(``enqueue`` in batches, then ``claim`` + ``ack``), so every index is the one
the backend keeps in production: 5 activity types, priorities 1-4, metadata
``{"tenant": "t<i % 100>"}``; about 90 % end completed, 3 % failed, 1 % dead
letter, the rest stay pending (1 % of them scheduled an hour ahead). Then
each query runs ``--repeat`` times and its median and maximum wall time are
reported (milliseconds, one client, round trips included), with what it
returned. Last, one bulk action: retry of up to 1,000 failed activities by
filter.

Figures depend on the machine and on whatever else runs on it: compare
queries within one run. With ``--cleanup`` the queue's activities are deleted
afterwards (delete by filter, then the remaining ones cancelled and deleted);
on a private server, shutting it down is simpler.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import click
from rich.console import Console
from rich.table import Table

import runnerq_fast as rq
from runnerq_fast import filters
from runnerq_fast.engine import run_with_uvloop
from runnerq_fast.ids import new_activity_id
from runnerq_fast.models import Ack, AckOutcome, ActivityFilter, NewActivity

F = ActivityFilter
TYPES = ("email", "resize", "invoice", "sync", "report")


async def _fill(backend: rq.Backend, queue: str, n: int, console: Console) -> tuple[int, int]:
    """Enqueue ``n`` activities and finish most of them; returns the creation time span (ms)."""
    t0 = time.perf_counter()
    first = last = 0
    batch = 1000
    for start in range(0, n, batch):
        items = []
        for i in range(start, min(start + batch, n)):
            run_at = int(time.time() * 1000) + 3_600_000 if i % 100 == 99 else 0
            items.append(
                NewActivity(
                    id=new_activity_id(),
                    activity_type=TYPES[i % len(TYPES)],
                    payload=b'{"n": %d}' % i,
                    priority=1 + i % 4,
                    metadata=b'{"tenant": "t%d"}' % (i % 100),
                    run_at_ms=run_at,
                )
            )
        await backend.enqueue(queue, items)
        if start == 0:
            first = int(time.time() * 1000)
    last = int(time.time() * 1000)
    console.print(f"enqueued {n:,} in {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    done = 0
    target = int(n * 0.94)
    while done < target:
        claimed = await backend.claim(queue, "bench", min(1000, target - done), None, 600_000)
        if not claimed:
            break
        acks = []
        for j, c in enumerate(claimed):
            k = (done + j) % 100
            if k < 3:
                acks.append(Ack(c.id, c.claim_token, AckOutcome.FAILED, None, "boom"))
            elif k == 3:
                acks.append(Ack(c.id, c.claim_token, AckOutcome.DEAD_LETTER, None, "gave up"))
            else:
                acks.append(Ack(c.id, c.claim_token, AckOutcome.COMPLETED, b"1"))
        await backend.ack(queue, acks)
        done += len(claimed)
    console.print(f"claimed and acked {done:,} in {time.perf_counter() - t0:.1f} s")
    return first, last


async def _time(call: Callable[[], Awaitable[Any]], repeat: int) -> tuple[float, float, Any]:
    times = []
    out: Any = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = await call()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), max(times), out


def _describe(out: Any) -> str:
    if isinstance(out, rq.ActivityPage):
        return f"{len(out.items)} items, cursor {'yes' if out.next_cursor else 'no'}"
    if isinstance(out, rq.ActivityCount):
        return f"{out.count:,}{'' if out.exact else '+'}"
    if isinstance(out, list):
        return f"{len(out)} queues"
    if isinstance(out, rq.ActionResult):
        return f"{len(out.changed)} changed, {out.skipped} skipped"
    return repr(out)[:40]


async def _bench(url: str, n: int, repeat: int, queue: str | None, cleanup: bool) -> None:
    console = Console()
    backend = await rq.connect(url)
    q = queue or f"listing-{uuid.uuid4().hex[:8]}"
    try:
        first, last = await _fill(backend, q, n, console)
        mid = (first + last) // 2
        deep = None
        for _ in range(100):  # the cursor of page 101, walked before any timing
            deep = (await backend.query_activities(q, F(), limit=50, cursor=deep)).next_cursor

        cases: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            ("list: newest 50", lambda: backend.query_activities(q, F(), limit=50)),
            ("list: page 101 (cursor)", lambda: backend.query_activities(q, F(), limit=50, cursor=deep)),
            ("list: oldest 50", lambda: backend.query_activities(q, F(), limit=50, newest_first=False)),
            ("list: status=failed", lambda: backend.query_activities(q, F(statuses=("failed",)))),
            ("list: status=pending", lambda: backend.query_activities(q, F(statuses=("pending",)))),
            ("list: type=invoice", lambda: backend.query_activities(q, F(activity_types=("invoice",)))),
            (
                "list: type=invoice & status=failed",
                lambda: backend.query_activities(q, F(activity_types=("invoice",), statuses=("failed",))),
            ),
            ("list: priority=4", lambda: backend.query_activities(q, F(priorities=(4,)))),
            ("list: metadata tenant=t7", lambda: backend.query_activities(q, F(metadata=(("tenant", "t7"),)))),
            (
                "list: created in a 1 s window",
                lambda: backend.query_activities(q, F(created_after_ms=mid, created_before_ms=mid + 1000)),
            ),
            ("count: all", lambda: backend.count_activities(q, F())),
            ("count: status=failed", lambda: backend.count_activities(q, F(statuses=("failed",)))),
            (
                "count: type=invoice & status=failed",
                lambda: backend.count_activities(q, F(activity_types=("invoice",), statuses=("failed",))),
            ),
            ("count: metadata tenant=t7", lambda: backend.count_activities(q, F(metadata=(("tenant", "t7"),)))),
            ("list_queues", backend.list_queues),
        ]
        table = Table(title=f"{n:,} activities on {backend.name} (ms, {repeat} runs)")
        for col in ("query", "median ms", "max ms", "returned"):
            table.add_column(col, justify="right" if col != "query" else "left")
        for name, call in cases:
            med, worst, out = await _time(call, repeat)
            table.add_row(name, f"{med:.2f}", f"{worst:.2f}", _describe(out))
        med, worst, out = await _time(lambda: backend.retry_activities(q, F(statuses=("failed",)), limit=1000), 1)
        table.add_row("action: retry 1,000 failed by filter", f"{med:.2f}", f"{worst:.2f}", _describe(out))
        console.print(table)
        if cleanup:
            await backend.cancel_activities(q, F(), limit=filters.MAX_ACTION_LIMIT)
            while (await backend.delete_activities(q, F(), limit=filters.MAX_ACTION_LIMIT)).changed:
                pass
    finally:
        await backend.close()


@click.command()
@click.option("--backend", "url", required=True, help="Backend URL (a private server: the queue stays).")
@click.option("-n", "n", type=click.IntRange(min=1000), default=1_000_000, show_default=True)
@click.option("--repeat", type=click.IntRange(min=1), default=5, show_default=True)
@click.option("--queue", default=None, help="Queue name (default: a fresh listing-<random>).")
@click.option("--cleanup", is_flag=True, help="Cancel and delete the queue's activities afterwards.")
def main(url: str, n: int, repeat: int, queue: str | None, cleanup: bool) -> None:
    """Fill a queue with N activities and time listings, counts and a bulk action on it."""
    run_with_uvloop(_bench(url, n, repeat, queue, cleanup))


if __name__ == "__main__":
    main()
