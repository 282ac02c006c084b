"""Conformance: progress reported by a running handler (issue 27, item 6).

Mixed into every backend's conformance class beside :class:`tests.conformance.BackendConformance`.

``ctx.set_progress(value)`` keeps the latest value of a running attempt in
the engine, which writes it (coalesced) under the attempt's claim with
:meth:`Backend.set_progress`; :meth:`Backend.get_activity` gives it back as
JSON text (``ActivitySnapshot.progress``), each write records a ``progress``
event (so the live stream carries it), and it is kept after the attempt and
across a retry until the next attempt reports its own.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import runnerq_fast as rq
from runnerq_fast.ids import new_activity_id
from runnerq_fast.models import Ack, AckOutcome, ClaimedActivity, EventType, ProgressUpdate
from runnerq_fast.progress import decode_progress
from runnerq_fast.storage import Backend
from tests.conformance import FAST, eventually, new


class ProgressConformance:
    """Progress on every backend. Subclasses provide ``backend``."""

    queue = "conf"

    def progress_engine(self, backend: Backend, **kw: Any) -> rq.WorkerEngine:
        return rq.WorkerEngine(backend, **{**FAST, "queue_name": self.queue, **kw})

    async def _events(self, backend: Backend, activity_id: str) -> list[rq.ActivityEvent]:
        return [e for e in await backend.get_events(activity_id) if e.event_type == "progress"]

    # ------------------------------------------------------------ the store
    async def test_progress_is_written_under_the_claim_and_kept_after_it(self, backend: Backend) -> None:
        q = self.queue
        item = new()
        await backend.enqueue(q, [item])
        assert (await backend.get_activity(item.id)).progress is None  # type: ignore[union-attr]
        [claimed] = await backend.claim(q, "w", 1, None, 30_000)
        tok = claimed.claim_token
        assert await backend.set_progress(q, [ProgressUpdate(item.id, tok, "0.25")]) == []
        snap = await backend.get_activity(item.id)
        assert snap is not None and snap.progress == "0.25" and decode_progress(snap.progress) == 0.25
        doc = '{"done":3,"total":12,"stage":"résumé"}'
        assert await backend.set_progress(q, [ProgressUpdate(item.id, tok, doc)]) == []
        snap = await backend.get_activity(item.id)
        assert snap is not None and decode_progress(snap.progress) == {"done": 3, "total": 12, "stage": "résumé"}
        # each write is a progress event whose detail is the value
        assert [e.detail for e in await self._events(backend, item.id)] == ["0.25", doc]
        # a stale claim, an unknown id and a malformed one write nothing
        other, unknown = new(), new_activity_id()
        await backend.enqueue(q, [other])
        lost = await backend.set_progress(q, [
            ProgressUpdate(item.id, "not-the-token", "0.9"),
            ProgressUpdate(other.id, tok, "0.9"),  # pending: no claim
            ProgressUpdate(unknown, tok, "0.9"),
            ProgressUpdate("not-an-id", tok, "0.9"),
        ])
        assert lost == [item.id, other.id, unknown, "not-an-id"]
        assert decode_progress((await backend.get_activity(item.id)).progress) == {  # type: ignore[union-attr]
            "done": 3, "total": 12, "stage": "résumé"}
        assert (await backend.get_activity(other.id)).progress is None  # type: ignore[union-attr]
        assert len(await self._events(backend, item.id)) == 2 and await self._events(backend, other.id) == []
        # the ack ends the claim; the value stays, and later writes under that claim are refused
        assert await backend.set_progress(q, [ProgressUpdate(item.id, tok, "1.0")]) == []
        assert await backend.ack(q, [Ack(item.id, tok, int(AckOutcome.COMPLETED), b"1")]) == []
        assert await backend.set_progress(q, [ProgressUpdate(item.id, tok, "0.5")]) == [item.id]
        snap = await backend.get_activity(item.id)
        assert snap is not None and snap.status == "completed" and snap.progress == "1.0"
        # listings leave it out (it is read with one activity)
        assert all(s.progress is None for s in await backend.list_activities(q, None))
        assert await backend.set_progress(q, []) == []

    async def test_progress_survives_a_retry_until_the_next_attempt_reports(self, backend: Backend) -> None:
        q = self.queue
        item = new(max_retries=2)
        await backend.enqueue(q, [item])
        [first] = await backend.claim(q, "w", 1, None, 30_000)
        await backend.set_progress(q, [ProgressUpdate(item.id, first.claim_token, "0.75")])
        await backend.ack(q, [Ack(item.id, first.claim_token, int(AckOutcome.RETRY), None, "boom", 0)])
        snap = await backend.get_activity(item.id)
        assert snap is not None and snap.status in ("retrying", "pending") and snap.progress == "0.75"

        async def claimed() -> bool:
            got = await backend.claim(q, "w", 1, None, 30_000)
            if got:
                claimed_again.extend(got)
            return bool(got)

        claimed_again: list[ClaimedActivity] = []
        await eventually(claimed, 5.0, "the retry to be claimed")
        second = claimed_again[0]
        snap = await backend.get_activity(item.id)
        assert snap is not None and snap.status == "processing" and snap.progress == "0.75"
        assert await backend.set_progress(q, [ProgressUpdate(item.id, first.claim_token, "0.9")]) == [item.id]
        assert await backend.set_progress(q, [ProgressUpdate(item.id, second.claim_token, "0.1")]) == []
        assert (await backend.get_activity(item.id)).progress == "0.1"  # type: ignore[union-attr]

    async def test_progress_events_reach_the_live_stream(self, backend: Backend) -> None:
        q = self.queue
        insp = rq.QueueInspector(backend, q)
        seen: list[rq.ActivityEvent] = []

        async def consume() -> None:
            async for ev in insp.live_events():
                if ev.event_type == "progress":
                    seen.append(ev)
                    return

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.1)
        item = new()
        await backend.enqueue(q, [item])
        [claimed] = await backend.claim(q, "w", 1, None, 30_000)
        await backend.set_progress(q, [ProgressUpdate(item.id, claimed.claim_token, '{"step":"upload"}')])
        await asyncio.wait_for(task, 5)
        assert seen[0].activity_id == item.id and seen[0].detail == '{"step":"upload"}'
        assert seen[0].event_type == EventType.PROGRESS

    # ------------------------------------------------------------ the engine
    @pytest.mark.parametrize("plain", [False, True], ids=["async", "plain-def"])
    async def test_a_handler_reports_progress_seen_while_it_runs(self, backend: Backend, plain: bool) -> None:
        engine = self.progress_engine(backend)
        go_on = threading.Event()
        calls = 20_000

        if plain:
            @engine.activity("t")
            def work_plain(payload: Any, ctx: rq.ActivityContext) -> str:
                for i in range(calls):  # a tight loop: the engine writes a few of these, not 20,000
                    ctx.set_progress(i / calls)
                ctx.set_progress({"stage": "waiting", "done": calls})
                go_on.wait(10)
                ctx.set_progress(1.0)
                return "done"
        else:
            @engine.activity("t")
            async def work(payload: Any, ctx: rq.ActivityContext) -> str:
                for i in range(calls):
                    ctx.set_progress(i / calls)
                ctx.set_progress({"stage": "waiting", "done": calls})
                await asyncio.to_thread(go_on.wait, 10)
                ctx.set_progress(1.0)
                assert ctx.progress == 1.0
                return "done"

        fut = await engine.executor.activity("t").execute()
        try:
            async with engine:
                async def midway() -> bool:
                    return await fut.progress() == {"stage": "waiting", "done": calls}

                await eventually(midway, 5.0, "the progress reported midway")
                snap = await backend.get_activity(fut.activity_id)
                assert snap is not None and snap.status == "processing"
                go_on.set()
                assert await fut.result(timeout=5) == "done"
        finally:
            go_on.set()
        # the last value is stored before the ack that ends the claim it is written under
        snap = await backend.get_activity(fut.activity_id)
        assert snap is not None and snap.status == "completed" and snap.progress == "1.0"
        assert await fut.progress() == 1.0
        events = await self._events(backend, fut.activity_id)
        assert 2 <= len(events) <= 10, [e.detail for e in events]  # coalesced
        assert events[-1].detail == "1.0"
