"""Conformance: stored data keeps its integrity (issue 11, items 1, 2 and 10), on every backend.

* Hostile names: queue names, activity types and idempotency keys made of the
  characters a store uses to build its own names (``{``, ``}``, ``:``, ``%``)
  are valid everywhere and stay isolated from each other.
* Corrupt rows: a stored row that cannot be decoded is dead-lettered alone, with
  its reason, by a claim or the reaper; listings and ``get_activity`` show it with
  its reason instead of raising. A backend's test module provides two fixtures,
  each an async callable ``(queue, activity_id)`` that damages the stored row in
  place, parametrized over the kinds of damage that store allows:
  ``corrupt_row`` makes the row itself undecodable (a numeric field that is no
  number...), ``corrupt_payload`` its payload (the engine's part). Either skips
  the test where the store cannot hold such damage (memory holds typed objects;
  PostgreSQL's typed columns decode whatever they hold).
* Idempotency keys live ``idempotency_ttl``, however soon the holder's result
  expires. The fixture ``short_results`` is the backend under test keeping
  finished activities 0.2 s where it expires them (Redis), else ``backend``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import pytest

import runnerq_fast as rq
from runnerq_fast.models import Ack, AckOutcome
from runnerq_fast.storage import Backend
from runnerq_fast.web import wire
from tests.conformance import FAST, new, now_ms, wait_status

Corrupt = Callable[[str, str], Awaitable[None]]

HOSTILE_QUEUES = ["A", "A}:idem:1:t:k", "A}:sched", "A}", "{A}", "A%7D", "%", "A}:ready:x"]
HOSTILE_TYPES = ["t", "x}:sched", "{t}", "t:ready:x", "%7D"]
HOSTILE_KEYS = ["k", "k}:wake", "{k}"]


class IntegrityConformance:
    """Subclasses provide the fixtures ``backend``, ``short_results``, ``corrupt_row`` and ``corrupt_payload``."""

    queue = "conf-integrity"

    def engine(self, backend: Backend, **kw: Any) -> rq.WorkerEngine:
        return rq.WorkerEngine(backend, **{**FAST, "queue_name": self.queue, **kw})

    # ------------------------------------------------ item 1: names never collide
    async def test_hostile_names_are_valid_and_isolated(self, backend: Backend) -> None:
        mine: dict[tuple[str, str], set[str]] = {}
        later: dict[str, str] = {}
        for q in HOSTILE_QUEUES:
            ex = rq.ActivityExecutor(backend, q)
            for t in HOSTILE_TYPES:
                for k in HOSTILE_KEYS:
                    fut = await ex.activity(t).payload({"q": q}).idempotency_key(k, rq.OnDuplicate.NO_REUSE).execute()
                    assert fut.created
                    mine.setdefault((q, t), set()).add(fut.activity_id)
            later[q] = (await ex.activity("t").delay(0.3).execute()).activity_id
        for q in HOSTILE_QUEUES:
            ex = rq.ActivityExecutor(backend, q)
            for t in HOSTILE_TYPES:
                for k in HOSTILE_KEYS:  # each key is held in its own queue, by its own type
                    again = await ex.activity(t).idempotency_key(k, rq.OnDuplicate.RETURN_EXISTING).execute()
                    assert not again.created and again.activity_id in mine[(q, t)]
            stats = await backend.stats(q)
            assert (stats.pending, stats.scheduled) == (len(HOSTILE_TYPES) * len(HOSTILE_KEYS), 1)
            listed = {s.id for s in await backend.list_activities(q, None, limit=100)}
            assert listed == {i for (qq, _), ids in mine.items() if qq == q for i in ids} | {later[q]}
        await asyncio.sleep(0.35)  # every delayed activity is due: each is claimed from its own queue only
        for q in HOSTILE_QUEUES:
            for t in HOSTILE_TYPES:
                got = await backend.claim(q, "w", 100, [t], 5000)
                assert {a.id for a in got} == mine[(q, t)] | ({later[q]} if t == "t" else set())
                assert {a.activity_type for a in got} == {t}
            assert await backend.claim(q, "w", 100, None, 5000) == []

    async def test_engine_runs_a_queue_with_a_hostile_name(self, backend: Backend) -> None:
        q = "jobs}:sched{x}%"
        engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": q})

        @engine.activity("t}:x")
        async def echo(payload: Any, ctx: rq.ActivityContext) -> Any:
            return payload

        async with engine:
            fut = await engine.executor.activity("t}:x").payload({"v": 1}).execute()
            assert await fut.result(timeout=10) == {"v": 1}
        snap = await backend.get_activity(fut.activity_id)
        assert snap is not None and snap.queue == q and snap.status == "completed"

    # ------------------------------------------------ item 10: idempotency keys live idempotency_ttl
    @pytest.mark.parametrize("behaviour", [rq.OnDuplicate.RETURN_EXISTING, rq.OnDuplicate.NO_REUSE,
                                           rq.OnDuplicate.ALLOW_REUSE_ON_FAILURE])
    async def test_an_idempotency_key_outlives_the_result_until_its_ttl(
        self, backend: Backend, short_results: Backend, behaviour: rq.OnDuplicate
    ) -> None:
        """``short_results``: the backend under test keeping finished activities 0.2 s (where it expires them)."""
        b = short_results
        q = self.queue
        ex = rq.ActivityExecutor(b, q, rq.WorkerConfig(idempotency_ttl=1.0))
        first = await ex.activity("t").idempotency_key("k", behaviour).execute()
        (a,) = await b.claim(q, "w", 1, None, 5000)
        assert await b.ack(q, [Ack(a.id, a.claim_token, AckOutcome.COMPLETED, b"1")]) == []
        await asyncio.sleep(0.3)
        await b.requeue_expired(q, 100)  # where results expire, this one is gone now
        if behaviour == rq.OnDuplicate.NO_REUSE:
            with pytest.raises(rq.DuplicateActivityError) as info:
                await ex.activity("t").idempotency_key("k", behaviour).execute()
            assert info.value.existing_id == first.activity_id
        else:
            again = await ex.activity("t").idempotency_key("k", behaviour).execute()
            assert not again.created and again.activity_id == first.activity_id
        await asyncio.sleep(0.8)  # the key expired
        after = await ex.activity("t").idempotency_key("k", behaviour).execute()
        assert after.created and after.activity_id != first.activity_id

    async def test_a_failed_holder_whose_result_expired_still_allows_reuse_on_failure(
        self, backend: Backend, short_results: Backend
    ) -> None:
        b = short_results
        q = self.queue
        ex = rq.ActivityExecutor(b, q, rq.WorkerConfig(idempotency_ttl=30.0))
        first = await ex.activity("t").idempotency_key("k", rq.OnDuplicate.ALLOW_REUSE_ON_FAILURE).execute()
        (a,) = await b.claim(q, "w", 1, None, 5000)
        assert await b.ack(q, [Ack(a.id, a.claim_token, AckOutcome.FAILED, None, "no")]) == []
        await asyncio.sleep(0.3)
        await b.requeue_expired(q, 100)
        again = await ex.activity("t").idempotency_key("k", rq.OnDuplicate.ALLOW_REUSE_ON_FAILURE).execute()
        assert again.created and again.activity_id != first.activity_id
        held = await ex.activity("t").idempotency_key("k", rq.OnDuplicate.RETURN_EXISTING).execute()
        assert not held.created and held.activity_id == again.activity_id

    # ------------------------------------------------ item 2: a corrupt row is dead-lettered alone
    async def test_claim_dead_letters_a_corrupt_row_alone(self, backend: Backend, corrupt_row: Corrupt) -> None:
        q = self.queue
        results = await backend.enqueue(q, [new("t") for _ in range(5)])
        ids = [r.activity_id for r in results]
        bad = ids[2]
        await corrupt_row(q, bad)
        got = await backend.claim(q, "w", 10, None, 5000)
        assert sorted(a.id for a in got) == sorted(i for i in ids if i != bad)
        assert all(a.retry_count == 0 for a in got)
        await self._assert_dead_lettered(backend, q, bad)
        assert await backend.claim(q, "w", 10, None, 5000) == []  # nothing left behind, nothing wedged
        stats = await backend.stats(q)
        assert (stats.processing, stats.dead_letter, stats.total) == (4, 1, 5)

    async def test_the_reaper_dead_letters_a_corrupt_row_alone(self, backend: Backend, corrupt_row: Corrupt) -> None:
        q = self.queue
        await backend.enqueue(q, [new("t") for _ in range(6)])
        got = await backend.claim(q, "w", 10, None, 50)
        bad = got[0].id
        await corrupt_row(q, bad)
        await asyncio.sleep(0.1)
        report = await backend.requeue_expired(q, 100)
        good = sorted(a.id for a in got if a.id != bad)
        assert sorted(report.requeued) == good
        await self._assert_dead_lettered(backend, q, bad)
        # the good ones shared an expired claim: requeued uncounted, as suspects each claimed alone
        assert await backend.claim(q, "w", 10, None, 5000) == []
        assert await backend.suspects_ready(q, None) == 5
        again = [a for _ in good for a in await backend.claim_suspect(q, "w", None, 5000)]
        assert sorted(a.id for a in again) == good and all(a.retry_count == 0 for a in again)
        stats = await backend.stats(q)
        assert (stats.processing, stats.dead_letter, stats.pending) == (5, 1, 0)

    async def test_listings_and_get_activity_show_a_corrupt_row_with_its_reason(
        self, backend: Backend, corrupt_row: Corrupt
    ) -> None:
        q = self.queue
        results = await backend.enqueue(q, [new("t") for _ in range(3)])
        bad = results[1].activity_id
        await corrupt_row(q, bad)
        snap = await backend.get_activity(bad)
        assert snap is not None and snap.id == bad and snap.corrupt is not None
        listed = await backend.list_activities(q, None)
        assert {s.id for s in listed} == {r.activity_id for r in results}
        assert [s.id for s in listed if s.corrupt is not None] == [bad]
        page = await backend.query_activities(q, rq.ActivityFilter())
        assert [s.id for s in page.items if s.corrupt is not None] == [bad]
        assert len(page.items) == 3
        claimed = await backend.claim(q, "w", 10, None, 5000)
        assert sorted(a.id for a in claimed) == sorted(r.activity_id for r in results if r.activity_id != bad)
        [record] = await backend.list_dead_letter(q)
        assert record.activity.id == bad and record.error is not None and "corrupt" in record.error

    async def test_the_http_form_of_a_corrupt_row_is_valid_json_with_its_reason(
        self, backend: Backend, corrupt_row: Corrupt
    ) -> None:
        await self._wire_form_is_valid_json(backend, corrupt_row)

    async def test_the_http_form_of_a_corrupt_payload_is_valid_json_with_its_reason(
        self, backend: Backend, corrupt_payload: Corrupt
    ) -> None:
        await self._wire_form_is_valid_json(backend, corrupt_payload)

    async def _wire_form_is_valid_json(self, backend: Backend, corrupt: Corrupt) -> None:
        q = self.queue
        results = await backend.enqueue(q, [new("t") for _ in range(3)])
        bad, good = results[1].activity_id, results[0].activity_id
        await corrupt(q, bad)
        page = await backend.query_activities(q, rq.ActivityFilter())
        snap = await backend.get_activity(bad)
        assert snap is not None
        # a listing embeds the stored JSON text as it is: a damaged payload made the whole body invalid JSON
        body = msgspec.json.decode(msgspec.json.encode([wire.activity_view(s) for s in [*page.items, snap]]))
        views = {v["id"]: v for v in body}
        assert views[good]["corrupt"] is None and views[good]["payload"] == {}
        assert views[bad]["corrupt"] is not None and views[bad]["corrupt"].startswith("corrupt row: ")
        assert body[-1] == views[bad]

    async def test_an_engine_moves_past_a_corrupt_row(self, backend: Backend, corrupt_row: Corrupt) -> None:
        await self._engine_moves_past(backend, corrupt_row)

    async def test_an_engine_moves_past_a_corrupt_payload(self, backend: Backend, corrupt_payload: Corrupt) -> None:
        await self._engine_moves_past(backend, corrupt_payload)

    async def _engine_moves_past(self, backend: Backend, corrupt: Corrupt) -> None:
        q = self.queue
        engine = self.engine(backend)
        ran: list[int] = []

        @engine.activity("t")
        async def t(payload: Any, ctx: rq.ActivityContext) -> None:
            ran.append(payload["i"])

        ex = engine.executor
        futs = [await ex.activity("t").payload({"i": i}).execute() for i in range(10)]
        await corrupt(q, futs[3].activity_id)
        async with engine:
            await wait_status(backend, futs[-1].activity_id, "completed", timeout=10)
            await wait_status(backend, futs[3].activity_id, "dead_letter", timeout=10)
            for f in futs[:3] + futs[4:]:
                await wait_status(backend, f.activity_id, "completed", timeout=10)
        assert sorted(ran) == [i for i in range(10) if i != 3]

    async def _assert_dead_lettered(self, backend: Backend, q: str, bad: str) -> None:
        snap = await backend.get_activity(bad)
        assert snap is not None and snap.status == "dead_letter"
        assert snap.last_error is not None and "corrupt" in snap.last_error
        [record] = await backend.list_dead_letter(q)
        assert record.activity.id == bad and record.dead_lettered_at_ms >= now_ms() - 60_000
