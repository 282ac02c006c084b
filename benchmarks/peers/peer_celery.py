"""Celery (Redis broker): the shared no-op workload. Runs from a venv of its own (see benchmarks/README.md).

* enqueue: ``Task.apply_async``, one message at a time on one producer
  connection (Celery has no batch enqueue; ``--batch-size`` does not apply);
* drain: ONE ``celery worker`` process, started as a subprocess (a Celery
  worker is a program of its own) with the variant's pool. Each task records
  in the run's Redis database when it started and ended (one pipelined round
  trip per task); the drain is the first task's start to the last task's
  end, so the worker's own start-up (about a second) is not counted. Then the
  worker gets SIGTERM (warm shutdown). Results: Celery's default (no result
  backend configured, so none are stored);
* teardown: the run's keys go with its private Redis database (see compare.py).

Variants: ``default`` is the prefork pool with one child process (Celery's
default pool; its default concurrency is the CPU count, one child keeps it
to one worker process) and the default prefetch multiplier 4; ``best`` is
the ``solo`` pool (tasks run in the worker process itself, no pool IPC) with
a prefetch multiplier of 64, the documented settings for many short tasks.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _harness import PeerConfig, Timings, main, version_of

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {"pool": "prefork", "concurrency": 1, "prefetch_multiplier": 4},
    "best": {"pool": "solo", "concurrency": 1, "prefetch_multiplier": 64},
}

BROKER_ENV = "RQBENCH_CELERY_BROKER"
KEY = "rqbench:celery:"

_client: Any = None


def _noop() -> None:
    """The no-op job: record start, end and count (one pipelined round trip)."""
    global _client
    started = time.time()
    if _client is None:
        _client = app.broker_connection().default_channel.client
    pipe = _client.pipeline(transaction=False)
    pipe.set(KEY + "first", started, nx=True)
    pipe.set(KEY + "last", time.time())
    pipe.incr(KEY + "count")
    pipe.execute()


try:
    from celery import Celery
except ImportError:   # the harness's --help works without Celery installed
    app: Any = None
    noop: Any = None
else:
    app = Celery("rqbench", broker=os.environ.get(BROKER_ENV, "redis://127.0.0.1:1/0"))
    app.conf.worker_hijack_root_logger = False
    noop = app.task(name="noop")(_noop)


def run(config: PeerConfig, settings: dict[str, Any]) -> Timings:
    """The workload (see the module docstring)."""
    if not config.redis_url:
        raise SystemExit("celery needs --redis-url")
    if app is None:
        raise SystemExit("celery is not installed here: pip install -e '.[peers-celery]' in a venv of its own")
    import redis

    app.conf.broker_url = config.redis_url
    client = redis.Redis.from_url(config.redis_url)
    n = config.n
    try:
        t0 = time.perf_counter()
        with app.producer_or_acquire() as producer:
            for _ in range(n):
                noop.apply_async(producer=producer)
        enqueue_seconds = time.perf_counter() - t0

        env = dict(os.environ, **{BROKER_ENV: config.redis_url})
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "peer_celery", "worker", "--pool", settings["pool"],
             "--concurrency", str(settings["concurrency"]), "--prefetch-multiplier",
             str(settings["prefetch_multiplier"]), "--loglevel", "WARNING", "--without-gossip", "--without-mingle",
             "--without-heartbeat"],
            cwd=Path(__file__).resolve().parent, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.perf_counter() + config.timeout
            while int(client.get(KEY + "count") or 0) < n:
                if worker.poll() is not None:
                    raise RuntimeError(f"the celery worker exited: {worker.stderr.read().decode()[-300:]}"
                                       if worker.stderr else "the celery worker exited")
                if time.perf_counter() > deadline:
                    raise TimeoutError(f"{int(client.get(KEY + 'count') or 0)}/{n} ran in {config.timeout} s")
                time.sleep(0.005)
        finally:
            worker.terminate()
            worker.wait(30)
        first, last = float(client.get(KEY + "first") or 0), float(client.get(KEY + "last") or 0)
        ran = int(client.get(KEY + "count") or 0)
        return Timings(enqueue_seconds, last - first,
                       {"ran": ran, "drain_timed": "first task start to last task end (worker start-up excluded)"})
    finally:
        client.close()


if __name__ == "__main__":
    main("Celery", version_of("celery"), VARIANTS, run)
