"""SAQ (Redis, asyncio): the shared no-op workload.

* enqueue: ``Queue.enqueue``, one call per job; a batch is ``batch_size``
  calls in flight at once (SAQ has no batch enqueue that does not also wait
  for the results);
* drain: one ``Worker`` in this process, timed from ``start()`` until every
  job ran and ``stop()`` returned (its burst mode needs a positive
  ``dequeue_timeout``, which it would then wait out at the end);
* teardown: the run's keys go with its private Redis database (see compare.py).

Variants: ``default`` is ``concurrency=10`` (SAQ's default); ``best`` runs
50 jobs at once (``concurrency``, SAQ's documented throughput setting; 50
drained fastest of 10, 50, 100 and 500).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from _harness import Countdown, PeerConfig, Timings, main, run_async, version_of

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {"concurrency": 10},
    "best": {"concurrency": 50},
}

COUNTDOWN: Countdown | None = None


async def noop(ctx: Any) -> None:
    """The no-op job."""
    if COUNTDOWN is not None:
        COUNTDOWN.tick()


async def _run(config: PeerConfig, settings: dict[str, Any]) -> Timings:
    global COUNTDOWN
    from saq import Queue, Worker

    if not config.redis_url:
        raise SystemExit("saq needs --redis-url")
    queue = Queue.from_url(config.redis_url, name="bench")
    await queue.connect()
    try:
        n = config.n
        COUNTDOWN = Countdown(n)
        t0 = time.perf_counter()
        done = 0
        while done < n:
            size = min(config.batch_size, n - done)
            await asyncio.gather(*(queue.enqueue("noop") for _ in range(size)))
            done += size
        enqueue_seconds = time.perf_counter() - t0

        worker = Worker(queue, functions=[noop], concurrency=int(settings["concurrency"]))
        t0 = time.perf_counter()
        task = asyncio.create_task(worker.start())
        await COUNTDOWN.wait(config.timeout)
        await worker.stop()
        drain_seconds = time.perf_counter() - t0
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        if COUNTDOWN.count != n:
            raise RuntimeError(f"{COUNTDOWN.count} jobs ran, expected {n}")
        return Timings(enqueue_seconds, drain_seconds, {"ran": COUNTDOWN.count})
    finally:
        await queue.disconnect()


def run(config: PeerConfig, settings: dict[str, Any]) -> Timings:
    """The workload (see the module docstring)."""
    return run_async(_run(config, settings))


if __name__ == "__main__":
    main("SAQ", version_of("saq"), VARIANTS, run)
