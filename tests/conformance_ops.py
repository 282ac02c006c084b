"""Conformance suite for operator features: filtered keyset listings, counts,
queue summaries, parent/child links and the actions (retry, cancel, run now,
set priority, delete), by id and by filter.

Every backend's conformance class inherits :class:`OperationsConformance`
next to :class:`tests.conformance.BackendConformance`, with the same
``backend`` fixture (a fresh, empty store per test).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import runnerq_fast as rq
from runnerq_fast.filters import ROW_SCAN_LIMIT, encode_cursor
from runnerq_fast.models import Ack, AckOutcome, ActivityFilter, LeaseRef
from runnerq_fast.storage import Backend
from tests.conformance import FAST, eventually, new, now_ms

F = ActivityFilter


async def _all_pages(
    backend: Backend, queue: str, flt: ActivityFilter, limit: int, newest_first: bool = True
) -> list[str]:
    out: list[str] = []
    cursor: str | None = None
    for _ in range(10_000):
        page = await backend.query_activities(queue, flt, limit=limit, cursor=cursor, newest_first=newest_first)
        assert len(page.items) <= limit
        out += [s.id for s in page.items]
        cursor = page.next_cursor
        if cursor is None:
            return out
    raise AssertionError("paging did not end")


async def _kinds(backend: Backend, activity_id: str) -> list[str]:
    return [e.event_type for e in await backend.get_events(activity_id)]


class OperationsConformance:
    """Listings, counts, summaries and actions every backend must have."""

    queue = "ops"

    def engine(self, backend: Backend, **kw: Any) -> rq.WorkerEngine:
        return rq.WorkerEngine(backend, **{**FAST, "queue_name": self.queue, **kw})

    async def _enqueue(self, backend: Backend, n: int, activity_type: str = "t", **kw: Any) -> list[str]:
        res = await backend.enqueue(self.queue, [new(activity_type, **kw) for _ in range(n)])
        return [r.activity_id for r in res]

    async def _finish(self, backend: Backend, outcome: AckOutcome, n: int = 1, activity_type: str = "t") -> list[str]:
        """Enqueue ``n`` activities of a fresh type, claim them and ack them with ``outcome``."""
        ids = await self._enqueue(backend, n, activity_type)
        claimed = await backend.claim(self.queue, "w", n, [activity_type], 30_000)
        assert sorted(c.id for c in claimed) == sorted(ids)
        await backend.ack(self.queue, [Ack(c.id, c.claim_token, outcome, b"1" if outcome == 1 else None,
                                           None if outcome == 1 else "boom") for c in claimed])
        return ids

    # ------------------------------------------------------------- listings
    async def test_pages_newest_first_have_no_duplicates_or_gaps_while_rows_arrive(self, backend: Backend) -> None:
        first = await self._enqueue(backend, 23)
        seen: list[str] = []
        cursor = None
        later: list[str] = []
        while True:
            page = await backend.query_activities(self.queue, F(), limit=5, cursor=cursor)
            seen += [s.id for s in page.items]
            later += await self._enqueue(backend, 2)  # newer rows: they sort before the pages already read
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert seen == list(reversed(first))
        assert not set(later) & set(seen)
        newest = await backend.query_activities(self.queue, F(), limit=3)
        assert [s.id for s in newest.items] == list(reversed(later))[:3]

    async def test_pages_oldest_first_pick_up_rows_inserted_between_pages(self, backend: Backend) -> None:
        first = await self._enqueue(backend, 9)
        seen: list[str] = []
        cursor = None
        later: list[str] = []
        for _ in range(100):
            page = await backend.query_activities(self.queue, F(), limit=4, cursor=cursor, newest_first=False)
            seen += [s.id for s in page.items]
            if len(later) < 6:
                later += await self._enqueue(backend, 2)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert seen == first + later
        assert len(set(seen)) == len(seen)

    async def test_snapshot_fields_in_a_page(self, backend: Backend) -> None:
        (aid,) = await self._enqueue(backend, 1, "typed", priority=3, metadata=b'{"tenant":"t1"}')
        page = await backend.query_activities(self.queue, F())
        (snap,) = page.items
        assert (snap.id, snap.activity_type, snap.status, snap.priority, snap.queue) == (aid, "typed", "pending", 3,
                                                                                         self.queue)
        assert snap.metadata == {"tenant": "t1"} and snap.parent_id is None  # a dict, not the stored JSON text
        assert page.next_cursor is None
        assert (await backend.query_activities("elsewhere", F())).items == []

    async def test_each_filter_field(self, backend: Backend) -> None:
        q = self.queue
        done = await self._finish(backend, AckOutcome.COMPLETED, 3, "done")
        failed = await self._finish(backend, AckOutcome.FAILED, 2, "bad")
        pend = await self._enqueue(backend, 2, "mail", priority=4, metadata=b'{"tenant":"a","region":"eu"}')
        other = await self._enqueue(backend, 2, "mail", priority=1, metadata=b'{"tenant":"b","region":"eu"}')
        sched = await self._enqueue(backend, 1, "mail", run_at_ms=now_ms() + 600_000)
        parent = pend[0]
        kids = [r.activity_id for r in await backend.enqueue(q, [new("kid", parent_id=parent) for _ in range(3)])]

        async def ids(flt: ActivityFilter, limit: int = 7) -> set[str]:
            return set(await _all_pages(backend, q, flt, limit))

        everything = set(done + failed + pend + other + sched + kids)
        assert await ids(F()) == everything
        assert await ids(F(statuses=("completed",))) == set(done)
        assert await ids(F(statuses=("failed", "scheduled"))) == set(failed + sched)
        assert await ids(F(statuses=("pending",))) == set(pend + other + kids)
        assert await ids(F(activity_types=("mail",))) == set(pend + other + sched)
        assert await ids(F(activity_types=("mail", "bad"))) == set(pend + other + sched + failed)
        assert await ids(F(activity_types=("mail",), statuses=("pending",))) == set(pend + other)
        assert await ids(F(priorities=(4,))) == set(pend)
        assert await ids(F(priorities=(1, 4), activity_types=("mail",))) == set(pend + other)
        assert await ids(F(metadata=(("tenant", "a"),))) == set(pend)
        assert await ids(F(metadata=(("region", "eu"),))) == set(pend + other)
        assert await ids(F(metadata=(("region", "eu"), ("tenant", "b")))) == set(other)
        assert await ids(F(metadata=(("tenant", "zz"),))) == set()
        assert await ids(F(ids=(done[0], failed[1], "f" * 32))) == {done[0], failed[1]}
        assert await ids(F(ids=(done[0], failed[1]), statuses=("failed",))) == {failed[1]}
        assert await ids(F(parent_id=parent)) == set(kids)
        assert await ids(F(parent_id=parent, statuses=("completed",))) == set()
        assert await ids(F(parent_id=kids[0])) == set()
        snaps = (await backend.query_activities(q, F(parent_id=parent))).items
        assert {s.parent_id for s in snaps} == {parent}
        kid = await backend.get_activity(kids[0])
        assert kid is not None and kid.parent_id == parent

    async def test_created_range(self, backend: Backend) -> None:
        early = await self._enqueue(backend, 2)
        await asyncio.sleep(0.03)
        snap = await backend.get_activity(early[-1])
        assert snap is not None
        mid = await self._enqueue(backend, 3)
        mid_snap = await backend.get_activity(mid[0])
        assert mid_snap is not None
        await asyncio.sleep(0.03)
        late = await self._enqueue(backend, 2)
        late_snap = await backend.get_activity(late[0])
        assert late_snap is not None
        after = mid_snap.created_at_ms
        before = late_snap.created_at_ms
        got = await _all_pages(backend, self.queue, F(created_after_ms=after, created_before_ms=before), 2)
        assert got == list(reversed(mid))
        got = await _all_pages(backend, self.queue, F(created_after_ms=after), 2, newest_first=False)
        assert got == mid + late
        got = await _all_pages(backend, self.queue, F(created_before_ms=after, statuses=("pending",)), 10)
        assert got == list(reversed(early))

    async def test_row_filters_examine_a_bounded_number_of_rows_and_resume(self, backend: Backend) -> None:
        await self._enqueue(backend, ROW_SCAN_LIMIT + 300, "bulk")
        (wanted,) = await self._enqueue(backend, 1, "bulk", metadata=b'{"k":"v"}')
        await self._enqueue(backend, ROW_SCAN_LIMIT + 10, "bulk")
        flt = F(metadata=(("k", "v"),))
        page = await backend.query_activities(self.queue, flt, limit=10)
        assert page.items == [] and page.next_cursor is not None  # stopped after ROW_SCAN_LIMIT rows
        assert await _all_pages(backend, self.queue, flt, 10) == [wanted]
        # a count examines at most cap + ROW_SCAN_LIMIT candidates: the match lies beyond them
        assert (await backend.count_activities(self.queue, flt, cap=10)).exact is False
        assert await backend.count_activities(self.queue, flt, cap=ROW_SCAN_LIMIT * 4) == rq.ActivityCount(1, True)

    async def test_count_is_exact_below_the_cap_and_says_so_above(self, backend: Backend) -> None:
        await self._enqueue(backend, 12, "a")
        await self._finish(backend, AckOutcome.FAILED, 3, "b")
        assert await backend.count_activities(self.queue, F()) == rq.ActivityCount(15, True)
        assert await backend.count_activities(self.queue, F(statuses=("failed",))) == rq.ActivityCount(3, True)
        assert await backend.count_activities(self.queue, F(activity_types=("a",))) == rq.ActivityCount(12, True)
        assert await backend.count_activities(self.queue, F(), cap=10) == rq.ActivityCount(10, False)
        assert await backend.count_activities(self.queue, F(activity_types=("a",)), cap=5) == rq.ActivityCount(5, False)
        assert await backend.count_activities(self.queue, F(statuses=("failed",)), cap=3) == rq.ActivityCount(3, True)
        assert await backend.count_activities("nowhere", F()) == rq.ActivityCount(0, True)

    async def test_list_queues_counts_by_status_and_type(self, backend: Backend) -> None:
        await self._enqueue(backend, 3, "x")
        await self._enqueue(backend, 1, "y", run_at_ms=now_ms() + 600_000)
        await self._finish(backend, AckOutcome.COMPLETED, 2, "z")
        await backend.enqueue("ops-other", [new("x")])
        before = now_ms()
        summaries = {s.queue: s for s in await backend.list_queues()}
        assert set(summaries) >= {self.queue, "ops-other"}
        mine = summaries[self.queue]
        assert (mine.counts.pending, mine.counts.scheduled, mine.counts.completed, mine.counts.total) == (3, 1, 2, 6)
        assert mine.by_type == {"x": {"pending": 3}, "y": {"scheduled": 1}, "z": {"completed": 2}}
        assert mine.oldest_ready_ms is not None and before - 60_000 < mine.oldest_ready_ms <= before
        assert summaries["ops-other"].counts.total == 1
        await backend.claim(self.queue, "w", 10, ["x"], 30_000)
        mine = {s.queue: s for s in await backend.list_queues()}[self.queue]
        assert mine.oldest_ready_ms is None  # only a scheduled one is left, not due
        assert mine.by_type["x"] == {"processing": 3}

    async def test_oldest_ready_looks_past_priority_and_retry_groups(self, backend: Backend) -> None:
        (due,) = await self._enqueue(backend, 1, "s", priority=1, run_at_ms=now_ms() + 30)
        await asyncio.sleep(0.06)  # due now, but nothing claimed it: still scheduled
        (low,) = await self._enqueue(backend, 1, "a", priority=1)
        (r,) = await self._enqueue(backend, 1, "r", priority=3)
        (c,) = await backend.claim(self.queue, "w", 1, ["r"], 30_000)
        await backend.ack(self.queue, [Ack(c.id, c.claim_token, AckOutcome.RETRY, None, "x", 0)])
        await self._enqueue(backend, 2, "b", priority=4)

        async def oldest() -> int | None:
            return {s.queue: s for s in await backend.list_queues()}[self.queue].oldest_ready_ms

        snaps = {a: await backend.get_activity(a) for a in (due, low, r)}
        ready = {a: s.ready_at_ms for a, s in snaps.items() if s is not None}
        assert await oldest() == ready[due]
        await backend.cancel_activities(self.queue, F(ids=(due,)))
        assert await oldest() == ready[low]
        await backend.cancel_activities(self.queue, F(ids=(low,)))
        retried = await backend.get_activity(r)
        assert retried is not None and retried.retry_count == 1
        assert await oldest() == retried.ready_at_ms  # priority 3, one retry: older than the priority-4 ones

    @pytest.mark.parametrize(
        ("call", "message"),
        [
            (lambda b, q: b.query_activities(q, F(statuses=("bogus",))), "unknown status"),
            (lambda b, q: b.query_activities(q, F(), limit=-1), "limit"),
            (lambda b, q: b.query_activities(q, F(), limit=0), "limit"),
            (lambda b, q: b.query_activities(q, F(), limit=100_000), "limit"),
            (lambda b, q: b.query_activities(q, F(), cursor="not a cursor"), "cursor"),
            (lambda b, q: b.query_activities(q, F(), cursor=encode_cursor(1, "x", True), newest_first=False),
             "order"),
            (lambda b, q: b.query_activities(q, F(priorities=(9,))), "priority"),
            (lambda b, q: b.query_activities(q, F(ids=tuple(f"{i:032x}" for i in range(10_001)))), "ids"),
            (lambda b, q: b.query_activities(q, F(metadata=(("k",),))), "metadata"),  # type: ignore[arg-type]
            (lambda b, q: b.query_activities(q, F(created_after_ms=-5)), "created_after_ms"),
            (lambda b, q: b.count_activities(q, F(), cap=0), "cap"),
            (lambda b, q: b.retry_activities(q, F(), limit=0), "limit"),
            (lambda b, q: b.cancel_activities(q, F(statuses=("nope",))), "unknown status"),
            (lambda b, q: b.delete_activities(q, F(), limit=-3), "limit"),
            (lambda b, q: b.run_now(q, F(activity_types=("",))), "activity type"),
            (lambda b, q: b.set_priority(q, F(), 0), "priority"),
            (lambda b, q: b.set_priority(q, F(), 5), "priority"),
            (lambda b, q: b.set_priority(q, F(), 2, limit=10**9), "limit"),
        ],
    )
    async def test_bad_input_is_refused_and_nothing_changes(self, backend: Backend, call: Any, message: str) -> None:
        await self._enqueue(backend, 2)
        await self._finish(backend, AckOutcome.FAILED, 1, "f")
        before = await backend.stats(self.queue)
        with pytest.raises(rq.InvalidActivityError, match=message):
            await call(backend, self.queue)
        assert await backend.stats(self.queue) == before

    # ------------------------------------------------------- parent / child
    async def test_child_enqueued_through_ctx_executor_records_its_parent(self, backend: Backend) -> None:
        engine = self.engine(backend)

        @engine.activity("parent")
        async def parent(payload: Any, ctx: rq.ActivityContext) -> list[str]:
            a = await ctx.executor.activity("child").execute()
            b = await ctx.executor.enqueue_many([("child", 1)])
            return [a.activity_id, *b]

        @engine.activity("child")
        def child(payload: Any, ctx: rq.ActivityContext) -> None:
            return None

        fut = await engine.executor.activity("parent").execute()
        async with engine:
            kids = await fut.result(timeout=5)
            for k in kids:
                await rq.ActivityFuture(backend, k).result(timeout=5)
        for k in kids:
            snap = await backend.get_activity(k)
            assert snap is not None and snap.parent_id == fut.activity_id
        top = await backend.get_activity(fut.activity_id)
        assert top is not None and top.parent_id is None
        page = await backend.query_activities(self.queue, F(parent_id=fut.activity_id))
        assert sorted(s.id for s in page.items) == sorted(kids)

    # -------------------------------------------------------------- retry
    async def test_retry_by_id_puts_failed_and_dead_letters_back_to_pending(self, backend: Backend) -> None:
        failed = await self._finish(backend, AckOutcome.FAILED, 1, "f")
        dead = await self._finish(backend, AckOutcome.DEAD_LETTER, 1, "d")
        done = await self._finish(backend, AckOutcome.COMPLETED, 1, "c")
        pending = await self._enqueue(backend, 1, "p")
        res = await backend.retry_activities(self.queue, F(ids=(*failed, *dead, *done, *pending, "0" * 32)))
        assert res.action == "retry" and sorted(res.changed) == sorted(failed + dead) and res.skipped == 2
        for aid in failed + dead:
            snap = await backend.get_activity(aid)
            assert snap is not None and (snap.status, snap.retry_count, snap.finished_at_ms) == ("pending", 0, None)
            assert snap.last_error == "boom"
            kinds = await _kinds(backend, aid)
            assert kinds[-1] == "retry_requested" and ("failed" in kinds or "dead_letter" in kinds)
            assert await backend.get_result(aid) is None
        assert await backend.list_dead_letter(self.queue) == []
        claimed = await backend.claim(self.queue, "w", 10, ["f", "d"], 30_000)
        assert sorted(c.id for c in claimed) == sorted(failed + dead)
        done_snap = await backend.get_activity(done[0])
        assert done_snap is not None and done_snap.status == "completed"

    async def test_retry_by_filter_then_the_engine_runs_it_to_completion(self, backend: Backend) -> None:
        failed = await self._finish(backend, AckOutcome.FAILED, 3, "job")
        other = await self._finish(backend, AckOutcome.FAILED, 1, "other")
        res = await backend.retry_activities(self.queue, F(activity_types=("job",), statuses=("failed",)))
        assert sorted(res.changed) == sorted(failed) and res.skipped == 0
        res = await backend.retry_activities(self.queue, F(activity_types=("job",)))
        assert res.changed == [] and res.skipped == 3  # now pending: matched, not retryable
        engine = self.engine(backend)

        @engine.activity("job")
        async def job(payload: Any, ctx: rq.ActivityContext) -> int:
            return ctx.retry_count

        async with engine:
            for aid in failed:
                assert await rq.ActivityFuture(backend, aid).result(timeout=5) == 0
        snap = await backend.get_activity(other[0])
        assert snap is not None and snap.status == "failed"

    # ------------------------------------------------------------- cancel
    async def test_cancel_by_id_ends_not_started_work_and_skips_finished(self, backend: Backend) -> None:
        (pending,) = await self._enqueue(backend, 1)
        (scheduled,) = await self._enqueue(backend, 1, run_at_ms=now_ms() + 600_000)
        (retrying,) = await self._enqueue(backend, 1, "r")
        (c,) = await backend.claim(self.queue, "w", 1, ["r"], 30_000)
        await backend.ack(self.queue, [Ack(c.id, c.claim_token, AckOutcome.RETRY, None, "x", now_ms() + 600_000)])
        (done,) = await self._finish(backend, AckOutcome.COMPLETED, 1, "c")
        waiter = asyncio.create_task(rq.ActivityFuture(backend, pending).result(timeout=5))
        await asyncio.sleep(0.05)
        res = await backend.cancel_activities(self.queue, F(ids=(pending, scheduled, retrying, done)))
        assert sorted(res.changed) == sorted([pending, scheduled, retrying]) and res.skipped == 1
        with pytest.raises(rq.ActivityCancelled):
            await waiter
        for aid in (pending, scheduled, retrying):
            snap = await backend.get_activity(aid)
            assert snap is not None and snap.status == "cancelled" and snap.finished_at_ms is not None
            assert (await _kinds(backend, aid))[-1] == "cancelled"
            result = await backend.get_result(aid)
            assert result is not None and result.status == "cancelled"
        assert await backend.claim(self.queue, "w", 10, None, 30_000) == []
        again = await backend.cancel_activities(self.queue, F(ids=(pending,)))
        assert again.changed == [] and again.skipped == 1

    async def test_cancel_by_filter(self, backend: Backend) -> None:
        await self._finish(backend, AckOutcome.COMPLETED, 2, "drop")
        keep = await self._enqueue(backend, 2, "keep")
        drop = await self._enqueue(backend, 3, "drop")
        res = await backend.cancel_activities(self.queue, F(activity_types=("drop",)))
        assert sorted(res.changed) == sorted(drop) and res.skipped == 2
        assert (await backend.stats(self.queue)).cancelled == 3
        assert set(await _all_pages(backend, self.queue, F(statuses=("pending",)), 10)) == set(keep)
        limited = await backend.cancel_activities(self.queue, F(activity_types=("keep",)), limit=1)
        assert len(limited.changed) == 1 and limited.changed[0] == keep[-1]  # newest first

    async def test_cancel_of_a_running_activity_is_requested_then_acked_cancelled(self, backend: Backend) -> None:
        (aid,) = await self._enqueue(backend, 1)
        (held,) = await backend.claim(self.queue, "w", 1, None, 30_000)
        res = await backend.cancel_activities(self.queue, F(ids=(aid,)))
        assert res.changed == [aid] and res.skipped == 0
        snap = await backend.get_activity(aid)
        assert snap is not None and snap.status == "processing"  # the handler is still running
        assert (await _kinds(backend, aid))[-1] == "cancel_requested"
        again = await backend.cancel_activities(self.queue, F(ids=(aid,)))
        assert again.changed == [] and again.skipped == 1
        report = await backend.extend_leases(self.queue, [LeaseRef(aid, held.claim_token)], 30_000)
        assert report == rq.LeaseReport([], [aid])
        assert await backend.ack(self.queue, [Ack(aid, held.claim_token, AckOutcome.CANCELLED)]) == []
        result = await backend.get_result(aid)
        assert result is not None and result.status == "cancelled"
        assert (await _kinds(backend, aid))[-1] == "cancelled"
        late = Ack(aid, held.claim_token, AckOutcome.COMPLETED, b'"late"')
        assert await backend.ack(self.queue, [late]) == [aid]
        snap = await backend.get_activity(aid)
        assert snap is not None and snap.status == "cancelled"

    async def test_cancel_requested_then_retry_release_or_lease_expiry_end_cancelled(self, backend: Backend) -> None:
        a, b, c = await self._enqueue(backend, 3)
        claimed = {x.id: x for x in await backend.claim(self.queue, "w", 3, None, 30_000)}
        assert (await backend.cancel_activities(self.queue, F(ids=(a, b)))).changed
        retry = Ack(a, claimed[a].claim_token, AckOutcome.RETRY, None, "transient", now_ms())
        assert await backend.ack(self.queue, [retry]) == []
        assert await backend.release(self.queue, [LeaseRef(b, claimed[b].claim_token)]) == [b]
        for aid in (a, b):
            snap = await backend.get_activity(aid)
            assert snap is not None and snap.status == "cancelled", aid
        # c: asked to cancel, then its worker dies (the lease runs out)
        (d,) = await self._enqueue(backend, 1, "lease")
        (held,) = await backend.claim(self.queue, "w", 1, ["lease"], 30)
        await backend.cancel_activities(self.queue, F(ids=(d,)))
        await asyncio.sleep(0.08)
        report = await backend.requeue_expired(self.queue, 100)
        assert report.cancelled == [d] and report.requeued == [] and report.dead_lettered == []
        snap = await backend.get_activity(d)
        assert snap is not None and snap.status == "cancelled"
        assert (await backend.ack(self.queue, [Ack(d, held.claim_token, AckOutcome.COMPLETED)])) == [d]
        snap = await backend.get_activity(c)
        assert snap is not None and snap.status == "processing"

    async def test_engine_cancels_a_running_handler_on_request(self, backend: Backend) -> None:
        engine = self.engine(backend, heartbeat_interval=0.05, lease_timeout=5.0)
        started = asyncio.Event()
        seen: list[str] = []

        @engine.activity("long")
        async def long(payload: Any, ctx: rq.ActivityContext) -> str:
            started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                seen.append("cancelled")
                raise
            return "finished"

        @engine.activity("plain")
        def plain(payload: Any, ctx: rq.ActivityContext) -> str:  # a thread cannot be interrupted: it polls
            deadline = time.monotonic() + 10
            while not ctx.cancel_requested and time.monotonic() < deadline:
                time.sleep(0.005)
            seen.append(f"plain saw the flag: {ctx.cancel_requested}")
            return "stopped early"

        @engine.activity("quick")
        async def quick(payload: Any, ctx: rq.ActivityContext) -> int:
            return 7

        fut = await engine.executor.activity("long").execute()
        sync_fut = await engine.executor.activity("plain").execute()
        async with engine:
            await asyncio.wait_for(started.wait(), 5)
            await wait_status_of(backend, sync_fut.activity_id, "processing")
            t0 = time.monotonic()
            res = await backend.cancel_activities(self.queue, F(ids=(fut.activity_id, sync_fut.activity_id)))
            assert sorted(res.changed) == sorted([fut.activity_id, sync_fut.activity_id])
            with pytest.raises(rq.ActivityCancelled):
                await fut.result(timeout=5)
            with pytest.raises(rq.ActivityCancelled):
                await sync_fut.result(timeout=5)
            assert time.monotonic() - t0 < 2.0  # about one heartbeat (0.05 s), not the 30 s handler
            after = await engine.executor.activity("quick").execute()
            assert await after.result(timeout=5) == 7  # the worker that ran it carries on
        assert "cancelled" in seen and "plain saw the flag: True" in seen
        assert engine.stats["cancelled"] == 2
        for aid in (fut.activity_id, sync_fut.activity_id):
            kinds = await _kinds(backend, aid)
            assert kinds.index("cancel_requested") < kinds.index("cancelled") and kinds[-1] == "cancelled"
            snap = await backend.get_activity(aid)
            assert snap is not None and snap.status == "cancelled" and snap.retry_count == 0

    # ------------------------------------------------------------ run now
    async def test_run_now_makes_scheduled_and_retrying_ready(self, backend: Backend) -> None:
        (sched,) = await self._enqueue(backend, 1, "s", run_at_ms=now_ms() + 600_000)
        (retrying,) = await self._enqueue(backend, 1, "s")
        (c,) = await backend.claim(self.queue, "w", 1, None, 30_000)
        await backend.ack(self.queue, [Ack(c.id, c.claim_token, AckOutcome.RETRY, None, "x", now_ms() + 600_000)])
        (pending,) = await self._enqueue(backend, 1, "s")
        res = await backend.run_now(self.queue, F(ids=(sched, retrying, pending)))
        assert sorted(res.changed) == sorted([sched, retrying]) and res.skipped == 1
        for aid in (sched, retrying):
            snap = await backend.get_activity(aid)
            assert snap is not None and snap.status == "pending" and snap.ready_at_ms <= now_ms()
            assert (await _kinds(backend, aid))[-1] == "run_now"
        got = await backend.claim(self.queue, "w", 10, ["s"], 30_000)
        assert {g.id for g in got} == {sched, retrying, pending}
        assert next(g for g in got if g.id == retrying).retry_count == 1

    async def test_run_now_by_filter_wakes_a_waiting_engine(self, backend: Backend) -> None:
        engine = self.engine(backend, poll_interval=5.0)
        ran: list[str] = []

        @engine.activity("later")
        async def later(payload: Any, ctx: rq.ActivityContext) -> None:
            ran.append(ctx.activity_id)

        ids = await self._enqueue(backend, 2, "later", run_at_ms=now_ms() + 600_000)
        async with engine:
            await asyncio.sleep(0.1)
            t0 = time.monotonic()
            res = await backend.run_now(self.queue, F(activity_types=("later",)))
            assert sorted(res.changed) == sorted(ids)
            for aid in ids:
                await rq.ActivityFuture(backend, aid).result(timeout=4)
            assert time.monotonic() - t0 < 2.0  # woken, not the 5 s poll
        assert sorted(ran) == sorted(ids)

    # ------------------------------------------------------- set priority
    async def test_set_priority_reorders_the_claim_order(self, backend: Backend) -> None:
        low = await self._enqueue(backend, 3, priority=1)
        await asyncio.sleep(0.003)
        high = await self._enqueue(backend, 2, priority=3)
        (done,) = await self._finish(backend, AckOutcome.COMPLETED, 1, "c")
        res = await backend.set_priority(self.queue, F(ids=(low[2], done, high[0])), 4)
        assert sorted(res.changed) == sorted([low[2], high[0]]) and res.skipped == 1
        res = await backend.set_priority(self.queue, F(ids=(low[2],)), 4)
        assert res.changed == [] and res.skipped == 1  # already at 4
        snap = await backend.get_activity(low[2])
        assert snap is not None and snap.priority == 4
        assert (await _kinds(backend, low[2]))[-1] == "priority_changed"
        events = await backend.get_events(low[2])
        assert events[-1].detail == "1->4"
        got = [c.id for c in await backend.claim(self.queue, "w", 10, ["t"], 30_000)]
        assert got == [low[2], high[0], high[1], low[0], low[1]]

    async def test_a_reprioritised_activity_keeps_its_place_among_equals(self, backend: Backend) -> None:
        # one batch shares one creation millisecond: equals are claimed in id (creation) order on every backend;
        # the memory store pushed a re-prioritised row behind the others of its new priority
        ids = await self._enqueue(backend, 3, priority=1)
        ids += await self._enqueue(backend, 2, priority=2)
        await backend.set_priority(self.queue, F(ids=(ids[0],)), 2)  # created first: first among priority 2
        await backend.set_priority(self.queue, F(ids=(ids[3],)), 3)
        await backend.set_priority(self.queue, F(ids=(ids[3],)), 2)  # up and back: its place is unchanged
        got = [c.id for c in await backend.claim(self.queue, "w", 10, ["t"], 30_000)]
        assert got == [ids[0], ids[3], ids[4], ids[1], ids[2]]

    async def test_set_priority_by_filter_also_applies_to_scheduled(self, backend: Backend) -> None:
        (sched,) = await self._enqueue(backend, 1, "s", run_at_ms=now_ms() + 600_000, priority=2)
        pend = await self._enqueue(backend, 2, "s", priority=2)
        res = await backend.set_priority(self.queue, F(activity_types=("s",)), 1)
        assert sorted(res.changed) == sorted([sched, *pend])
        await backend.run_now(self.queue, F(ids=(sched,)))
        (c,) = await backend.claim(self.queue, "w", 1, ["s"], 30_000)
        assert c.priority == 1

    # ------------------------------------------------------------- delete
    async def test_delete_removes_finished_activities_with_events_and_keys(self, backend: Backend) -> None:
        ex = rq.ActivityExecutor(backend, self.queue)
        keyed = await ex.activity("k").idempotency_key("order-1").execute()
        (c,) = await backend.claim(self.queue, "w", 1, ["k"], 30_000)
        await backend.ack(self.queue, [Ack(c.id, c.claim_token, AckOutcome.COMPLETED, b"1")])
        failed = await self._finish(backend, AckOutcome.FAILED, 2, "f")
        (pending,) = await self._enqueue(backend, 1, "p")
        seen: list[rq.ActivityEvent] = []

        async def watch() -> None:
            async for ev in backend.event_stream(self.queue):
                seen.append(ev)
                if sum(e.event_type == "deleted" for e in seen) == 3:
                    return

        task = asyncio.create_task(watch())
        await asyncio.sleep(0.2)
        res = await backend.delete_activities(self.queue, F(ids=(keyed.activity_id, *failed, pending)))
        assert sorted(res.changed) == sorted([keyed.activity_id, *failed]) and res.skipped == 1
        for aid in (keyed.activity_id, *failed):
            assert await backend.get_activity(aid) is None
            assert await backend.get_events(aid) == []
            assert await backend.get_result(aid) is None
        assert await backend.get_activity(pending) is not None
        assert (await backend.stats(self.queue)).total == 1
        assert await _all_pages(backend, self.queue, F(), 10) == [pending]
        await asyncio.wait_for(task, 5)
        assert {e.activity_id for e in seen if e.event_type == "deleted"} == {keyed.activity_id, *failed}
        again = await ex.activity("k").idempotency_key("order-1").execute()
        assert again.created and again.activity_id != keyed.activity_id  # the key went with it

    async def test_delete_by_filter_and_limit(self, backend: Backend) -> None:
        done = await self._finish(backend, AckOutcome.COMPLETED, 5, "c")
        await self._enqueue(backend, 2, "c")
        res = await backend.delete_activities(self.queue, F(activity_types=("c",)), limit=2)
        assert res.changed == list(reversed(done))[:2] and res.skipped == 2
        res = await backend.delete_activities(self.queue, F(statuses=("completed",)))
        assert sorted(res.changed) == sorted(done[:3]) and res.skipped == 0
        assert (await backend.stats(self.queue)).total == 2

    # -------------------------------------------------- live stream, summary
    async def test_actions_appear_on_the_live_stream(self, backend: Backend) -> None:
        (a,) = await self._enqueue(backend, 1, run_at_ms=now_ms() + 600_000)
        (failed,) = await self._finish(backend, AckOutcome.FAILED, 1, "f")
        seen: list[tuple[str, str]] = []
        want = {(a, "priority_changed"), (a, "run_now"), (failed, "retry_requested"), (a, "cancelled")}

        async def watch() -> None:
            async for ev in backend.event_stream(self.queue):
                seen.append((ev.activity_id, ev.event_type))
                if want <= set(seen):
                    return

        task = asyncio.create_task(watch())
        await asyncio.sleep(0.2)
        await backend.set_priority(self.queue, F(ids=(a,)), 3)
        await backend.run_now(self.queue, F(ids=(a,)))
        await backend.retry_activities(self.queue, F(ids=(failed,)))
        await backend.cancel_activities(self.queue, F(ids=(a,)))
        await asyncio.wait_for(task, 5)

    async def test_engine_drains_after_priority_and_run_now_changes(self, backend: Backend) -> None:
        engine = self.engine(backend)
        done: list[str] = []

        @engine.activity("t")
        async def t(payload: Any, ctx: rq.ActivityContext) -> None:
            done.append(ctx.activity_id)

        ids = await self._enqueue(backend, 4, run_at_ms=now_ms() + 600_000)
        await backend.set_priority(self.queue, F(ids=tuple(ids[:2])), 4)
        await backend.run_now(self.queue, F(statuses=("scheduled",)))
        async with engine:
            await eventually(lambda: _count(backend, self.queue, "completed", 4), what="4 completed")
        assert sorted(done) == sorted(ids)


async def _count(backend: Backend, queue: str, status: str, n: int) -> bool:
    return bool(getattr(await backend.stats(queue), status) >= n)


async def wait_status_of(backend: Backend, activity_id: str, status: str) -> None:
    async def check() -> bool:
        snap = await backend.get_activity(activity_id)
        return snap is not None and snap.status == status

    await eventually(check, 5.0, f"{activity_id} to be {status}")
