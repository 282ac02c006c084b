"""arq (Redis, asyncio): the shared no-op workload.

* enqueue: ``ArqRedis.enqueue_job``, one call per job; a batch is
  ``batch_size`` calls in flight at once (arq has no batch enqueue);
* drain: one ``Worker`` in this process with ``burst=True``: ``main()``
  returns once the queue is empty and every job finished (results kept, as by
  default, for ``keep_result`` = 3600 s);
* teardown: the run's keys go with its private Redis database (compare.py
  gives each run a database of its own and flushes only that one, on a
  server it started itself).

Variants: ``default`` is arq's defaults (``max_jobs=10``, ``poll_delay=0.5`` s);
``best`` runs 500 jobs at once and polls every 50 ms (its two documented
throughput settings; in a scan of max_jobs 10-1,000 and poll_delay 0.01-0.5 s
this pair drained fastest).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from _harness import Countdown, PeerConfig, Timings, main, run_async, version_of

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {"max_jobs": 10, "poll_delay": 0.5},
    "best": {"max_jobs": 500, "poll_delay": 0.05},
}

COUNTDOWN: Countdown | None = None


async def noop(ctx: dict[str, Any]) -> None:
    """The no-op job."""
    if COUNTDOWN is not None:
        COUNTDOWN.tick()


async def _run(config: PeerConfig, settings: dict[str, Any]) -> Timings:
    global COUNTDOWN
    from arq import create_pool
    from arq.connections import RedisSettings
    from arq.worker import Worker

    if not config.redis_url:
        raise SystemExit("arq needs --redis-url")
    redis_settings = RedisSettings.from_dsn(config.redis_url)
    pool = await create_pool(redis_settings)
    try:
        n = config.n
        COUNTDOWN = Countdown(n)
        t0 = time.perf_counter()
        done = 0
        while done < n:
            size = min(config.batch_size, n - done)
            await asyncio.gather(*(pool.enqueue_job("noop") for _ in range(size)))
            done += size
        enqueue_seconds = time.perf_counter() - t0

        worker = Worker(functions=[noop], redis_settings=redis_settings, burst=True, handle_signals=False,
                        max_jobs=int(settings["max_jobs"]), poll_delay=float(settings["poll_delay"]))
        t0 = time.perf_counter()
        await worker.main()
        drain_seconds = time.perf_counter() - t0
        await worker.close()
        if COUNTDOWN.count != n or worker.jobs_complete != n:
            raise RuntimeError(f"{COUNTDOWN.count} jobs ran ({worker.jobs_complete} complete), expected {n}")
        return Timings(enqueue_seconds, drain_seconds, {"ran": COUNTDOWN.count, "jobs_complete": worker.jobs_complete})
    finally:
        await pool.aclose()


def run(config: PeerConfig, settings: dict[str, Any]) -> Timings:
    """The workload (see the module docstring)."""
    return run_async(_run(config, settings))


if __name__ == "__main__":
    main("arq", version_of("arq"), VARIANTS, run)
