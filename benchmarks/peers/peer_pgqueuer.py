"""PgQueuer (PostgreSQL, asyncpg): the shared no-op workload.

* setup: ``Queries.install()`` creates PgQueuer's tables in the run's own
  database, at its default durability (``durable``: every table logged);
* enqueue: ``Queries.enqueue`` with lists (one ``INSERT`` per batch);
* drain: one ``QueueManager`` in this process, ``run(mode=drain)`` (it returns
  once the queue is empty and every job finished, its status log flushed);
* teardown: ``Queries.uninstall()``.

Variants: ``default`` is ``QueueManager.run``'s default ``batch_size`` (10);
``best`` raises it to 200 (the documented throughput setting: jobs fetched
per dequeue and status-log buffer size; 100 to 1,000 drained within noise of
each other, 10 at a third of that).
"""

from __future__ import annotations

import time
from typing import Any

import asyncpg
from _harness import Countdown, PeerConfig, Timings, main, run_async, version_of

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {"batch_size": 10},
    "best": {"batch_size": 200},
}


async def _run(config: PeerConfig, settings: dict[str, Any]) -> Timings:
    from pgqueuer.adapters.drivers.asyncpg import AsyncpgDriver
    from pgqueuer.core.qm import QueueManager
    from pgqueuer.domain.types import QueueExecutionMode
    from pgqueuer.models import Job
    from pgqueuer.queries import Queries

    if not config.pg_dsn:
        raise SystemExit("pgqueuer needs --pg-dsn")
    enqueue_conn = await asyncpg.connect(config.pg_dsn)
    worker_conn = await asyncpg.connect(config.pg_dsn)
    queries = Queries(AsyncpgDriver(enqueue_conn))
    try:
        await queries.install()
        n = config.n
        countdown = Countdown(n)

        t0 = time.perf_counter()
        done = 0
        while done < n:
            size = min(config.batch_size, n - done)
            await queries.enqueue(["noop"] * size, [None] * size, [0] * size)
            done += size
        enqueue_seconds = time.perf_counter() - t0

        qm = QueueManager(Queries(AsyncpgDriver(worker_conn)))

        async def noop(job: Job) -> None:
            countdown.tick()

        qm.entrypoint("noop")(noop)

        t0 = time.perf_counter()
        await qm.run(batch_size=int(settings["batch_size"]), mode=QueueExecutionMode.drain)
        drain_seconds = time.perf_counter() - t0
        if countdown.count != n:
            raise RuntimeError(f"{countdown.count} jobs ran, expected {n}")
        left = await enqueue_conn.fetchval("SELECT count(*) FROM pgqueuer")
        if left:
            raise RuntimeError(f"{left} jobs still in the queue table after the drain")
        return Timings(enqueue_seconds, drain_seconds, {"ran": countdown.count, "left_in_queue": left,
                                                        "durability": "durable (default)"})
    finally:
        try:
            await queries.uninstall()
        finally:
            await enqueue_conn.close()
            await worker_conn.close()


def run(config: PeerConfig, settings: dict[str, Any]) -> Timings:
    """The workload (see the module docstring)."""
    return run_async(_run(config, settings))


if __name__ == "__main__":
    main("PgQueuer", version_of("pgqueuer"), VARIANTS, run)
