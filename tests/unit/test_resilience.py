"""The guarded backend call (runnerq_fast.resilience) and each backend's driver-exception classifier.

A memory backend whose methods fail on demand stands in for a store: what
is retried, what is not, within which time, what reaches the caller and
what is logged. The classifiers are checked against real driver exception
instances; the fault tests (tests/faults/test_store_outage.py) stop real servers.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Sequence
from typing import Any

import asyncpg
import pytest
import redis.exceptions as rx

import runnerq_fast as rq
from runnerq_fast.backends.memory import MemoryBackend
from runnerq_fast.backends.postgres import faults as pg_faults
from runnerq_fast.backends.redis import faults as redis_faults
from runnerq_fast.backends.sqlite import faults as sqlite_faults
from runnerq_fast.errors import BackendError, InvalidActivityError, StoreBusyError
from runnerq_fast.models import (
    Ack,
    AckOutcome,
    ActivityResult,
    ClaimedActivity,
    EnqueueResult,
    NewActivity,
    QueueStats,
)
from runnerq_fast.resilience import RETRY_SAFE, Fault, busy_attempts


class DriverError(Exception):
    """What a driver raises; the flaky backend classifies it by its ``fault``."""

    def __init__(self, fault: Fault) -> None:
        super().__init__(f"driver says {fault.value}")
        self.fault = fault


class FlakyBackend(MemoryBackend):
    """A memory backend whose next calls raise :class:`DriverError` (``plan[name]`` of them, of ``fault``)."""

    def __init__(self) -> None:
        super().__init__()
        self.plan: dict[str, tuple[int, Fault]] = {}
        self.calls: dict[str, int] = {}

    def _store_fault(self, exc: Exception) -> Fault | None:
        return exc.fault if isinstance(exc, DriverError) else None

    def _maybe_fail(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        left, fault = self.plan.get(name, (0, Fault.UNSENT))
        if left:
            self.plan[name] = (left - 1, fault)
            raise DriverError(fault)

    async def enqueue(
        self, queue: str, items: Sequence[NewActivity], *, connection: object | None = None
    ) -> list[EnqueueResult]:
        self._maybe_fail("enqueue")
        return await super().enqueue(queue, items, connection=connection)

    async def claim(
        self, queue: str, worker_id: str, limit: int, activity_types: Sequence[str] | None, lease_ms: int
    ) -> list[ClaimedActivity]:
        self._maybe_fail("claim")
        return await super().claim(queue, worker_id, limit, activity_types, lease_ms)

    async def stats(self, queue: str) -> QueueStats:
        self._maybe_fail("stats")
        return await super().stats(queue)

    async def get_result(self, activity_id: str) -> ActivityResult | None:
        self._maybe_fail("get_result")
        return await super().get_result(activity_id)

    async def wait_for_result(self, activity_id: str, timeout: float | None) -> ActivityResult | None:
        res = await self.get_result(activity_id)  # a guarded call inside a guarded call
        if res is not None:
            return res
        return await super().wait_for_result(activity_id, timeout)


@pytest.fixture
async def flaky() -> Any:
    backend = FlakyBackend()
    backend.retry_timeout = 0.5
    yield backend
    await backend.close()


async def test_unsent_faults_are_retried_for_every_call(flaky: FlakyBackend) -> None:
    flaky.plan["enqueue"] = (3, Fault.UNSENT)
    ids = await rq.ActivityExecutor(flaky, "q").enqueue_many([("t", 1)])
    assert flaky.calls["enqueue"] == 4
    assert (await flaky.stats("q")).pending == 1 == len(ids)


async def test_an_enqueue_that_may_have_been_applied_is_not_retried(flaky: FlakyBackend) -> None:
    flaky.plan["enqueue"] = (1, Fault.UNKNOWN)
    with pytest.raises(BackendError) as info:
        await rq.ActivityExecutor(flaky, "q").activity("t").execute()
    assert isinstance(info.value.__cause__, DriverError)
    assert flaky.calls["enqueue"] == 1


async def test_reads_and_claims_are_retried_after_an_in_flight_fault(flaky: FlakyBackend) -> None:
    assert {"claim", "stats", "get_result", "wait_for_result"} <= RETRY_SAFE
    assert not {"enqueue", "ack", "release", "cancel", "retry_activities", "delete_activities"} & RETRY_SAFE
    await rq.ActivityExecutor(flaky, "q").activity("t").execute()
    flaky.plan["stats"] = (2, Fault.UNKNOWN)
    flaky.plan["claim"] = (2, Fault.UNKNOWN)
    assert (await flaky.stats("q")).pending == 1
    assert len(await flaky.claim("q", "w", 10, None, 30_000)) == 1
    assert flaky.calls["stats"] == 3 and flaky.calls["claim"] == 3


async def test_an_answered_error_is_not_retried(flaky: FlakyBackend) -> None:
    flaky.plan["stats"] = (5, Fault.ANSWERED)
    with pytest.raises(BackendError) as info:
        await flaky.stats("q")
    assert flaky.calls["stats"] == 1
    assert not info.value.transient and not isinstance(info.value, StoreBusyError)


async def test_a_cancelled_request_is_retried_for_every_call_without_marking_the_store_down(
    flaky: FlakyBackend, caplog: pytest.LogCaptureFixture
) -> None:
    """BUSY (a statement timeout, a deadlock): nothing was applied, so even an enqueue is sent again."""
    caplog.set_level(logging.WARNING, logger="runnerq_fast.resilience")
    flaky.plan["enqueue"] = (3, Fault.BUSY)
    ids = await rq.ActivityExecutor(flaky, "q").enqueue_many([("t", 1)])
    assert flaky.calls["enqueue"] == 4
    assert (await flaky.stats("q")).pending == 1 == len(ids)
    assert flaky._store_health.up and not caplog.records  # the store answered every time


async def test_busy_attempts_bounds_the_retries_of_a_cancelled_request(flaky: FlakyBackend) -> None:
    flaky.plan["enqueue"] = (2, Fault.BUSY)
    with busy_attempts(1), pytest.raises(StoreBusyError) as info:
        await rq.ActivityExecutor(flaky, "q").activity("t").execute()
    assert flaky.calls["enqueue"] == 1 and info.value.transient
    assert isinstance(info.value.__cause__, DriverError)
    with busy_attempts(2):
        await rq.ActivityExecutor(flaky, "q").activity("t").execute()  # the second try of the two lands
    assert flaky.calls["enqueue"] == 3 and (await flaky.stats("q")).pending == 1
    flaky.plan["enqueue"] = (2, Fault.UNSENT)
    with busy_attempts(1):
        await rq.ActivityExecutor(flaky, "q").activity("t").execute()  # other faults retry as before
    assert (await flaky.stats("q")).pending == 2
    with pytest.raises(ValueError, match="attempts"), busy_attempts(0):
        pass


async def test_a_fault_that_may_have_been_applied_is_a_transient_backend_error(flaky: FlakyBackend) -> None:
    flaky.plan["enqueue"] = (1, Fault.UNKNOWN)
    with pytest.raises(BackendError) as info:
        await rq.ActivityExecutor(flaky, "q").activity("t").execute()
    assert info.value.transient and not isinstance(info.value, StoreBusyError)


async def test_retries_stop_at_retry_timeout_with_the_cause_chained(flaky: FlakyBackend) -> None:
    flaky.plan["stats"] = (10_000, Fault.UNSENT)
    started = time.monotonic()
    with pytest.raises(BackendError) as info:
        await flaky.stats("q")
    took = time.monotonic() - started
    assert 0.5 <= took < 0.5 + 0.4
    assert isinstance(info.value.__cause__, DriverError)
    assert "stats" in str(info.value) and "memory" in str(info.value)
    assert 3 <= flaky.calls["stats"] < 40  # backed off, not a busy loop


async def test_result_timeout_bounds_every_attempt(flaky: FlakyBackend) -> None:
    fut = await rq.ActivityExecutor(flaky, "q").activity("t").execute()
    flaky.retry_timeout = 30.0  # the caller's timeout, not this, bounds a call that has one
    flaky.plan["get_result"] = (10_000, Fault.UNSENT)
    started = time.monotonic()
    with pytest.raises(BackendError):
        await fut.result(timeout=0.4)
    assert time.monotonic() - started < 0.4 + 0.3


async def test_a_wait_cut_by_its_timeout_is_a_timeout_when_the_store_is_fine(flaky: FlakyBackend) -> None:
    fut = await rq.ActivityExecutor(flaky, "q").activity("t").execute()
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await fut.result(timeout=0.2)
    assert time.monotonic() - started < 0.2 + 0.3


class Buggy(FlakyBackend):
    async def stats(self, queue: str) -> QueueStats:
        raise KeyError("a bug")


async def test_a_zero_timeout_still_looks_once(flaky: FlakyBackend) -> None:
    fut = await rq.ActivityExecutor(flaky, "q").activity("t").execute()
    (claimed,) = await flaky.claim("q", "w", 1, None, 30_000)
    await flaky.ack("q", [Ack(claimed.id, claimed.claim_token, AckOutcome.COMPLETED, b"7")])
    assert await fut.result(timeout=0) == 7


async def test_library_errors_and_bugs_pass_through_untouched(flaky: FlakyBackend) -> None:
    with pytest.raises(InvalidActivityError):
        await rq.ActivityExecutor(flaky, "q").activity("").execute()
    buggy = Buggy()
    try:
        with pytest.raises(KeyError):  # no store fault: reaches the caller as it is, at once
            await buggy.stats("q")
    finally:
        await buggy.close()


async def test_one_warning_when_the_store_fails_and_one_when_it_answers_again(
    flaky: FlakyBackend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="runnerq_fast.resilience")
    for _ in range(5):
        flaky.plan["stats"] = (1, Fault.UNKNOWN)
        with pytest.raises(BackendError):
            flaky.retry_timeout = 0.0
            await flaky.stats("q")
    flaky.retry_timeout = 0.5
    await flaky.stats("q")
    await flaky.stats("q")
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages
    assert "is unreachable or failing" in messages[0] and "answers again" in messages[1]


async def test_wait_for_work_returning_does_not_count_as_the_store_answering(
    flaky: FlakyBackend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="runnerq_fast.resilience")
    flaky.retry_timeout = 0.0
    flaky.plan["stats"] = (1, Fault.UNSENT)
    with pytest.raises(BackendError):
        await flaky.stats("q")
    await flaky.wait_for_work("q", 0.01)
    assert not flaky._store_health.up
    assert len(caplog.records) == 1


# ------------------------------------------------------------------ classifiers (real driver exceptions)
@pytest.mark.parametrize(
    ("exc", "fault"),
    [
        (ConnectionRefusedError(111, "Connection refused"), Fault.UNSENT),
        (asyncpg.CannotConnectNowError("the database system is shutting down"), Fault.UNSENT),
        (asyncpg.TooManyConnectionsError("too many clients"), Fault.UNSENT),
        (asyncpg.InternalClientError("cannot switch to state 12; another operation (2) is in progress"), Fault.UNSENT),
        # cancelled or rolled back by the server: nothing applied, the server answers
        (asyncpg.SerializationError("could not serialize access"), Fault.BUSY),
        (asyncpg.DeadlockDetectedError("deadlock detected"), Fault.BUSY),
        (asyncpg.QueryCanceledError("canceling statement due to statement timeout"), Fault.BUSY),
        (asyncpg.LockNotAvailableError("canceling statement due to lock timeout"), Fault.BUSY),
        (asyncpg.IdleInTransactionSessionTimeoutError("terminating connection due to idle-in-transaction timeout"),
         Fault.BUSY),
        (asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"), Fault.UNKNOWN),
        (asyncpg.AdminShutdownError("terminating connection due to administrator command"), Fault.UNKNOWN),
        (TimeoutError(), Fault.UNKNOWN),
        (asyncpg.InterfaceError("cannot perform operation: connection is closed"), Fault.UNSENT),
        (asyncpg.InvalidCatalogNameError('database "x" does not exist'), Fault.ANSWERED),
        (asyncpg.UniqueViolationError("duplicate key"), Fault.ANSWERED),
        (KeyError("a bug"), None),
        (InvalidActivityError("bad"), None),
    ],
)
def test_postgres_classifier(exc: Exception, fault: Fault | None) -> None:
    assert pg_faults.classify(exc) is fault


@pytest.mark.parametrize(
    ("exc", "fault"),
    [
        (rx.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused."), Fault.UNSENT),
        (rx.TimeoutError("Timeout connecting to server"), Fault.UNSENT),
        (rx.ConnectionError("No connection available."), Fault.UNSENT),
        (rx.MaxConnectionsError("Too many connections"), Fault.UNSENT),
        (rx.BusyLoadingError("Redis is loading the dataset in memory"), Fault.UNSENT),
        (rx.ConnectionError("Connection closed by server."), Fault.UNKNOWN),
        (rx.TimeoutError("Timeout reading from socket"), Fault.UNKNOWN),
        (ConnectionResetError(104, "Connection reset by peer"), Fault.UNKNOWN),
        (rx.AuthenticationError("invalid password"), Fault.ANSWERED),
        (rx.ResponseError("OOM command not allowed"), Fault.ANSWERED),
        # Redis Cluster during a failover or a slot migration: refused, not run
        (rx.ClusterDownError("The cluster is down"), Fault.UNSENT),
        (rx.MasterDownError("Link with MASTER is down and replica-serve-stale-data is set to 'no'."), Fault.UNSENT),
        (rx.TryAgainError("Multiple keys request during rehashing of slot"), Fault.UNSENT),
        (rx.SlotNotCoveredError("Slot 3341 is not covered by the cluster."), Fault.UNSENT),
        (rx.RedisClusterException("Redis Cluster cannot be connected. Please provide at least one reachable node"),
         Fault.UNSENT),
        (rx.RedisClusterException("No targets were found to execute"), Fault.ANSWERED),
        (KeyError("a bug"), None),
    ],
)
def test_redis_classifier(exc: Exception, fault: Fault | None) -> None:
    assert redis_faults.classify(exc) is fault


@pytest.mark.parametrize(
    ("exc", "fault"),
    [
        (sqlite3.OperationalError("database is locked"), Fault.BUSY),
        (sqlite3.OperationalError("unable to open database file"), Fault.UNSENT),
        (sqlite3.OperationalError("disk I/O error"), Fault.UNKNOWN),
        (sqlite3.OperationalError("no such table: runnerq_activities"), Fault.ANSWERED),
        (sqlite3.DatabaseError("database disk image is malformed"), Fault.ANSWERED),
        (KeyError("a bug"), None),
    ],
)
def test_sqlite_classifier(exc: Exception, fault: Fault | None) -> None:
    assert sqlite_faults.classify(exc) is fault


async def test_a_real_locked_sqlite_database_is_a_busy_fault(tmp_path: Any) -> None:
    path = tmp_path / "x.db"
    a = sqlite3.connect(path, isolation_level=None, timeout=0.01)
    b = sqlite3.connect(path, isolation_level=None, timeout=0.01)
    try:
        a.execute("CREATE TABLE t (x)")
        a.execute("BEGIN IMMEDIATE")
        with pytest.raises(sqlite3.OperationalError) as info:
            b.execute("BEGIN IMMEDIATE")
        assert sqlite_faults.classify(info.value) is Fault.BUSY
    finally:
        a.close()
        b.close()


async def test_concurrent_guarded_calls_do_not_share_state(flaky: FlakyBackend) -> None:
    flaky.plan["stats"] = (4, Fault.UNSENT)
    results = await asyncio.gather(*(flaky.stats("q") for _ in range(4)))
    assert all(r.pending == 0 for r in results)
