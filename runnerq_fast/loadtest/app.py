"""The load app: the engine every worker process of a load test runs.

``runnerq-fast worker runnerq_fast.loadtest.app:make_engine --backend URL --queue Q --processes N``
(the runner starts it so). Handlers with the costs of real work, one per type
of :mod:`runnerq_fast.loadtest.mix`:

* ``notify``: async, returns at once;
* ``io_sleep``: async, sleeps ``payload["ms"]`` milliseconds (bound by waiting, not CPU);
* ``cpu_hash``: a plain ``def`` (the engine runs it in its thread pool) hashing a
  4 KiB blob ``payload["rounds"]`` times with SHA-256 (about 1 ms of CPU);
* ``flaky``: async, raises :class:`~runnerq_fast.RetryableError` on its first
  ``payload["fail"]`` attempts and succeeds after (retried after
  ``retry_delay`` = 0.5 s).

When ``RUNNERQ_LOADTEST_RECORDS`` names a directory, every handler run is
recorded there (:mod:`runnerq_fast.loadtest.records`): the clock read at the
handler's entry and exit, the ready time from the payload, the outcome. The
handler's own clock is the exact and cheap source: sub-millisecond, one
buffered line per run, no extra query; the store's rows keep milliseconds and
would need reading every activity back.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from typing import Any

import runnerq_fast as rq
from runnerq_fast.loadtest.records import LineWriter

__all__ = ["RECORDS_ENV", "make_engine"]

RECORDS_ENV = "RUNNERQ_LOADTEST_RECORDS"
"""Environment variable naming the directory where handler runs are recorded."""


class _Recorder:
    """One ``runs-<pid>.tsv`` per worker process, opened at the first run (not in the supervisor)."""

    def __init__(self, directory: str | None) -> None:
        self._directory = directory
        self._writer: LineWriter | None = None

    def __call__(self, payload: Any, ctx: rq.ActivityContext, start: float, outcome: str) -> None:
        if self._directory is None:
            return
        if self._writer is None:
            self._writer = LineWriter(self._directory, "runs")
        ready = float(payload.get("t", 0.0)) + float(payload.get("d", 0.0))
        self._writer.write(ctx.activity_id, ctx.retry_count + 1, ctx.activity_type, ready, start, time.time(), outcome)


def make_engine() -> rq.WorkerEngine:
    """The load app's engine (queue ``loadtest`` unless ``--queue`` says otherwise, 64 slots).

    The backend comes from the worker's ``--backend``; the records directory
    from :data:`RECORDS_ENV`.
    """
    engine = rq.WorkerEngine(None, queue_name="loadtest", max_workers=64, retry_delay=0.5)
    record = _Recorder(os.environ.get(RECORDS_ENV) or None)

    @engine.activity("notify")
    async def notify(payload: Any, ctx: rq.ActivityContext) -> None:
        record(payload, ctx, time.time(), "ok")

    @engine.activity("io_sleep")
    async def io_sleep(payload: Any, ctx: rq.ActivityContext) -> None:
        start = time.time()
        await asyncio.sleep(int(payload["ms"]) / 1000)
        record(payload, ctx, start, "ok")

    @engine.activity("cpu_hash")
    def cpu_hash(payload: Any, ctx: rq.ActivityContext) -> str:
        start = time.time()
        digest: bytes = payload["blob"].encode()
        for _ in range(int(payload["rounds"])):
            digest = hashlib.sha256(digest).digest() + digest[32:]
        record(payload, ctx, start, "ok")
        return digest[:8].hex()

    @engine.activity("flaky")
    async def flaky(payload: Any, ctx: rq.ActivityContext) -> None:
        start = time.time()
        if ctx.retry_count < int(payload.get("fail", 1)):
            record(payload, ctx, start, "RetryableError")
            raise rq.RetryableError(f"planned failure of attempt {ctx.retry_count + 1}")
        record(payload, ctx, start, "ok")

    return engine
