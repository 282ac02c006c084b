"""The memory backend on the compiled core and on the pure core: one scenario, the same outcome.

Each implementation runs in a fresh interpreter (the selector decides at
import), and the observable results (claim order, ack rejections, statuses,
event kinds, results, reaping) are compared. The memory conformance suite
runs against whichever core is selected, once per CI mode.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from runnerq_fast import speedups

SCENARIO = textwrap.dedent(
    """
    import asyncio, json, random
    from runnerq_fast.backends.memory import MemoryBackend
    from runnerq_fast.models import Ack, LeaseRef, NewActivity
    import runnerq_fast.speedups as s

    async def main():
        rnd = random.Random(7)
        b = MemoryBackend()
        items = [
            NewActivity(f"{i:032x}", rnd.choice(["a", "b"]), b'{"i":%d}' % i, priority=rnd.randint(1, 4),
                        max_retries=rnd.choice([0, 1, 3000]),
                        run_at_ms=rnd.choice([0, 0, 0, 4102444800000]),
                        idempotency_key=rnd.choice([None, None, "k1", "k2"]), on_duplicate=rnd.randint(1, 4))
            for i in range(300)
        ]
        out = {"enqueue": [(r.activity_id, r.outcome) for r in await b.enqueue("q", items)]}
        claims = []
        for round_ in range(12):
            batch = await b.claim("q", "w", 37, None if round_ % 2 else ["a"], 30_000)
            claims.append([(c.id, c.priority, c.retry_count) for c in batch])
            acks = [Ack(c.id, c.claim_token if j % 7 else "stale", (j % 4) + 1, b"1" if j % 4 == 0 else None,
                        None if j % 4 == 0 else "err", 0) for j, c in enumerate(batch)]
            out.setdefault("rejected", []).append(await b.ack("q", acks))
            if batch:
                out.setdefault("lost", []).append((await b.extend_leases("q", [LeaseRef(c.id, c.claim_token)
                                                                          for c in batch[:5]], 1)).lost)
        out["claims"] = claims
        await asyncio.sleep(0.01)
        rep = await b.requeue_expired("q", 1000)
        out["reaped"] = [sorted(rep.requeued), sorted(rep.dead_lettered)]
        out["cancel"] = [await b.cancel(f"{i:032x}") for i in range(0, 300, 11)]
        out["stats"] = list((await b.stats("q")).__struct_fields__)
        st = await b.stats("q")
        out["counts"] = [getattr(st, f) for f in st.__struct_fields__]
        out["events"] = {f"{i:032x}": [e.event_type for e in await b.get_events(f"{i:032x}")] for i in range(300)}
        out["results"] = {f"{i:032x}": (lambda r: None if r is None else [r.status, r.data, r.error])(
            await b.get_result(f"{i:032x}")) for i in range(300)}
        snap = await b.get_activity(f"{5:032x}")
        out["snapshot"] = None if snap is None else [snap.status, snap.retry_count, snap.last_error]
        out["dead"] = sorted(d.activity.id for d in await b.list_dead_letter("q", 0, 1000))
        print(json.dumps({"enabled": s.enabled, "out": out}, default=str))

    asyncio.run(main())
    """
)


def _run(no_ext: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k != "RUNNERQ_NO_EXTENSIONS"}
    env["RUNNERQ_NO_EXTENSIONS"] = no_ext
    proc = subprocess.run([sys.executable, "-c", SCENARIO], capture_output=True, text=True, env=env,
                          timeout=60, check=True)
    doc: dict[str, object] = json.loads(proc.stdout)
    return doc


@pytest.mark.skipif(not speedups.enabled and not speedups.disabled_by_env, reason="extensions not built")
def test_compiled_and_pure_memory_cores_agree() -> None:
    compiled, pure = _run("0"), _run("1")
    assert compiled["enabled"] is True and pure["enabled"] is False
    out = compiled["out"]
    assert isinstance(out, dict) and any(out["claims"]) and any(out["rejected"])  # the scenario exercised them
    assert out == pure["out"]


async def test_stored_rows_events_and_results_are_not_gc_tracked() -> None:
    """What the memory store keeps per activity holds only scalars, so it stays out of the cyclic GC.

    A drain allocates events and results for every activity; were they tracked, each would count
    towards the next collection and every full collection would visit all of them (and every stored
    row on the compiled core).
    """
    import gc

    from runnerq_fast.backends.memory import MemoryBackend
    from runnerq_fast.models import Ack, AckOutcome, NewActivity

    b = MemoryBackend()
    await b.enqueue("q", [NewActivity(f"{i:032x}", "t", b"{}") for i in range(3)])
    got = await b.claim("q", "w", 3, None, 30_000)
    assert await b.ack("q", [Ack(c.id, c.claim_token, int(AckOutcome.COMPLETED), b"1") for c in got]) == []
    events = [e for c in got for e in await b.get_events(c.id)]
    results = [await b.get_result(c.id) for c in got]
    assert [e.event_type for e in events].count("completed") == 3
    assert not any(gc.is_tracked(e) for e in events)
    assert all(r is not None and not gc.is_tracked(r) for r in results)
    if speedups.enabled:
        assert not any(gc.is_tracked(b._rows[c.id]) for c in got)


def _ready_queue_impls() -> list[Any]:
    from runnerq_fast.backends import _memstore_py

    impls: list[Any] = [pytest.param(_memstore_py.ReadyQueue, id="pure")]
    try:
        from runnerq_fast.backends import _memstore
    except ImportError:
        return impls
    return [*impls, pytest.param(_memstore.ReadyQueue, id="compiled")]


@pytest.mark.parametrize("cls", _ready_queue_impls())
def test_ready_queue_pops_in_key_order_whatever_the_push_order(cls: Any) -> None:
    """Entries pushed in key order (the sorted run), out of order (the heap) and both mixed come out as
    from a heap of (key, id), each as (seq, id) with seq the key's low 64 bits."""
    import heapq
    import random

    rnd = random.Random(3)
    base = -(3 << 300)  # negative keys, as _ready_key makes them for every priority
    keys = [base + (i << 70) + i for i in range(0, 30_000, 3)]
    # an ordered run, then random keys, then an ordered run again, popping between the pushes
    pushes = keys[:400] + rnd.sample(keys[400:5000], 600) + keys[5000:5400]
    q, ref = cls(), list[tuple[int, str]]()
    for i, k in enumerate(pushes):
        q.push(k, f"id{k}")
        heapq.heappush(ref, (k, f"id{k}"))
        if i % 5 == 4:
            assert q.peek() == ref[0][0]
            key, aid = heapq.heappop(ref)
            assert q.pop() == (key & ((1 << 64) - 1), aid)
        assert len(q) == len(ref)
    while ref:
        assert q.peek() == ref[0][0]
        key, aid = heapq.heappop(ref)
        assert q.pop() == (key & ((1 << 64) - 1), aid)
    assert len(q) == 0 and not q
