"""Fault: PostgreSQL restarted under a running worker.

The worker reconnects and carries on without losing an activity. The test
runs its OWN cluster (``initdb``/``pg_ctl`` on a free port, see
:mod:`tests.faults.servers`; the shared server is never touched). A
:class:`WorkerEngine` runs in this process (so every handler run is counted)
while the test, through its own backend like an API process, enqueues 2000
activities and keeps enqueueing; mid-drain the server is restarted (a fast
shutdown that terminates every session, then start) and, in a second
variant, stopped for longer than the lease, then started. Then:

* every activity whose enqueue returned ends ``completed`` (so does anything
  an enqueue that raised did store) within 60 s, and ran at least once;
* an enqueue that failed raised :class:`BackendError`, nothing else;
* the engine's loops are all still running; each backend logged the outage
  as one warning when it began and one when it ended, asyncpg's pool logged
  no traceback, and the LISTEN connection reconnected;
* duplicates are bounded: at-least-once allows a second run only when the
  first attempt's ack could not land before its lease was reclaimed, and such
  an ack is then rejected, so ``extra runs <= rejected acks``.

Needs ``initdb``/``pg_ctl`` under ``/usr/lib/postgresql/*/bin``; skipped
otherwise. Slow: run with ``python -m pytest -m slow``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest

import runnerq_fast as rq
from runnerq_fast.backends.postgres import PostgresBackend
from runnerq_fast.errors import BackendError
from tests.faults.servers import PrivatePostgres, fresh_database, running_postgres

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180, method="thread")]

QUEUE = "fault"
INITIAL = 2000
INITIAL_BATCH = 200
FEED_BATCH = 10
FEED_PERIOD = 0.02
HANDLER_SLEEP = 0.02
MAX_WORKERS = 16
RESTART_AFTER_RUNS = 400
FEED_AFTER_RESTART = 2.0
DRAIN_TIMEOUT = 60.0



@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    with running_postgres() as server:
        yield server


async def _statuses(url: str, ids: list[str] | None) -> Counter[str]:
    """Status counts of ``ids`` (every activity of the queue if ``None``), on a fresh connection."""
    conn = await asyncpg.connect(url, timeout=5)
    try:
        if ids is None:
            rows = await conn.fetch("SELECT status, count(*) FROM runnerq_activities WHERE queue_name = $1 "
                                    "GROUP BY status", QUEUE)
        else:
            rows = await conn.fetch("SELECT status, count(*) FROM runnerq_activities WHERE id = ANY($1::uuid[]) "
                                    "GROUP BY status", ids)
    finally:
        await conn.close()
    return Counter({r[0]: r[1] for r in rows})


@pytest.mark.parametrize("fault", ["restart", "outage_longer_than_lease"])
async def test_worker_survives_postgres_restart(
    fault: str, private_postgres: PrivatePostgres, caplog: pytest.LogCaptureFixture
) -> None:
    """``restart``: a fast shutdown (every session terminated), then start, down for ~1-3 s.

    ``outage_longer_than_lease``: stop, stay down for twice the 2 s lease,
    start; leases of activities whose acks could not land expire, so the
    reaper may run them again (the at-least-once duplicates the bound allows).
    """
    lease = 10.0 if fault == "restart" else 2.0
    caplog.set_level(logging.INFO)
    pg_url = await fresh_database(private_postgres)
    runs: Counter[str] = Counter()

    engine = rq.WorkerEngine(
        pg_url, queue_name=QUEUE, max_workers=MAX_WORKERS, lease_timeout=lease, reaper_interval=1.0,
        poll_interval=0.5,
    )

    @engine.activity("tick")
    async def tick(payload: Any, ctx: rq.ActivityContext) -> None:
        runs[ctx.activity_id] += 1
        await asyncio.sleep(HANDLER_SLEEP)

    api: PostgresBackend | None = None
    feeder: asyncio.Task[None] | None = None
    try:
        await engine.start()
        api = await PostgresBackend.open(pg_url, migrate=False)
        executor = rq.ActivityExecutor(api, QUEUE)
        accepted: list[str] = []  # ids whose enqueue returned
        enqueue_errors: Counter[str] = Counter()

        async def enqueue(n: int) -> None:
            """Enqueue ``n`` new activities, retrying on connection errors until one attempt returns.

            An attempt that raised may or may not have been stored; only returned ids are tracked.
            """
            delay = 0.02
            while True:
                try:
                    ids = await executor.enqueue_many([("tick", {"n": len(accepted) + k}) for k in range(n)])
                except BackendError as exc:  # the only exception an outage may surface
                    enqueue_errors[type(exc).__name__] += 1
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 0.5)
                    continue
                accepted.extend(ids)
                return

        stop_feeding = asyncio.Event()

        async def feed() -> None:
            while not stop_feeding.is_set():
                await enqueue(FEED_BATCH)
                await asyncio.sleep(FEED_PERIOD)

        for _ in range(INITIAL // INITIAL_BATCH):
            await enqueue(INITIAL_BATCH)
        feeder = asyncio.create_task(feed())

        deadline = time.monotonic() + 30
        while sum(runs.values()) < RESTART_AFTER_RUNS:
            assert time.monotonic() < deadline, f"the worker ran only {sum(runs.values())} activities before the fault"
            await asyncio.sleep(0.01)
        backlog_at_restart = len(accepted) - len(runs)
        assert backlog_at_restart > MAX_WORKERS, "the restart must hit the worker mid-drain"
        runs_before = sum(runs.values())
        accepted_before = len(accepted)

        fault_started = time.monotonic()
        await asyncio.to_thread(private_postgres.stop, "fast")  # the engine keeps running meanwhile
        if fault != "restart":
            await asyncio.sleep(2 * lease)
        await asyncio.to_thread(private_postgres.start)
        restart_seconds = time.monotonic() - fault_started

        await asyncio.sleep(FEED_AFTER_RESTART)
        stop_feeding.set()
        await feeder
        accepted_after_restart = len(accepted) - accepted_before

        # every accepted activity ends completed
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while True:
            by_status = await _statuses(pg_url, accepted)
            if by_status["completed"] == len(accepted):
                break
            assert time.monotonic() < deadline, (
                f"after {DRAIN_TIMEOUT} s {len(accepted) - by_status['completed']} of {len(accepted)} accepted "
                f"activities are not completed: {dict(by_status)}"
            )
            await asyncio.sleep(0.2)
        drained_in = DRAIN_TIMEOUT - (deadline - time.monotonic())

        # nothing lost: every stored activity (also any stored by an enqueue that raised) completed and ran
        everything = await _statuses(pg_url, None)
        assert set(everything) == {"completed"}, f"statuses of the whole queue: {dict(everything)}"
        not_run = [i for i in accepted if runs[i] == 0]
        assert not not_run, f"{len(not_run)} completed activities never ran here: {not_run[:5]}"
        assert sum(runs.values()) > runs_before, "the worker did not carry on after the restart"

        # the engine is still alive: no loop ended on the errors
        assert engine._fetcher is not None and engine._flusher is not None
        loops = [engine._fetcher, engine._flusher, *engine._tasks, *engine._workers]
        dead = [t.get_name() for t in loops if t.done()]
        assert not dead, f"engine tasks ended: {dead}"

        # each backend logged the outage once when it began and once when it ended, asyncpg's pool logged
        # no traceback, and the LISTEN connection came back
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("runnerq_fast")]
        messages = [(r.name, r.getMessage()) for r in warnings]
        engine_errors = [m for name, m in messages if name == "runnerq_fast.engine" and "failed" in m]
        down = [m for name, m in messages if name == "runnerq_fast.resilience" and "is unreachable or failing" in m]
        up = [m for name, m in messages if name == "runnerq_fast.resilience" and "answers again" in m]
        assert 1 <= len(down) <= 2 and len(up) == len(down), (down, up)  # two backends: the engine's, the API's
        assert not [r for r in caplog.records if r.name == "asyncpg.pool"]
        assert not [r for r in caplog.records if r.exc_info is not None and r.name.startswith("asyncpg")]
        backend = engine.backend
        assert isinstance(backend, PostgresBackend) and backend.listener is not None
        assert backend.listener.connects >= 2, "the LISTEN connection did not reconnect"
        assert any("LISTEN connection lost" in m for _, m in messages)

        await engine.stop()
        # at-least-once, bounded: a second run only after a stale (rejected) ack of an earlier attempt, or
        # after the engine found an attempt's lease lost (its handler was stopped, nothing acked)
        extra_runs = sum(c - 1 for c in runs.values() if c > 1)
        rejected = engine.stats["rejected"] + engine.stats["lease_lost"]
        assert extra_runs <= rejected, f"{extra_runs} extra runs but only {rejected} rejected acks or lost leases"

        print(
            f"\npostgres fault {fault}: server down and back in {restart_seconds:.2f} s, backlog at restart "
            f"{backlog_at_restart}; accepted {len(accepted)} ({accepted_after_restart} after the restart), "
            f"stored {sum(everything.values())}, all completed {drained_in:.1f} s after the feed stopped; "
            f"runs {sum(runs.values())}, activities run twice or more {sum(1 for c in runs.values() if c > 1)}, "
            f"extra runs {extra_runs}, rejected acks {rejected}; enqueue errors {dict(enqueue_errors)}; "
            f"listener connects {backend.listener.connects}; engine warnings {len(engine_errors)}:"
        )
        for text, count in sorted(Counter(m.split(" (")[0] for m in engine_errors).items()):
            print(f"  {count:4d} x {text}")
    finally:
        if feeder is not None and not feeder.done():
            feeder.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await feeder
        with contextlib.suppress(RuntimeError):  # running already
            private_postgres.start()
        await engine.stop()
        if api is not None:
            await api.close()
