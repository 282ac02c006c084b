"""Procrastinate (PostgreSQL, psycopg 3): the shared no-op workload.

* setup: ``schema_manager.apply_schema_async()`` in the run's own database;
* enqueue: ``Task.batch_defer_async`` (one ``INSERT`` per batch);
* drain: ``App.run_worker_async(wait=False)`` in this process: one worker that
  returns once it has caught up with the queue (every job finished and
  marked ``succeeded``); LISTEN/NOTIFY on, as by default;
* teardown: the run's tables are dropped (``DROP SCHEMA public CASCADE``).

Variants: ``default`` is the worker's default ``concurrency`` (1); ``best``
runs 16 jobs at once (concurrency is the documented throughput setting for
async tasks; 16 drained fastest of 1, 4, 16 and 64).
"""

from __future__ import annotations

import time
from typing import Any

from _harness import Countdown, PeerConfig, Timings, main, run_async, version_of

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {"concurrency": 1},
    "best": {"concurrency": 16},
}


async def _run(config: PeerConfig, settings: dict[str, Any]) -> Timings:
    import procrastinate

    if not config.pg_dsn:
        raise SystemExit("procrastinate needs --pg-dsn")
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=config.pg_dsn))
    n = config.n
    countdown = Countdown(n)

    async def noop_job() -> None:
        countdown.tick()

    noop = app.task(name="noop", queue="bench")(noop_job)

    async with app.open_async():
        try:
            await app.schema_manager.apply_schema_async()
            t0 = time.perf_counter()
            done = 0
            while done < n:
                size = min(config.batch_size, n - done)
                await noop.batch_defer_async(*({} for _ in range(size)))
                done += size
            enqueue_seconds = time.perf_counter() - t0

            t0 = time.perf_counter()
            await app.run_worker_async(queues=["bench"], wait=False, concurrency=int(settings["concurrency"]),
                                       install_signal_handlers=False)
            drain_seconds = time.perf_counter() - t0
            if countdown.count != n:
                raise RuntimeError(f"{countdown.count} jobs ran, expected {n}")
            async with app.connector.pool.connection() as conn, conn.cursor() as cur:
                await cur.execute("SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'")
                row = await cur.fetchone()
            succeeded = int(row[0]) if row else 0
            if succeeded != n:
                raise RuntimeError(f"{succeeded} jobs succeeded, expected {n}")
            return Timings(enqueue_seconds, drain_seconds, {"ran": countdown.count, "succeeded": succeeded})
        finally:
            async with app.connector.pool.connection() as conn:
                await conn.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")


def run(config: PeerConfig, settings: dict[str, Any]) -> Timings:
    """The workload (see the module docstring)."""
    return run_async(_run(config, settings))


if __name__ == "__main__":
    main("Procrastinate", version_of("procrastinate"), VARIANTS, run)
