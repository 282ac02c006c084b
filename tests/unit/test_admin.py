"""QueueAdmin and the QueueInspector listing methods (on the memory backend; the semantics of the
backend operations they call are in tests/conformance_ops.py)."""

from __future__ import annotations

from typing import Any

import pytest

import runnerq_fast as rq
from runnerq_fast.models import Ack, AckOutcome
from tests.conformance import new


async def _failed(backend: rq.MemoryBackend, n: int) -> list[str]:
    ids = [r.activity_id for r in await backend.enqueue("q", [new("f") for _ in range(n)])]
    claimed = await backend.claim("q", "w", n, ["f"], 30_000)
    await backend.ack("q", [Ack(c.id, c.claim_token, AckOutcome.FAILED, None, "x") for c in claimed])
    return ids


async def test_admin_acts_by_one_id_by_ids_by_filter_and_by_both() -> None:
    backend = rq.MemoryBackend()
    admin = rq.QueueAdmin(backend, "q")
    a, b, c = await _failed(backend, 3)
    assert (await admin.retry(a)).changed == [a]
    assert (await admin.retry([b], rq.ActivityFilter(statuses=("dead_letter",)))).changed == []  # both must match
    res = await admin.retry(flt=rq.ActivityFilter(statuses=("failed",)))
    assert sorted(res.changed) == sorted([b, c]) and res.action == "retry"
    assert sorted((await admin.set_priority(4, [a, b])).changed) == sorted([a, b])
    snap = await backend.get_activity(a)
    assert snap is not None and snap.priority == 4
    assert sorted((await admin.cancel(flt=rq.ActivityFilter())).changed) == sorted([a, b, c])
    assert sorted((await admin.delete(flt=rq.ActivityFilter(statuses=("cancelled",)))).changed) == sorted([a, b, c])
    assert (await backend.stats("q")).total == 0


@pytest.mark.parametrize(
    "call",
    [
        lambda adm: adm.retry(),
        lambda adm: adm.cancel(None, None),
        lambda adm: adm.run_now(["x"], limit=0),
        lambda adm: adm.set_priority(7, ["x"]),
        lambda adm: adm.delete(flt=rq.ActivityFilter(statuses=("nope",))),
    ],
)
async def test_admin_refuses_bad_input(call: Any) -> None:
    backend = rq.MemoryBackend()
    await _failed(backend, 1)
    with pytest.raises(rq.InvalidActivityError):
        await call(rq.QueueAdmin(backend, "q"))
    assert (await backend.stats("q")).failed == 1


async def test_engine_admin_and_inspector_listing_methods() -> None:
    backend = rq.MemoryBackend()
    engine = rq.WorkerEngine(backend, queue_name="q")
    (parent,) = await backend.enqueue("q", [new("p")])
    kids = [r.activity_id for r in await backend.enqueue("q", [new("k", parent_id=parent.activity_id)
                                                                for _ in range(3)])]
    insp = engine.inspector()
    page = await insp.query(limit=2)
    assert len(page.items) == 2 and page.next_cursor is not None
    rest = await insp.query(limit=2, cursor=page.next_cursor)
    assert {s.id for s in page.items + rest.items} == {parent.activity_id, *kids} and rest.next_cursor is None
    assert await insp.count() == rq.ActivityCount(4, True)
    assert await insp.count(rq.ActivityFilter(activity_types=("k",)), cap=2) == rq.ActivityCount(2, False)
    children = await insp.children(parent.activity_id)
    assert [s.id for s in children.items] == kids  # oldest first
    (summary,) = await insp.queues()
    assert summary.queue == "q" and summary.by_type == {"p": {"pending": 1}, "k": {"pending": 3}}
    assert (await engine.admin().cancel(kids[0])).changed == [kids[0]]
