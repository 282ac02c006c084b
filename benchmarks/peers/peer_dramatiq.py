"""Dramatiq (Redis broker, threads): the shared no-op workload.

* enqueue: ``Actor.send``, one message at a time (Dramatiq has no batch
  enqueue, so ``--batch-size`` does not apply);
* drain: one ``dramatiq.Worker`` in this process (its consumer and worker
  threads), timed from ``start()`` until every message ran and ``stop()``
  returned (messages acknowledged);
* teardown: the run's keys go with its private Redis database (see compare.py).

Variants: ``default`` is Dramatiq's 8 worker threads; ``best`` is 128 (the
documented ``--threads`` setting; prefetch follows it, 2 per thread; 128
drained fastest of 8, 32, 64 and 128).
"""

from __future__ import annotations

import time
from typing import Any

from _harness import Countdown, PeerConfig, Timings, main, version_of

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {"worker_threads": 8},
    "best": {"worker_threads": 128},
}


def run(config: PeerConfig, settings: dict[str, Any]) -> Timings:
    """The workload (see the module docstring)."""
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    if not config.redis_url:
        raise SystemExit("dramatiq needs --redis-url")
    broker = RedisBroker(url=config.redis_url)
    dramatiq.set_broker(broker)
    n = config.n
    countdown = Countdown(n)

    def noop_job() -> None:
        countdown.tick()

    noop = dramatiq.actor(queue_name="bench", broker=broker)(noop_job)

    try:
        t0 = time.perf_counter()
        for _ in range(n):
            noop.send()
        enqueue_seconds = time.perf_counter() - t0

        worker = dramatiq.Worker(broker, worker_threads=int(settings["worker_threads"]))
        t0 = time.perf_counter()
        worker.start()
        countdown.wait_blocking(config.timeout)
        worker.stop()
        drain_seconds = time.perf_counter() - t0
        return Timings(enqueue_seconds, drain_seconds, {"ran": countdown.count})
    finally:
        broker.close()


if __name__ == "__main__":
    main("Dramatiq", version_of("dramatiq"), VARIANTS, run)
