"""Conformance suite for retention: prune, prune_events, hold, the Python API and the engine's pruner.

Every backend's conformance class inherits :class:`RetentionConformance`
next to the others, with the same ``backend`` fixture (a fresh, empty store
per test).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import runnerq_fast as rq
from runnerq_fast.engine.pruner import Pruner
from runnerq_fast.errors import ConfigError, InvalidActivityError
from runnerq_fast.models import Ack, AckOutcome, ActivityFilter
from runnerq_fast.storage import Backend
from tests.conformance import FAST, eventually, new, now_ms

F = ActivityFilter
FINISHED = ["completed", "failed", "dead_letter", "cancelled"]


class RetentionConformance:
    """Retention every backend must have."""

    queue = "ret"

    async def _put(self, backend: Backend, n: int, activity_type: str, **kw: Any) -> list[str]:
        res = await backend.enqueue(self.queue, [new(activity_type, **kw) for _ in range(n)])
        return [r.activity_id for r in res]

    async def _ended(self, backend: Backend, outcome: int, n: int, activity_type: str) -> list[str]:
        ids = await self._put(backend, n, activity_type)
        claimed = await backend.claim(self.queue, "w", n, [activity_type], 30_000)
        assert sorted(c.id for c in claimed) == sorted(ids)
        await backend.ack(self.queue, [Ack(c.id, c.claim_token, outcome, b"1" if outcome == 1 else None,
                                           None if outcome == 1 else "boom", now_ms() + 3_600_000)
                                       for c in claimed])
        return ids

    async def _every_status(self, backend: Backend) -> dict[str, str]:
        """One activity in each of the eight statuses (type = its status)."""
        out = {
            "completed": (await self._ended(backend, AckOutcome.COMPLETED, 1, "completed"))[0],
            "failed": (await self._ended(backend, AckOutcome.FAILED, 1, "failed"))[0],
            "dead_letter": (await self._ended(backend, AckOutcome.DEAD_LETTER, 1, "dead_letter"))[0],
            "retrying": (await self._ended(backend, AckOutcome.RETRY, 1, "retrying"))[0],
        }
        (out["cancelled"],) = await self._put(backend, 1, "cancelled")
        assert await backend.cancel(out["cancelled"])
        (out["processing"],) = await self._put(backend, 1, "processing")
        assert len(await backend.claim(self.queue, "w", 1, ["processing"], 30_000)) == 1
        (out["pending"],) = await self._put(backend, 1, "pending")
        (out["scheduled"],) = await self._put(backend, 1, "scheduled", run_at_ms=now_ms() + 3_600_000)
        for status, aid in out.items():
            snap = await backend.get_activity(aid)
            assert snap is not None and snap.status == status
        await asyncio.sleep(0.01)  # every finish time is now strictly in the past
        return out

    async def test_prune_never_deletes_unfinished_activities_and_respects_the_age(self, backend: Backend) -> None:
        ids = await self._every_status(backend)
        assert await backend.prune(self.queue, FINISHED, 3_600_000) == 0  # nothing finished an hour ago
        assert (await backend.stats(self.queue)).total == 8
        assert await backend.prune(self.queue, FINISHED, 0) == 4
        for status, aid in ids.items():
            snap = await backend.get_activity(aid)
            if status in FINISHED:
                assert snap is None, status
                assert await backend.get_result(aid) is None
            else:
                assert snap is not None and snap.status == status
        stats = await backend.stats(self.queue)
        assert (stats.pending, stats.scheduled, stats.processing, stats.retrying, stats.total) == (1, 1, 1, 1, 4)
        assert await backend.prune(self.queue, FINISHED, 0) == 0

    async def test_prune_by_status_and_in_batches(self, backend: Backend) -> None:
        done = await self._ended(backend, AckOutcome.COMPLETED, 5, "c")
        failed = await self._ended(backend, AckOutcome.FAILED, 2, "f")
        await asyncio.sleep(0.01)
        assert [await backend.prune(self.queue, ["completed"], 0, limit=2) for _ in range(4)] == [2, 2, 1, 0]
        for aid in done:
            assert await backend.get_activity(aid) is None
        assert sorted(s.id for s in (await backend.query_activities(self.queue, F())).items) == sorted(failed)
        assert await backend.prune("another-queue", ["failed"], 0) == 0
        assert await backend.prune(self.queue, [], 0) == 0
        assert (await backend.stats(self.queue)).failed == 2

    async def test_prune_takes_events_results_and_releases_the_idempotency_key(self, backend: Backend) -> None:
        ex = rq.ActivityExecutor(backend, self.queue)
        keyed = await ex.activity("k").idempotency_key("order-7").execute()
        (c,) = await backend.claim(self.queue, "w", 1, ["k"], 30_000)
        await backend.ack(self.queue, [Ack(c.id, c.claim_token, AckOutcome.COMPLETED, b"1")])
        assert await backend.get_events(keyed.activity_id) != []
        same = await ex.activity("k").idempotency_key("order-7").execute()
        assert not same.created and same.activity_id == keyed.activity_id
        await asyncio.sleep(0.01)
        assert await backend.prune(self.queue, ["completed"], 0) == 1
        assert await backend.get_events(keyed.activity_id) == []
        assert await backend.get_result(keyed.activity_id) is None
        again = await ex.activity("k").idempotency_key("order-7").execute()
        assert again.created and again.activity_id != keyed.activity_id  # the key was released with its holder

    async def test_a_pruned_parent_leaves_its_children_linked_and_listed(self, backend: Backend) -> None:
        (parent,) = await self._ended(backend, AckOutcome.COMPLETED, 1, "parent")
        res = await backend.enqueue(self.queue, [new("child", parent_id=parent), new("child", parent_id=parent)])
        kids = [r.activity_id for r in res]
        (running_kid,) = [c.id for c in await backend.claim(self.queue, "w", 1, ["child"], 30_000)]
        await asyncio.sleep(0.01)
        assert await backend.prune(self.queue, ["completed"], 0) == 1  # the parent; the claimed child is running
        assert await backend.get_activity(parent) is None
        page = await backend.query_activities(self.queue, F(parent_id=parent))
        assert sorted(s.id for s in page.items) == sorted(kids)
        assert all(s.parent_id == parent for s in page.items)
        (other,) = await backend.claim(self.queue, "w", 5, ["child"], 30_000)
        assert {running_kid, other.id} == set(kids)
        await backend.ack(self.queue, [Ack(other.id, other.claim_token, AckOutcome.COMPLETED, b"2")])
        await asyncio.sleep(0.01)
        assert await backend.prune(self.queue, ["completed"], 0) == 1  # a finished child leaves the listing
        page = await backend.query_activities(self.queue, F(parent_id=parent))
        assert [s.id for s in page.items] == [running_kid]

    async def test_prune_events_keeps_the_activities(self, backend: Backend) -> None:
        (aid,) = await self._put(backend, 1, "t")
        assert await backend.get_events(aid) != []
        assert await backend.prune_events(self.queue, 3_600_000) == 0
        await asyncio.sleep(0.01)
        gone = await backend.prune_events(self.queue, 0)
        snap = await backend.get_activity(aid)
        assert snap is not None and snap.status == "pending"
        if backend.name == "redis":  # events live in the activity's hash and go with it
            assert gone == 0 and await backend.get_events(aid) != []
        else:
            assert gone >= 1 and await backend.get_events(aid) == []

    async def test_bad_prune_arguments_are_refused_and_nothing_is_deleted(self, backend: Backend) -> None:
        await self._ended(backend, AckOutcome.COMPLETED, 2, "c")
        for status in ("pending", "processing", "retrying", "scheduled", "bogus"):
            with pytest.raises(InvalidActivityError, match="finished"):
                await backend.prune(self.queue, [status], 0)
        for age in (-1, 1.5, True, 10**20, 2**63):  # too large: overflowed SQLite (OverflowError) and PostgreSQL
            with pytest.raises(InvalidActivityError, match="older_than_ms"):
                await backend.prune(self.queue, ["completed"], age)  # type: ignore[arg-type]
            with pytest.raises(InvalidActivityError, match="older_than_ms"):
                await backend.prune_events(self.queue, age)  # type: ignore[arg-type]
        for limit in (0, 100_001):
            with pytest.raises(InvalidActivityError, match="limit"):
                await backend.prune(self.queue, ["completed"], 0, limit=limit)
        for seconds in (float("nan"), 1e300, 10**20):
            with pytest.raises(InvalidActivityError, match="older_than"):
                await rq.prune(backend, self.queue, older_than=seconds)
        for size in (0, 100_001, 2.5):  # named limit, the backend's parameter, not batch_size
            with pytest.raises(InvalidActivityError, match="batch_size"):
                await rq.prune(backend, self.queue, older_than=0, batch_size=size)  # type: ignore[arg-type]
        with pytest.raises(InvalidActivityError, match="statuses"):  # pruned nothing, silently
            await rq.prune(backend, self.queue, older_than=0, statuses=[])
        for pause in (-1.0, float("nan"), float("inf")):  # nan slept not at all, inf for ever
            with pytest.raises(InvalidActivityError, match="pause"):
                await rq.prune(backend, self.queue, older_than=0, pause=pause)
        with pytest.raises(ConfigError):
            await backend.hold(self.queue, "", "a", 1000)
        with pytest.raises(ConfigError):
            await backend.hold(self.queue, "prune", "a", 0)
        assert (await backend.stats(self.queue)).completed == 2

    async def test_a_hold_has_one_holder_until_it_expires(self, backend: Backend) -> None:
        assert await backend.hold(self.queue, "prune", "a", 300)
        assert not await backend.hold(self.queue, "prune", "b", 300)
        assert await backend.hold(self.queue, "prune", "a", 300)  # renewed by its holder
        assert await backend.hold(self.queue, "other", "b", 300)  # another purpose
        assert await backend.hold("another-queue", "prune", "b", 300)  # another queue
        await asyncio.sleep(0.4)
        assert await backend.hold(self.queue, "prune", "b", 300)  # a's time ran out
        assert not await backend.hold(self.queue, "prune", "a", 300)

    async def test_the_python_api_reports_and_stops_at_max_batches(self, backend: Backend) -> None:
        await self._ended(backend, AckOutcome.COMPLETED, 5, "c")
        await self._ended(backend, AckOutcome.DEAD_LETTER, 1, "d")
        await asyncio.sleep(0.01)
        first = await rq.prune(backend, self.queue, older_than=0, statuses=["completed"], batch_size=2,
                               max_batches=2)
        assert (first.activities, first.batches, first.complete) == (4, 2, False)
        rest = await rq.prune(backend, self.queue, older_than=0, batch_size=2, events_older_than=3600)
        assert (rest.queue, rest.activities, rest.events, rest.complete) == (self.queue, 2, 0, True)
        assert (await backend.stats(self.queue)).total == 0
        assert (await rq.QueueAdmin(backend, self.queue).prune(older_than=0)).activities == 0

    async def test_one_pruner_per_queue_however_many_workers(self, backend: Backend) -> None:
        cfg = rq.WorkerConfig(queue_name=self.queue, completed_retention=0.001, prune_interval=0.2)
        first, second = Pruner(backend, cfg, "w1"), Pruner(backend, cfg, "w2")
        await self._ended(backend, AckOutcome.COMPLETED, 3, "c")
        await asyncio.sleep(0.01)
        reports = await first.run_once()
        assert reports is not None and sum(r.activities for r in reports) == 3
        assert await second.run_once() is None  # w1 holds the queue's pruning
        assert await first.run_once() is not None  # and keeps it

    async def test_the_engine_prunes_by_its_retention_settings(self, backend: Backend) -> None:
        (kept,) = await self._ended(backend, AckOutcome.FAILED, 1, "f")  # failed_retention: 7 days
        (waiting,) = await self._put(backend, 1, "nobody-handles-it")
        engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": self.queue, "completed_retention": 0.05,
                                            "prune_interval": 0.05})

        @engine.activity("job")
        async def job(payload: Any, ctx: rq.ActivityContext) -> int:
            return 1

        async with engine:
            futs = [await engine.executor.activity("job").execute() for _ in range(3)]
            for f in futs:
                await f.result(timeout=5)

            async def gone() -> bool:
                return all([await backend.get_activity(f.activity_id) is None for f in futs])

            await eventually(gone, 5, "the engine's pruner to delete the completed activities")
        assert (await backend.get_activity(kept)) is not None
        snap = await backend.get_activity(waiting)
        assert snap is not None and snap.status == "pending"

    async def test_stats_match_the_rows_after_every_kind_of_change(self, backend: Backend) -> None:
        """Counts kept apart from the rows (SQL counters, Redis sets) agree with the rows themselves."""
        ids = await self._every_status(backend)
        await self._put(backend, 3, "extra", run_at_ms=now_ms() + 3_600_000)
        await backend.retry_activities(self.queue, F(ids=(ids["failed"],)))
        await backend.cancel_activities(self.queue, F(ids=(ids["pending"],)))
        await backend.run_now(self.queue, F(activity_types=("extra",)), limit=1)
        await backend.delete_activities(self.queue, F(ids=(ids["completed"],)))
        await backend.prune(self.queue, ["dead_letter"], 0)
        (c,) = await backend.claim(self.queue, "w", 1, ["failed"], 30_000)  # the retried one
        await backend.ack(self.queue, [Ack(c.id, c.claim_token, AckOutcome.COMPLETED, b"1")])
        stats = await backend.stats(self.queue)
        for status in [*FINISHED, "pending", "scheduled", "processing", "retrying"]:
            counted = await backend.count_activities(self.queue, F(statuses=(status,)))
            assert getattr(stats, status) == counted.count, status
        (summary,) = [s for s in await backend.list_queues() if s.queue == self.queue]
        assert summary.counts == stats
        assert summary.by_type["extra"] == {"scheduled": 2, "pending": 1}
        assert summary.by_type["failed"] == {"completed": 1}
        assert "dead_letter" not in summary.by_type
