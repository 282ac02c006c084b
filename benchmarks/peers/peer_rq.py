"""RQ (Redis, synchronous): the shared no-op workload.

* enqueue: ``Queue.enqueue_many`` of ``batch_size`` prepared jobs in one
  pipeline per batch;
* drain: one worker in this process, ``work(burst=True)`` (returns once the
  queue is empty);
* teardown: the run's keys go with its private Redis database (see compare.py).

Variants: ``default`` is RQ's ``Worker``, which forks a work horse per job;
``best`` is ``SimpleWorker``, which runs jobs in the worker process (RQ's
documented choice when fork-per-job isolation is not needed).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from _harness import PeerConfig, Timings, main, version_of

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {"worker_class": "Worker"},
    "best": {"worker_class": "SimpleWorker"},
}


def noop() -> None:
    """The no-op job."""


def run(config: PeerConfig, settings: dict[str, Any]) -> Timings:
    """The workload (see the module docstring)."""
    import rq
    from redis import Redis
    from rq.registry import FinishedJobRegistry

    if not config.redis_url:
        raise SystemExit("rq needs --redis-url")
    logging.getLogger("rq.worker").setLevel(logging.WARNING)
    conn = Redis.from_url(config.redis_url)
    try:
        queue = rq.Queue("bench", connection=conn)
        n = config.n
        t0 = time.perf_counter()
        done = 0
        while done < n:
            size = min(config.batch_size, n - done)
            with conn.pipeline() as pipe:
                queue.enqueue_many([rq.Queue.prepare_data(noop) for _ in range(size)], pipeline=pipe)
                pipe.execute()
            done += size
        enqueue_seconds = time.perf_counter() - t0

        worker_class = getattr(rq, settings["worker_class"])
        worker = worker_class([queue], connection=conn)
        t0 = time.perf_counter()
        worker.work(burst=True, logging_level="WARNING")
        drain_seconds = time.perf_counter() - t0
        finished = FinishedJobRegistry(queue=queue).count
        if finished != n:
            raise RuntimeError(f"{finished} jobs finished, expected {n}")
        return Timings(enqueue_seconds, drain_seconds, {"finished": finished})
    finally:
        conn.close()


if __name__ == "__main__":
    main("RQ", version_of("rq"), VARIANTS, run)
